//! `cargo xtask bench`: runs the criterion benchmarks, then the reference
//! implementations in the same run, and prints ratios against the goals.

use std::process::Command;

use anyhow::{Context, bail};

use crate::{cargo, output, root, run as run_cmd};

/// The expression both calculators evaluate: 10 operators.
const CALC_EXPR: &str = "(12+34)*5-67//8+9%4**2/3-1.5*2";

struct Row {
    what: &'static str,
    ours_ns: f64,
    reference: &'static str,
    reference_ns: Option<f64>,
    goal: &'static str,
}

/// The session's egress proxy against the host's loopback without it (its own
/// harness: a 100 MB download, a new connection, 1,000 held at once).
fn egress() -> anyhow::Result<()> {
    println!("\nEgress proxy (clients inside a private network; reference: host loopback)");
    let mut c = cargo();
    c.args([
        "bench",
        "--locked",
        "-p",
        "jianmu-egress",
        "--bench",
        "egress",
    ]);
    run_cmd(c)
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    // What the benches need (groff for the PDF rows, the Docker engine, Python), as
    // `test-all` sets it up.
    crate::setup::preflight()?;
    let quick = args.iter().any(|a| a == "--quick");
    if args.iter().any(|a| a == "--edit-only") {
        return crate::edit_bench::run(quick);
    }
    if args.iter().any(|a| a == "--mcp-only") {
        return crate::mcp_bench::run();
    }
    if args.iter().any(|a| a == "--session-only") {
        return crate::session_bench::run(args);
    }
    if args.iter().any(|a| a == "--python-only") {
        return crate::python_bench::run_bench(false);
    }
    if args.iter().any(|a| a == "--egress-only") {
        return egress();
    }
    if args.iter().any(|a| a == "--docker-only") {
        let mut c = cargo();
        c.args(["build", "--release", "--locked", "-p", "jianmu-cli"]);
        crate::run(c)?;
        return crate::docker_bench::run();
    }
    let mut c = cargo();
    c.args(["bench", "--locked"]);
    for krate in [
        "jianmu-runtime",
        "jianmu-tool-calc",
        "jianmu-tool-fs",
        "jianmu-tool-script",
        "jianmu-tool-http",
        "jianmu-tool-shell",
        "jianmu-tool-git",
        "jianmu-tool-lsp",
        "jianmu-adapters",
        "jianmu-tool-core",
        "jianmu-native",
        "jianmu-checkpoint",
    ] {
        c.args(["-p", krate]);
    }
    c.args(["--features", "jianmu-adapters/rig"]);
    for bench in [
        "dispatch", "calc", "read", "script", "loopback", "spawn", "git", "lsp", "rig", "search",
        "editor", "snapshot",
    ] {
        c.args(["--bench", bench]);
    }
    if let Some(python) = aiohttp_python() {
        c.env("JIANMU_BENCH_PYTHON", python);
    }
    c.args(["--", "--noplot"]);
    if quick {
        c.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    }
    run_cmd(c)?;

    let python = python_available();
    let seed_dispatch = python
        .then(|| python_seconds(&["xtask/bench/seed_dispatch.py", "50000"]))
        .transpose()?
        .map(|s| s * 1e9);
    let py_eval = python
        .then(|| {
            let stmt = format!(
                "import timeit; print(min(timeit.repeat('eval(s)', setup='s={CALC_EXPR:?}', number=100000, repeat=5)) / 100000)"
            );
            python_seconds(&["-c", &stmt])
        })
        .transpose()?
        .map(|s| s * 1e9);

    let py_read = python
        .then(|| {
            let stmt = "import pathlib, timeit; p = pathlib.Path('target/bench-data/read-700k.txt'); \
                print(min(timeit.repeat(lambda: p.read_text().splitlines()[9000:11000], number=200, repeat=5)) / 200)";
            python_seconds(&["-c", stmt])
        })
        .transpose()?
        .map(|s| s * 1e9);

    let py_exec = python
        .then(|| {
            let stmt = "import io, timeit, contextlib; g = {'x': 41}\n\
def run():\n    out = io.StringIO()\n    with contextlib.redirect_stdout(out):\n        exec('y = x + 1', g)\n    return out.getvalue()\n\
print(min(timeit.repeat(run, number=20000, repeat=5)) / 20000)";
            python_seconds(&["-c", stmt])
        })
        .transpose()?
        .map(|s| s * 1e9);
    let spawn_per_call = python.then(spawn_per_call_ns).transpose()?;

    let aiohttp: Option<serde_json::Value> =
        std::fs::read_to_string(root().join("target/criterion/http/aiohttp.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    let aiohttp_seed = aiohttp.as_ref().and_then(|v| v["seed_ns"].as_f64());
    let aiohttp_shared = aiohttp
        .as_ref()
        .and_then(|v| v["shared_session_ns"].as_f64());

    let readabilipy: Option<f64> =
        std::fs::read_to_string(root().join("target/criterion/web_fetch/readabilipy.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["ns"].as_f64());

    let rows = [
        Row {
            what: "no-op call via ToolSet + ToolRunner + events",
            ours_ns: median_ns("dispatch/toolset_runner_events")?,
            reference: "the Python tools' call path in asyncio",
            reference_ns: seed_dispatch,
            goal: "<= 0.5 us",
        },
        Row {
            what: "calculator call through the rig adapter",
            ours_ns: median_ns("adapters/rig_calculator")?,
            reference: "the same call on the same session, natively",
            reference_ns: Some(median_ns("adapters/session_calculator")?),
            goal: "<= 1.1x native",
        },
        Row {
            what: "no-op call under ask rules it does not match",
            ours_ns: median_ns("dispatch/toolset_runner_ask_rules")?,
            reference: "the same call without them (row 1)",
            reference_ns: Some(median_ns("dispatch/toolset_runner_events")?),
            goal: "within noise",
        },
        Row {
            what: "checkpoint of 10,000 files after one changed",
            ours_ns: median_ns("checkpoint/snapshot_10k_one_change")?,
            reference: "the first checkpoint of the same",
            reference_ns: Some(median_ns("checkpoint/snapshot_10k_first")?),
            goal: "<= 20 ms",
        },
        Row {
            what: "no-op call via ToolSet, no runner",
            ours_ns: median_ns("dispatch/toolset_direct")?,
            reference: "-",
            reference_ns: None,
            goal: "-",
        },
        Row {
            what: "calculator: parse + evaluate, 10 operators",
            ours_ns: median_ns("calculator/evaluate_10_ops")?,
            reference: "Python eval() of the same string",
            reference_ns: py_eval,
            goal: "<= 3 us",
        },
        Row {
            what: "tool_search: BM25 over every built-in tool, 5 results",
            ours_ns: median_ns("search/tool_index_all")?,
            reference: "a substring scan of every description",
            reference_ns: Some(median_ns("search/substring_scan_all")?),
            goal: "<= 50 us",
        },
        Row {
            what: "text editor str_replace, old_str 20,000 times in 1 MB",
            ours_ns: median_ns("editor/str_replace_20000_matches_1mb")?,
            reference: "one str::replace over the text",
            reference_ns: Some(median_ns("editor/str_replace_reference")?),
            goal: "<= 2x the reference",
        },
        Row {
            what: "read_file: 2,000-line window of a 700 KB file",
            ours_ns: median_ns("read_file/window_2000_of_700k")?,
            reference: "Python read_text().splitlines()[a:b]",
            reference_ns: py_read,
            goal: ">= 5x faster",
        },
        Row {
            what: "read_file: a 106-page PDF, all pages as text",
            ours_ns: median_ns("read_file/pdf_106_pages")?,
            reference: "`pdftotext` (poppler), same file",
            reference_ns: Some(median_ns("read_file/pdftotext_106_pages")?),
            goal: "report",
        },
        Row {
            what: "8 calls of a 1 ms I/O tool, as one batch",
            ours_ns: median_ns("batch/8_as_batch")?,
            reference: "the same 8 calls one by one",
            reference_ns: Some(median_ns("batch/8_one_by_one")?),
            goal: "concurrent",
        },
        Row {
            what: "rhai_repl: warm call (`x + 1`)",
            ours_ns: median_ns("script/rhai_warm_call")?,
            reference: "Python exec() with captured stdout",
            reference_ns: py_exec,
            goal: "<= 3 us",
        },
        Row {
            what: "python_repl: warm round trip (`x + 1`)",
            ours_ns: median_ns("script/python_warm_round_trip")?,
            reference: "`python3 -c` spawned per call",
            reference_ns: spawn_per_call,
            goal: "much faster",
        },
        Row {
            what: "http_request: loopback GET, small JSON body",
            ours_ns: median_ns("http/loopback_get_small")?,
            reference: "aiohttp, the Python tool's way (session per call)",
            reference_ns: aiohttp_seed,
            goal: ">= 2x aiohttp",
        },
        Row {
            what: "http_request: loopback GET, small JSON body",
            ours_ns: median_ns("http/loopback_get_small")?,
            reference: "aiohttp with one shared session",
            reference_ns: aiohttp_shared,
            goal: "-",
        },
        Row {
            what: "web_fetch: 1.4 MB docs page to Markdown, end to end",
            ours_ns: median_ns("web_fetch/docs_page_1_4mb")?,
            reference: "readabilipy + markdownify (MCP fetch server), same page",
            reference_ns: readabilipy,
            goal: ">= 10x",
        },
        Row {
            what: "bash: `echo hi`, supervised, isolation off",
            ours_ns: median_ns("bash/tool_echo_hi_supervised_only")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "within 1.1x",
        },
        Row {
            what: "bash: `echo hi`, isolated: own view, private network",
            ours_ns: median_ns("bash/tool_echo_hi")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "within 1.3x",
        },
        Row {
            what: "bash: `echo hi`, isolated, host network",
            ours_ns: median_ns("bash/tool_echo_hi_host_network")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "within 1.5x",
        },
        Row {
            what: "private network: made once per session",
            ours_ns: median_ns("bash/make_private_network")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "report",
        },
        Row {
            what: "a session's view: made once per tool, with its jail",
            ours_ns: median_ns("bash/make_view")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "<= 3 ms",
        },
        Row {
            what: "bash: `echo hi` in a warm shell session, isolated",
            ours_ns: median_ns("bash/session_echo_hi")?,
            reference: "a bare spawn of `bash -c 'echo hi'`",
            reference_ns: Some(median_ns("bash/bare_spawn_echo_hi")?),
            goal: "<= 0.6 ms",
        },
        Row {
            what: "run_script: a nested call, on top of the tool",
            ours_ns: (median_ns("nested/script_200_calculator")?
                - median_ns("nested/script_200_loop_only")?)
                / 200.0
                - median_ns("nested/session_calculator")?,
            reference: "-",
            reference_ns: None,
            goal: "<= 2 us",
        },
        Row {
            what: "run_script: 200 calculator calls in one script",
            ours_ns: median_ns("nested/script_200_calculator")?,
            reference: "200 session calls of calculator",
            reference_ns: Some(200.0 * median_ns("nested/session_calculator")?),
            goal: "report",
        },
        Row {
            what: "git_status: 10,000 commits, 1,000 files",
            ours_ns: median_ns("git/status_tool")?,
            reference: "`git status` run directly",
            reference_ns: Some(median_ns("git/status_git")?),
            goal: "<= 1x (report)",
        },
        Row {
            what: "git_status, isolation off (supervised only)",
            ours_ns: median_ns("git/status_tool_supervised_only")?,
            reference: "`git status` run directly",
            reference_ns: Some(median_ns("git/status_git")?),
            goal: "report",
        },
        Row {
            what: "git_log: 100 of 10,000 commits",
            ours_ns: median_ns("git/log_100_tool")?,
            reference: "`git log -n 100` run directly",
            reference_ns: Some(median_ns("git/log_100_git")?),
            goal: "<= 1x (report)",
        },
        Row {
            what: "git_log, isolation off (supervised only)",
            ours_ns: median_ns("git/log_100_tool_supervised_only")?,
            reference: "`git log -n 100` run directly",
            reference_ns: Some(median_ns("git/log_100_git")?),
            goal: "report",
        },
        Row {
            what: "diagnostics (pylsp): first call, server start",
            ours_ns: median_ns("lsp/diagnostics_first")?,
            reference: "-",
            reference_ns: None,
            goal: "report",
        },
        Row {
            what: "diagnostics (pylsp): warm, file unchanged",
            ours_ns: median_ns("lsp/diagnostics_warm_unchanged")?,
            reference: "-",
            reference_ns: None,
            goal: "report",
        },
        Row {
            what: "diagnostics (pylsp): warm, file changed",
            ours_ns: median_ns("lsp/diagnostics_warm_changed")?,
            reference: "-",
            reference_ns: None,
            goal: "report (pylsp waits 0.5 s)",
        },
        Row {
            what: "calculator tool call via ToolSet + ToolRunner",
            ours_ns: median_ns("dispatch/calculator_10_ops")?,
            reference: "-",
            reference_ns: None,
            goal: "-",
        },
    ];
    println!(
        "\n{:<48} {:>10}  {:<36} {:>10} {:>8}  goal",
        "benchmark", "ours", "reference", "ref", "speedup"
    );
    for r in rows {
        let (ref_text, ratio) = match r.reference_ns {
            Some(ns) => (human(ns), format!("{:.1}x", ns / r.ours_ns)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<48} {:>10}  {:<36} {:>10} {:>8}  {}",
            r.what,
            human(r.ours_ns),
            r.reference,
            ref_text,
            ratio,
            r.goal
        );
    }
    if !python {
        println!("(python3 not found: reference columns left empty)");
    }
    crate::edit_bench::run(quick)?;
    egress()?;
    crate::mcp_bench::run()?;
    crate::docker_bench::run()?;
    crate::python_bench::run_bench(true)?;
    if args.iter().any(|a| a == "--no-search") {
        return Ok(());
    }
    crate::search_bench::run(quick)
}

/// A venv python with aiohttp (the Python tools' client) and readabilipy with
/// markdownify (the MCP reference fetch server's conversion), made on first use under
/// `target/bench-venv`.
fn aiohttp_python() -> Option<std::path::PathBuf> {
    let venv = root().join("target/bench-venv");
    let python = venv.join("bin/python");
    let ok = |p: &std::path::Path| {
        Command::new(p)
            .args(["-c", "import aiohttp, readabilipy, markdownify"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ok(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "aiohttp",
                    "readabilipy==0.3.0",
                    "markdownify==1.2.3",
                ])
                .status()
                .is_ok_and(|s| s.success());
        if !made {
            eprintln!(
                "cannot install aiohttp into {}; skipping that reference",
                venv.display()
            );
            return None;
        }
    }
    Some(python)
}

/// Median wall time of starting `python3 -c 'print(41 + 1)'` and waiting for it.
fn spawn_per_call_ns() -> anyhow::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..21 {
        let start = std::time::Instant::now();
        let out = Command::new("python3")
            .args(["-c", "print(41 + 1)"])
            .output()?;
        if !out.status.success() {
            bail!("python3 -c failed");
        }
        times.push(start.elapsed().as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub(crate) fn human(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// The median of a criterion benchmark, from its saved estimates.
pub(crate) fn median_ns(id: &str) -> anyhow::Result<f64> {
    let path = root()
        .join("target/criterion")
        .join(id)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no criterion results at {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    json["median"]["point_estimate"]
        .as_f64()
        .with_context(|| format!("no median in {}", path.display()))
}

fn python_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn python_seconds(args: &[&str]) -> anyhow::Result<f64> {
    let mut c = Command::new("python3");
    c.args(args).current_dir(root());
    let text = output(c)?;
    let value: f64 = text
        .trim()
        .parse()
        .with_context(|| format!("python printed {text:?}"))?;
    if !value.is_finite() || value <= 0.0 {
        bail!("python reported {value}");
    }
    Ok(value)
}
