//! The editing benchmark: `edit_file` (10 edits on a 5 MB source file) and
//! `apply_patch` (50 hunks across 10 files) against `git apply` of the same change on
//! the same files (restored between runs, untimed), in one run of `cargo xtask bench`:
//! as processes (`jianmu call` against `git apply`, best of several runs), and in
//! process (the `edit` criterion bench of jianmu-tool-code, its median, against the
//! median `git apply`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{cargo, root, run as run_cmd};

/// A line of generated source code, about 50 bytes, unique by `i`.
fn line(i: usize) -> String {
    format!(
        "    let value_{i} = compute({i}, \"{:08x}\");\n",
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32
    )
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!("git {args:?} failed: {}", out.status);
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A fresh folder `name` under the bench data, its files staged in git's index, so
/// `git checkout -- .` restores them and `git diff` gives a change as a patch.
fn repo(name: &str, files: &[(String, String)]) -> anyhow::Result<std::path::PathBuf> {
    let dir = root().join("target/bench-data/edit").join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    for (path, text) in files {
        std::fs::write(dir.join(path), text)?;
    }
    git(&dir, &["init", "-q"])?;
    git(&dir, &["add", "-A"])?;
    Ok(dir)
}

/// The wall times of `runs` runs of `program args` (stdin `input`) in `dir`, sorted,
/// with the files restored untimed before each.
fn times(
    dir: &Path,
    program: &Path,
    args: &[&str],
    input: &str,
    runs: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut all = Vec::with_capacity(runs);
    for _ in 0..runs {
        git(dir, &["checkout", "-q", "--", "."])?;
        let start = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot run {}", program.display()))?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(input.as_bytes())?;
        let status = child.wait()?;
        let took = start.elapsed();
        if !status.success() {
            bail!("{} {args:?} failed: {status}", program.display());
        }
        all.push(took);
    }
    all.sort();
    Ok(all)
}

/// Copies the files of `dir` into a sibling folder `NAME-orig`, which the criterion
/// bench restores from.
fn keep_originals(dir: &Path) -> anyhow::Result<()> {
    let name = dir.file_name().context("no folder name")?.to_string_lossy();
    let orig = dir.with_file_name(format!("{name}-orig"));
    if orig.exists() {
        std::fs::remove_dir_all(&orig)?;
    }
    std::fs::create_dir_all(&orig)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), orig.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// A git patch as a `*** Begin Patch` patch: the same hunks without line numbers.
fn to_ours(git_patch: &str) -> String {
    let mut out = String::from("*** Begin Patch\n");
    for l in git_patch.lines() {
        if let Some(rest) = l.strip_prefix("diff --git a/") {
            let path = rest.split(" b/").next().unwrap_or(rest);
            let _ = writeln!(out, "*** Update File: {path}");
        } else if l.starts_with("index ") || l.starts_with("--- ") || l.starts_with("+++ ") {
        } else if l.starts_with("@@") {
            out.push_str("@@\n");
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str("*** End Patch\n");
    out
}

pub(crate) fn run(quick: bool) -> anyhow::Result<()> {
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
    run_cmd(c)?;
    let jianmu = root().join("target/release/jianmu");
    let git_bin = Path::new("git");
    let runs = if quick { 3 } else { 9 };
    let data = root().join("target/bench-data/edit");

    // 1. edit_file: 10 edits spread over a 5 MB file.
    let text: String = (0..100_000).map(line).collect();
    let dir = repo("one", &[("big.rs".to_owned(), text.clone())])?;
    keep_originals(&dir)?;
    let mut edits = Vec::new();
    let mut changed = text;
    for k in 0..10 {
        let i = k * 10_000 + 4_321;
        let old = line(i);
        let new = format!("    let value_{i} = compute_fast({i});\n");
        changed = changed.replacen(&old, &new, 1);
        edits.push(serde_json::json!({"old": old, "new": new}));
    }
    std::fs::write(dir.join("big.rs"), &changed)?;
    std::fs::write(data.join("one.patch"), git(&dir, &["diff"])?)?;
    let args = serde_json::json!({"path": "big.rs", "edits": edits}).to_string();
    std::fs::write(data.join("one.json"), &args)?;
    let ws = dir.to_str().context("path is not UTF-8")?.to_owned();
    let call =
        |tool: &'static str| ["call", tool, "-", "--workspace", ws.as_str()].map(str::to_owned);
    let edit_call = call("edit_file");
    let edit_call: Vec<&str> = edit_call.iter().map(String::as_str).collect();
    let edit_ours = times(&dir, &jianmu, &edit_call, &args, runs)?;
    let edit_git = times(&dir, git_bin, &["apply", "../one.patch"], "", runs)?;
    // Both must make the same file.
    times(&dir, &jianmu, &edit_call, &args, 1)?;
    if std::fs::read_to_string(dir.join("big.rs"))? != changed {
        bail!("edit_file made a different file than git apply");
    }

    // 2. apply_patch: 5 hunks in each of 10 files of 2,000 lines.
    let files: Vec<(String, String)> = (0..10)
        .map(|f| {
            let text: String = (f * 2_000..(f + 1) * 2_000).map(line).collect();
            (format!("f{f}.rs"), text)
        })
        .collect();
    let dir = repo("many", &files)?;
    keep_originals(&dir)?;
    let mut expected = Vec::new();
    for (f, (path, text)) in files.iter().enumerate() {
        let mut changed = text.clone();
        for h in 0..5 {
            let i = f * 2_000 + h * 400 + 17;
            let old = line(i) + &line(i + 1);
            let new = format!(
                "{}    // checked\n    let value_{} = fast();\n",
                line(i),
                i + 1
            );
            changed = changed.replacen(&old, &new, 1);
        }
        std::fs::write(dir.join(path), &changed)?;
        expected.push((path.clone(), changed));
    }
    let git_patch = git(&dir, &["diff"])?;
    let hunks = git_patch.lines().filter(|l| l.starts_with("@@")).count();
    if hunks != 50 {
        bail!("the generated change has {hunks} hunks, not 50");
    }
    std::fs::write(data.join("many.patch"), &git_patch)?;
    let patch = serde_json::json!({ "patch": to_ours(&git_patch) }).to_string();
    std::fs::write(data.join("many.json"), &patch)?;
    let ws = dir.to_str().context("path is not UTF-8")?.to_owned();
    let patch_call = ["call", "apply_patch", "-", "--workspace", ws.as_str()];
    let patch_ours = times(&dir, &jianmu, &patch_call, &patch, runs)?;
    let patch_git = times(&dir, git_bin, &["apply", "../many.patch"], "", runs)?;
    times(&dir, &jianmu, &patch_call, &patch, 1)?;
    for (path, text) in &expected {
        if std::fs::read_to_string(dir.join(path))? != *text {
            bail!("apply_patch made a different {path} than git apply");
        }
    }
    let calc = times(&dir, &jianmu, &["call", "calculator", "\"1\""], "", runs)?;

    let mut c = cargo();
    c.args([
        "bench",
        "--locked",
        "-p",
        "jianmu-tool-code",
        "--bench",
        "edit",
        "--",
        "--noplot",
    ]);
    if quick {
        c.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    }
    run_cmd(c)?;
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let median = |v: &[Duration]| ms(&v[v.len() / 2]);
    println!(
        "\nediting against `git apply` of the same change ({runs} runs each; files restored between runs)"
    );
    println!(
        "{:<52} {:>10} {:>10} {:>8}  goal",
        "case", "jianmu", "git apply", "ratio"
    );
    let row = |what: &str, ours: f64, theirs: f64| {
        println!(
            "{what:<52} {ours:>8.1}ms {theirs:>8.1}ms {:>7.2}x  <= 1x git apply",
            ours / theirs
        );
    };
    let edit_ns = crate::bench::median_ns("edit/edit_file_10_edits_5mb")?;
    let patch_ns = crate::bench::median_ns("edit/apply_patch_50_hunks_10_files")?;
    row(
        "edit_file 10 edits, 5 MB: in process (median)",
        edit_ns / 1e6,
        median(&edit_git),
    );
    row(
        "edit_file 10 edits, 5 MB: `jianmu call` (best)",
        ms(&edit_ours[0]),
        ms(&edit_git[0]),
    );
    row(
        "apply_patch 50 hunks, 10 files: in process (median)",
        patch_ns / 1e6,
        median(&patch_git),
    );
    row(
        "apply_patch 50 hunks, 10 files: `jianmu call` (best)",
        ms(&patch_ours[0]),
        ms(&patch_git[0]),
    );
    println!(
        "(a `jianmu call calculator` process takes {:.1}ms here: the floor of the `jianmu call` rows)",
        ms(&calc[0])
    );
    Ok(())
}
