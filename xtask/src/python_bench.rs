//! The Python package in `cargo xtask bench`: its calculator call against the same
//! call made natively, and against the original framework's pure-Python tools for
//! `calculator`, `read_file` and `grep`-like search on the bench corpus, in one run
//! (`xtask/bench/python_package.py`), on a release wheel.

use std::process::Command;

use anyhow::Context;

use crate::bench::{human, median_ns};
use crate::{cargo, output, root, run};

pub(crate) fn run_bench(criterion_ran: bool) -> anyhow::Result<()> {
    if !criterion_ran {
        // The native reference: the same call on a session, in Rust.
        let mut c = cargo();
        c.args([
            "bench",
            "--locked",
            "-p",
            "jianmu-adapters",
            "--features",
            "rig",
        ]);
        c.args(["--bench", "rig", "--", "--noplot", "session_calculator"]);
        run(c)?;
    }
    let native_ns = median_ns("adapters/session_calculator")?;
    let python = crate::python::venv("python-bench")?;
    crate::python::install_wheel(&python, "release", "python-bench")?;
    let corpus = crate::search_bench::tree()?.join("kernel");
    let mut c = Command::new(&python);
    c.arg(root().join("xtask/bench/python_package.py"))
        .arg(&corpus)
        .arg(root().join("target/bench-data/python"));
    let text = output(c)?;
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .with_context(|| format!("the Python bench printed {text:?}"))?;
    let ns = |key: &str| -> anyhow::Result<f64> {
        v[key]
            .as_f64()
            .map(|s| s * 1e9)
            .with_context(|| format!("no `{key}` in {text}"))
    };
    let rows = [
        (
            "calculator via the Python package, `run` (sync)",
            ns("calc_sync")?,
            "the same call on a session, natively (Rust)",
            native_ns,
        ),
        (
            "calculator via the Python package, `await execute`",
            ns("calc_execute")?,
            "the same call on a session, natively (Rust)",
            native_ns,
        ),
        (
            "calculator via the Python package, `await execute`",
            ns("calc_execute")?,
            "original pure-Python calculator (eval)",
            ns("seed_calc_execute")?,
        ),
        (
            "read_file via the Python package: 4 KB file",
            ns("read_small_execute")?,
            "original pure-Python read_file",
            ns("seed_read_small_execute")?,
        ),
        (
            "read_file via the Python package: 700 KB file",
            ns("read_execute")?,
            "original pure-Python read_file",
            ns("seed_read_execute")?,
        ),
        (
            "grep_search via the Python package: kernel/",
            ns("grep_execute")?,
            "original-style pure-Python grep (os.walk + re)",
            ns("seed_grep_execute")?,
        ),
    ];
    println!(
        "\nPython package (release wheel; grep over {} of the bench corpus, {} matches)",
        corpus.display(),
        v["grep_matches"]
    );
    println!(
        "{:<52} {:>10}  {:<46} {:>10} {:>8}",
        "benchmark", "ours", "reference", "ref", "speedup"
    );
    for (what, ours, reference, reference_ns) in rows {
        println!(
            "{what:<52} {:>10}  {reference:<46} {:>10} {:>7.1}x",
            human(ours),
            human(reference_ns),
            reference_ns / ours
        );
    }
    Ok(())
}
