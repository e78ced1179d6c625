//! Project automation: `cargo xtask test-all`, `cargo xtask bench`, `cargo xtask docs`.
//!
//! `test-all` is the one entry point CI calls; it runs every check a change must pass.
// xtask drives cargo and python as a build tool; it is not shipped, and the ban on
// spawning outside jianmu-runtime is about the tools.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

mod bench;
mod docker_bench;
mod edit_bench;
mod mcp_bench;
mod python;
mod python_bench;
mod search_bench;
mod session_bench;
mod setup;

const USAGE: &str =
    "usage: cargo xtask <test-all | bench | docs | docker-image | package | msrv | preflight | python-test>

  test-all  installs what is missing (cargo-nextest, cargo-deny, Debian packages as
            root, a Docker engine), then the MSRV check, fmt, clippy, the feature
            matrix, tests, docs, packaging, cargo deny
  bench     benchmarks, printed as ratios against reference implementations (preflight first)
            [--quick] shorter runs; [--no-search] skip grep/glob on the Linux tree;
            [--edit-only] only edit_file and apply_patch against git apply;
            [--mcp-only] only the MCP round trips (stdio) and the HTTP load test;
            [--session-only [--against REV]] listing tools, tools/list, idle HTTP
            session memory and a no-op call, against REV's build in the same run;
            [--docker-only] only the Docker sandbox (one engine, then two);
            [--python-only] only the Python package (release wheel) against native
            calls and the original pure-Python tools
  docs      regenerate docs/tools.md from the live tool specs
  docker-image  build a release jianmu and the Docker sandbox image from it
            [ARGS...] passed to `jianmu sandbox build-image` (--tag, --no-python, ...)
  package   pack every library crate as `cargo publish --workspace` would and build
            each from its package (about 8 minutes; test-all packs without building)
  msrv      check that the declared rust-version builds the workspace
  preflight only install what the checks need (test-all's first step)
  python-test  build the Python package's wheel, install it into a venv under
            target/, and run its pytest suite (a test-all step)";

/// Crates whose features select tools; both expose the same tool features.
const FEATURE_CRATES: [&str; 2] = ["jianmu-provider", "jianmu-cli"];

/// Heavy dependencies a build may link only when one of the features that need them
/// is on.
const HEAVY: &[(&str, &[&str])] = &[
    ("reqwest", &["http", "search"]),
    ("hyper", &["http", "search", "mcp"]),
    ("dom_smoothie", &["http"]),
    ("pdf-extract", &["fs", "http"]),
    ("bollard", &["docker"]),
    ("rhai", &["script"]),
    ("grep-searcher", &["code"]),
    ("grep-regex", &["code"]),
    ("ignore", &["code", "checkpoint"]),
    (
        "cap-std",
        &[
            "fs",
            "code",
            "git",
            "lsp",
            "http",
            "shell",
            "script",
            "checkpoint",
        ],
    ),
    ("rmcp", &["mcp"]),
];

/// Crates of the framework adapters and the Python package, which `jianmu` never links
/// whatever its features.
const NEVER_IN_CLI: &[&str] = &["rig-core", "swiftide-core", "pyo3"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test-all") => test_all(),
        Some("bench") => bench::run(&args[1..]),
        Some("docs") => docs(),
        Some("docker-image") => docker_image(&args[1..]),
        Some("package") => package(true),
        Some("msrv") => msrv(),
        Some("preflight") => setup::preflight(),
        Some("python-test") => python::test(),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

/// The workspace root (the parent of this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_owned()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Runs `cmd`, failing with its command line when it fails.
fn run(mut cmd: Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("$ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("failed ({status}): {shown}");
    }
    Ok(())
}

/// Runs `cmd` and returns what it wrote to stdout and stderr, or fails with both.
fn output_all(mut cmd: Command) -> anyhow::Result<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("$ {shown}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("failed ({}): {shown}\n{text}", out.status);
    }
    Ok(text)
}

fn output(mut cmd: Command) -> anyhow::Result<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        bail!(
            "failed ({}): {shown}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn step(name: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    eprintln!("\n==> {name}");
    let start = Instant::now();
    f().with_context(|| format!("step `{name}` failed"))?;
    eprintln!("==> {name}: ok in {:.1?}", start.elapsed());
    Ok(())
}

fn test_all() -> anyhow::Result<()> {
    let start = Instant::now();
    step("preflight (what the checks need)", setup::preflight)?;
    step("msrv (the declared rust-version builds everything)", msrv)?;
    step("fmt", || {
        let mut c = cargo();
        c.args(["fmt", "--all", "--check"]);
        run(c)
    })?;
    step("clippy (all features, all targets)", || {
        let mut c = cargo();
        c.args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--locked",
        ]);
        c.args(["--", "-D", "warnings"]);
        run(c)
    })?;
    step("feature matrix", feature_matrix)?;
    step(
        "the runtime over the caller's own tools, no built-in linked",
        || {
            let mut c = cargo();
            c.args([
                "tree",
                "-p",
                "jianmu-runtime",
                "--no-default-features",
                "--locked",
            ]);
            c.args(["-e", "normal", "--prefix", "none", "--format", "{p}"]);
            let tree = output(c)?;
            if let Some(line) = tree.lines().find(|l| {
                l.starts_with("jianmu-provider ")
                    || l.starts_with("jianmu-tool-") && !l.starts_with("jianmu-tool-core ")
            }) {
                bail!("jianmu-runtime without `builtin` links {line}");
            }
            let mut c = cargo();
            c.args([
                "nextest",
                "run",
                "-p",
                "jianmu-runtime",
                "--no-default-features",
            ]);
            c.args(["--locked", "--test", "own_tools", "--status-level", "fail"]);
            run(c)
        },
    )?;
    step("tests", || {
        let mut c = cargo();
        c.args([
            "nextest",
            "run",
            "--workspace",
            "--all-features",
            "--locked",
        ]);
        c.args(["--no-fail-fast", "--status-level", "fail"]);
        run(c)?;
        let mut c = cargo();
        c.args(["test", "--doc", "--workspace", "--all-features", "--locked"]);
        run(c)?;
        let mut c = cargo();
        c.args(["build", "--examples", "-p", "jianmu-examples", "--locked"]);
        run(c)?;
        // The framework examples run an agent loop against the framework's own
        // scripted model: no network.
        for example in ["rig_agent", "swiftide_agent"] {
            let mut c = cargo();
            c.args(["run", "--quiet", "--locked", "-p", "jianmu-examples"]);
            c.args(["--example", example]);
            run(c)?;
        }
        Ok(())
    })?;
    step(
        "python package (wheel built with maturin, installed, pytest)",
        python::test,
    )?;
    step("docs", || {
        let mut c = cargo();
        c.args([
            "doc",
            "--workspace",
            "--all-features",
            "--no-deps",
            "--locked",
        ]);
        c.env("RUSTDOCFLAGS", "-D warnings");
        run(c)
    })?;
    step(
        "package (every library crate packs, dependencies resolved)",
        || package(false),
    )?;
    step("cargo deny (licenses, bans, sources)", || {
        let mut c = cargo();
        c.args(["fetch", "--locked"]);
        run(c)?;
        let mut c = cargo();
        c.args(["deny", "--offline", "check", "licenses", "bans", "sources"]);
        run(c)
    })?;
    eprintln!("\ntest-all: everything passed in {:.0?}", start.elapsed());
    Ok(())
}

/// Packs every library crate as `cargo publish --workspace --dry-run` does: each
/// manifest as published, its file list, and its dependencies resolved against
/// crates.io with the workspace's own crates laid over it. With `verify`, each package
/// is also built from its tarball.
fn package(verify: bool) -> anyhow::Result<()> {
    let mut c = cargo();
    c.args([
        "publish",
        "--workspace",
        "--dry-run",
        "--allow-dirty",
        "--locked",
    ]);
    for krate in [
        "jianmu-examples",
        "jianmu-test-support",
        "jianmu-python",
        "xtask",
        "jianmu-tests",
    ] {
        c.args(["--exclude", krate]);
    }
    if !verify {
        c.arg("--no-verify");
    }
    let log = output_all(c)?;
    let packed = log.matches("Packaging jianmu-").count();
    let expected = library_crates()?.len();
    if packed != expected {
        bail!("{packed} crates were packed, expected {expected}:\n{log}");
    }
    eprintln!(
        "packed {packed} crates{}",
        if verify {
            ", each built from its package"
        } else {
            ""
        }
    );
    Ok(())
}

/// The workspace's `rust-version` is the toolchain every other step runs on, or, when
/// the default toolchain is newer, the workspace is checked with that older one too.
fn msrv() -> anyhow::Result<()> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml"))?;
    let declared = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .context("the workspace declares no rust-version")?;
    let mut c = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    c.arg("--version");
    let version = output(c)?;
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let current = version
        .split_whitespace()
        .nth(1)
        .context("rustc --version printed nothing useful")?;
    let short = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    if short(current) == short(&declared) {
        eprintln!(
            "rustc {current} is the declared rust-version {declared}: every build here is the MSRV build"
        );
        return Ok(());
    }
    eprintln!("rustc {current} is newer than rust-version {declared}: checking with {declared}");
    let mut c = Command::new("rustup");
    c.args(["toolchain", "install", &declared, "--profile", "minimal"]);
    run(c)?;
    let mut c = Command::new("cargo");
    c.current_dir(root());
    c.args([
        &format!("+{declared}"),
        "check",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--locked",
    ]);
    run(c)
}

/// Every crate under `crates/` that is meant for others (all but the examples and the
/// tests' helpers).
fn library_crates() -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root().join("crates"))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        // Examples and the tests' helpers are not for others; the Python package's
        // native half is published as a wheel.
        if !matches!(
            name.as_str(),
            "jianmu-examples" | "jianmu-test-support" | "jianmu-python"
        ) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The tool features of the provider, read from its manifest.
fn tool_features() -> anyhow::Result<Vec<String>> {
    let manifest = std::fs::read_to_string(root().join("crates/jianmu-provider/Cargo.toml"))?;
    let section = manifest
        .split("[features]")
        .nth(1)
        .context("jianmu-provider has no [features]")?;
    let section = section.split("\n[").next().unwrap_or(section);
    let mut features: Vec<String> = section
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_owned()))
        .filter(|k| !k.is_empty() && !k.starts_with('#') && k != "default" && k != "full")
        .collect();
    features.sort();
    Ok(features)
}

/// No tool features, each tool feature alone, and `full`: each must pass clippy and
/// the tests of the crates that select tools, and link only what its features need.
fn feature_matrix() -> anyhow::Result<()> {
    let features = tool_features()?;
    let mut sets: Vec<Vec<String>> = vec![vec![]];
    sets.extend(features.iter().map(|f| vec![f.clone()]));
    sets.push(vec!["full".into()]);
    for set in sets {
        let label = if set.is_empty() {
            "no tool features".to_owned()
        } else {
            set.join(",")
        };
        eprintln!("\n--> features: {label}");
        let flags: Vec<String> = FEATURE_CRATES
            .iter()
            .flat_map(|krate| set.iter().map(move |f| format!("{krate}/{f}")))
            .collect();
        let with_features = |sub: &[&str]| {
            let mut c = cargo();
            c.args(sub);
            for krate in FEATURE_CRATES {
                c.args(["-p", krate]);
            }
            c.args(["--no-default-features", "--locked"]);
            if !flags.is_empty() {
                c.args(["--features", &flags.join(",")]);
            }
            c
        };
        let mut c = with_features(&["clippy", "--all-targets"]);
        c.args(["--", "-D", "warnings"]);
        run(c)?;
        let mut c = with_features(&["nextest", "run"]);
        c.args(["--status-level", "fail"]);
        run(c)?;
        check_linkage(&set)?;
    }
    Ok(())
}

/// `jianmu` built with `set` must not link heavy crates of features outside it.
fn check_linkage(set: &[String]) -> anyhow::Result<()> {
    let mut c = cargo();
    c.args([
        "tree",
        "-p",
        "jianmu-cli",
        "--no-default-features",
        "--locked",
    ]);
    c.args(["-e", "normal", "--prefix", "none", "--format", "{p}"]);
    if !set.is_empty() {
        c.args(["--features", &set.join(",")]);
    }
    let tree = output(c)?;
    let linked: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if let Some(krate) = NEVER_IN_CLI.iter().find(|k| linked.contains(k)) {
        bail!(
            "features [{}] link `{krate}`, which `jianmu` must never link",
            set.join(",")
        );
    }
    let full = set.iter().any(|f| f == "full");
    for (krate, features) in HEAVY {
        let allowed = full || set.iter().any(|f| features.contains(&f.as_str()));
        if !allowed && linked.contains(krate) {
            bail!(
                "features [{}] link `{krate}`, which only [{}] may bring in",
                set.join(","),
                features.join(", ")
            );
        }
    }
    eprintln!(
        "linkage ok: {} crates, none of the heavy ones outside the enabled features",
        linked.len()
    );
    Ok(())
}

/// `jianmu sandbox build-image` with a fresh release build as the runner.
fn docker_image(args: &[String]) -> anyhow::Result<()> {
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
    run(c)?;
    let mut c = Command::new(root().join("target/release/jianmu"));
    c.args(["sandbox", "build-image"]).args(args);
    run(c)
}

fn docs() -> anyhow::Result<()> {
    let mut c = cargo();
    c.args([
        "run",
        "--quiet",
        "--locked",
        "-p",
        "jianmu-cli",
        "--all-features",
    ]);
    c.args(["--", "tools", "--markdown"]);
    let page = output(c)?;
    let path = root().join("docs/tools.md");
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
