//! The Python package: a venv with pinned build and test tools under `target/`, the
//! wheel built with maturin (sharing the workspace's target folder), installed with
//! `pip`, and its pytest suite, with a Docker sandbox image from the `jianmu` under
//! test.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::{cargo, root, run};

/// The package's folder.
const PACKAGE: &str = "crates/jianmu-python";
/// What the venv holds, pinned.
const TOOLS: &[&str] = &[
    "maturin==1.16.0",
    "pytest==8.3.5",
    "pytest-timeout==2.3.1",
    // Builds the compat distribution (`jianmu.tool`) with the venv's setuptools.
    "wheel==0.45.1",
];
/// The image tag the tests use: the one the Docker tests of `jianmu-cli` build too.
const TEST_IMAGE: &str = "jianmu-sandbox:test";

/// A venv at `target/NAME` with [`TOOLS`], made or topped up on first use; its python.
pub(crate) fn venv(name: &str) -> anyhow::Result<PathBuf> {
    let venv = root().join("target").join(name);
    let python = venv.join("bin/python");
    let has_tools = Command::new(&python)
        .args([
            "-m",
            "pip",
            "show",
            "-q",
            "maturin",
            "pytest",
            "pytest-timeout",
            "wheel",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_tools {
        if !python.exists() {
            let mut c = Command::new("python3");
            c.args(["-m", "venv"]).arg(&venv);
            run(c).context("the Python package needs python3 (3.11 or newer) with venv")?;
        }
        let mut c = Command::new(&python);
        c.args(["-m", "pip", "install", "-q", "--disable-pip-version-check"]);
        c.args(TOOLS);
        run(c)?;
    }
    Ok(python)
}

/// Builds the wheel with `profile` (`dev` or `release`) into `target/NAME-wheel` and
/// installs it into the venv of `python`.
pub(crate) fn install_wheel(python: &Path, profile: &str, name: &str) -> anyhow::Result<()> {
    let out = root().join("target").join(format!("{name}-wheel"));
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    let maturin = python.with_file_name("maturin");
    let mut c = Command::new(&maturin);
    c.current_dir(root().join(PACKAGE));
    c.args([
        "build",
        "--quiet",
        "--locked",
        "--profile",
        profile,
        "--out",
    ]);
    c.arg(&out).arg("--interpreter").arg(python);
    run(c)?;
    let wheel = std::fs::read_dir(&out)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("maturin built no wheel")?;
    let mut c = Command::new(python);
    c.args(["-m", "pip", "install", "-q", "--disable-pip-version-check"]);
    c.args(["--force-reinstall", "--no-deps"]).arg(&wheel);
    run(c)
}

/// The wheel, installed, passes its pytest suite (the Docker tests on an image built
/// from the `jianmu` under test).
pub(crate) fn test() -> anyhow::Result<()> {
    let python = venv("python")?;
    install_wheel(&python, "dev", "python")?;
    // The framework's module paths, a distribution of their own over the wheel.
    let mut c = Command::new(&python);
    c.args(["-m", "pip", "install", "-q", "--disable-pip-version-check"]);
    c.args(["--force-reinstall", "--no-deps", "--no-build-isolation"]);
    c.arg(root().join(PACKAGE).join("compat"));
    run(c)?;
    // The `jianmu` the workspace tests ran (nothing to build after them).
    let mut c = cargo();
    c.args([
        "build",
        "--workspace",
        "--all-features",
        "--tests",
        "--locked",
    ]);
    run(c)?;
    let mut c = Command::new(root().join("target/debug/jianmu"));
    c.args(["sandbox", "build-image", "--tag", TEST_IMAGE]);
    run(c)?;
    let mut c = Command::new(&python);
    c.current_dir(root().join(PACKAGE));
    c.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--timeout",
        "300",
    ]);
    c.arg("tests");
    c.env("JIANMU_TEST_IMAGE", TEST_IMAGE);
    run(c)
}
