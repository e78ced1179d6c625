//! The search benchmark: `grep_search` and `glob_search` through the release `jianmu`
//! against `rg` and `fd` on the same large real tree (Debian's `linux-source-6.1`),
//! each the best of several runs, in one run of `cargo xtask bench`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{cargo, root, run as run_cmd};

const TARBALL: &str = "/usr/src/linux-source-6.1.tar.xz";

/// The extracted tree, made on first use. It lives outside this repository: the
/// repository's `.gitignore` (which ignores `target/`) would otherwise hide it from
/// both rg and grep_search. `JIANMU_BENCH_DIR` moves it.
pub(crate) fn tree() -> anyhow::Result<PathBuf> {
    let data = std::env::var_os("JIANMU_BENCH_DIR")
        .map_or_else(|| PathBuf::from("/var/tmp/jianmu-bench"), PathBuf::from);
    let tree = data.join("linux-source-6.1");
    if tree.join("Makefile").exists() {
        return Ok(tree);
    }
    if !Path::new(TARBALL).exists() {
        eprintln!("installing linux-source-6.1 for the search benchmark");
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "-qq", "linux-source-6.1"]);
        c.env("DEBIAN_FRONTEND", "noninteractive");
        run_cmd(c).context("the search benchmark needs Debian's linux-source-6.1")?;
    }
    std::fs::create_dir_all(&data)?;
    eprintln!("extracting {TARBALL} (once)");
    let mut c = Command::new("tar");
    c.args(["-xf", TARBALL, "-C"]).arg(&data);
    run_cmd(c)?;
    Ok(tree)
}

fn fd() -> &'static str {
    let ok = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok("fdfind") { "fdfind" } else { "fd" }
}

/// Best wall time of `runs` runs of `cmd` in `dir`, output discarded.
fn best(program: &Path, args: &[String], dir: &Path, runs: usize) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let start = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("cannot run {}", program.display()))?;
        let took = start.elapsed();
        // rg exits 1 when nothing matches; anything else is a failure.
        if status.code().is_none_or(|c| c > 1) {
            bail!("{} {args:?} failed: {status}", program.display());
        }
        best = best.min(took);
    }
    Ok(best)
}

pub(crate) fn run(quick: bool) -> anyhow::Result<()> {
    let tree = tree()?;
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
    run_cmd(c)?;
    let jianmu = root().join("target/release/jianmu");
    let runs = if quick { 2 } else { 5 };
    let ws = tree.to_str().context("tree path is not UTF-8")?.to_owned();
    let call = |tool: &str, args: serde_json::Value| -> Vec<String> {
        ["call", tool, &args.to_string(), "--workspace", &ws]
            .map(str::to_owned)
            .to_vec()
    };
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let rg = PathBuf::from("rg");
    let fd = PathBuf::from(fd());
    let cases: Vec<(&str, Vec<String>, PathBuf, Vec<String>)> = vec![
        (
            "grep literal `EXPORT_SYMBOL_GPL`",
            call(
                "grep_search",
                serde_json::json!({"query": "EXPORT_SYMBOL_GPL", "limit": 10000}),
            ),
            rg.clone(),
            s(&["-n", "--no-heading", "-F", "-s", "EXPORT_SYMBOL_GPL"]),
        ),
        (
            "grep case-insensitive `usb_register`",
            call(
                "grep_search",
                serde_json::json!({"query": "usb_register", "case_sensitive": false, "limit": 10000}),
            ),
            rg.clone(),
            s(&["-n", "--no-heading", "-F", "-i", "usb_register"]),
        ),
        (
            r"grep regex `struct \w+_ops \{`",
            call(
                "grep_search",
                serde_json::json!({"query": r"struct \w+_ops \{", "regex": true, "limit": 10000}),
            ),
            rg.clone(),
            s(&["-n", "--no-heading", "-s", r"struct \w+_ops \{"]),
        ),
        (
            "glob `*.c`",
            call(
                "glob_search",
                serde_json::json!({"pattern": "*.c", "limit": 10000}),
            ),
            fd.clone(),
            s(&["--glob", "*.c"]),
        ),
        (
            "glob `*.rs`",
            call(
                "glob_search",
                serde_json::json!({"pattern": "*.rs", "limit": 10000}),
            ),
            fd.clone(),
            s(&["--glob", "*.rs"]),
        ),
    ];
    println!("\nsearch on {} (best of {runs})", tree.display());
    println!(
        "{:<40} {:>10} {:>10} {:>8}  goal",
        "case", "jianmu", "reference", "ratio"
    );
    for (what, ours_args, reference, ref_args) in cases {
        // Warm the page cache once for both.
        best(&reference, &ref_args, &tree, 1)?;
        let ours = best(&jianmu, &ours_args, &tree, runs)?;
        let theirs = best(&reference, &ref_args, &tree, runs)?;
        println!(
            "{what:<40} {:>8.0}ms {:>8.0}ms {:>7.2}x  <= 1.2x {}",
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            ours.as_secs_f64() / theirs.as_secs_f64(),
            reference.display()
        );
    }
    Ok(())
}
