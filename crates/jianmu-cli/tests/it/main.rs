//! The `jianmu` command end to end: the real binary, its stdout, stderr and exit codes.
#![recursion_limit = "256"]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

#[cfg(feature = "full")]
mod ask;
#[cfg(all(feature = "docker", feature = "full"))]
mod docker;
#[cfg(feature = "full")]
mod egress;
#[cfg(all(feature = "docker", feature = "full"))]
mod engine;
#[cfg(all(feature = "mcp", feature = "full"))]
mod mcp;
#[cfg(all(feature = "mcp", feature = "full"))]
mod mcp_http;
#[cfg(all(feature = "mcp", feature = "full"))]
mod mcp_lines;
#[cfg(feature = "full")]
mod native;
#[cfg(all(feature = "docker", feature = "full"))]
mod runner;
#[cfg(all(feature = "docker", feature = "full"))]
mod swarm;
#[cfg(all(feature = "mcp", feature = "full"))]
mod view;

fn jianmu(args: &[&str], dir: &Path) -> Output {
    jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(args)
        .current_dir(dir)
        .env_remove("JIANMU_LOG")
        .output()
        .expect("the jianmu binary runs")
}

#[track_caller]
fn check(args: &[&str], code: i32, stdout: &str, stderr: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu(args, dir.path());
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        (out.status.code(), o.as_ref(), e.as_ref()),
        (Some(code), stdout, stderr),
        "jianmu {args:?}"
    );
}

/// The tools each feature set must list.
// Each feature adds a name, so the list is built by pushes.
#[allow(unused_mut, clippy::vec_init_then_push)]
fn expected_tools() -> Vec<&'static str> {
    let mut names = Vec::new();
    #[cfg(feature = "calculator")]
    names.push("calculator");
    #[cfg(feature = "checkpoint")]
    names.extend(["checkpoint_diff", "checkpoint_list", "checkpoint_restore"]);
    #[cfg(feature = "code")]
    names.extend([
        "apply_patch",
        "edit_file",
        "file_info",
        "glob_search",
        "grep_search",
        "str_replace",
    ]);
    #[cfg(feature = "fs")]
    names.extend(["list_dir", "notebook_edit", "read_file", "write_file"]);
    #[cfg(feature = "git")]
    names.extend([
        "git_add",
        "git_blame",
        "git_branch",
        "git_checkout",
        "git_commit",
        "git_diff",
        "git_log",
        "git_show",
        "git_status",
    ]);
    #[cfg(feature = "http")]
    names.extend(["http_request", "web_fetch"]);
    #[cfg(feature = "lsp")]
    names.extend([
        "definition",
        "diagnostics",
        "hover",
        "references",
        "symbols",
    ]);
    #[cfg(feature = "script")]
    names.extend(["python_repl", "rhai_repl", "run_script"]);
    #[cfg(feature = "search")]
    names.push("duckduckgo_search");
    #[cfg(feature = "shell")]
    names.extend([
        "bash",
        "bash_jobs",
        "bash_kill",
        "bash_output",
        "expose_port",
    ]);
    names.sort_unstable();
    names
}

/// The tool names and the aliases of the compiled-in tools, sorted: what an unknown
/// name is answered with.
fn expected_names_and_aliases() -> Vec<&'static str> {
    let mut names = expected_tools();
    #[cfg(feature = "fs")]
    names.extend(["file_read", "file_write"]);
    #[cfg(feature = "script")]
    names.push("python_eval");
    #[cfg(feature = "search")]
    names.push("web_search");
    names.sort_unstable();
    names
}

/// `--defer` marks the tools it names `defer_loading` in Anthropic's format and adds
/// Anthropic's BM25 tool search tool to find them; another format refuses it.
#[cfg(all(feature = "git", feature = "lsp", feature = "fs"))]
#[test]
fn tools_for_anthropic_can_be_loaded_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu(
        &[
            "tools",
            "--format",
            "anthropic",
            "--defer",
            "git_*",
            "--defer",
            "lsp",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let deferred = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t.get("defer_loading") == Some(&Value::Bool(true)))
    };
    assert_eq!(deferred("git_log"), Some(true));
    assert_eq!(deferred("hover"), Some(true));
    assert_eq!(deferred("read_file"), Some(false));
    assert_eq!(
        tools.last().unwrap(),
        &serde_json::json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
    );
    let plain = jianmu(&["tools", "--format", "anthropic"], dir.path());
    let plain: Vec<Value> = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(
        plain
            .iter()
            .all(|t| t.get("defer_loading").is_none() && t.get("type").is_none())
    );
    for other in [
        &["tools", "--format", "openai", "--defer", "git_*"][..],
        &["tools", "--defer", "git_*"],
        &["tools", "--format", "anthropic-native", "--defer", "git_*"],
    ] {
        let out = jianmu(other, dir.path());
        assert_eq!(out.status.code(), Some(2), "{other:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("--defer goes with --format anthropic or openai-responses"),
            "{other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--format openai-responses` prints flat Responses function tools; with `--defer`,
/// the tools it names are grouped in a namespace per feature with `defer_loading`,
/// and the hosted `tool_search` tool is added.
#[cfg(all(
    feature = "git",
    feature = "lsp",
    feature = "fs",
    feature = "calculator"
))]
#[test]
fn tools_for_openai_responses_can_be_loaded_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| -> Vec<Value> {
        let out = jianmu(args, dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let plain = run(&["tools", "--format", "openai-responses"]);
    let calculator = plain.iter().find(|t| t["name"] == "calculator").unwrap();
    assert_eq!(calculator["type"], "function");
    // A bare-string tool's input is wrapped in an object, as function tools need.
    assert_eq!(calculator["parameters"]["type"], "object");
    assert!(
        plain
            .iter()
            .all(|t| t["type"] == "function" && t.get("defer_loading").is_none())
    );
    // Strict where the schema allows it (every property required), and said so.
    assert!(plain.iter().all(|t| t["strict"].is_boolean()));
    let read_file = plain.iter().find(|t| t["name"] == "read_file").unwrap();
    assert_eq!(read_file["strict"], true);
    assert_eq!(read_file["parameters"]["additionalProperties"], false);

    let tools = run(&[
        "tools",
        "--format",
        "openai-responses",
        "--defer",
        "git_*",
        "--defer",
        "lsp",
    ]);
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "read_file" && t["type"] == "function")
    );
    assert!(
        !tools
            .iter()
            .any(|t| t["name"] == "git_log" || t["name"] == "hover")
    );
    let space = |name: &str| {
        tools
            .iter()
            .find(|t| t["type"] == "namespace" && t["name"] == name)
            .unwrap()
    };
    let git = space("git");
    let names: Vec<&str> = git["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"git_log") && names.iter().all(|n| n.starts_with("git_")),
        "{names:?}"
    );
    assert!(
        git["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["defer_loading"] == true)
    );
    assert!(git["description"].as_str().unwrap().contains("git_log"));
    assert!(
        space("lsp")["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "hover")
    );
    assert_eq!(
        tools.last().unwrap(),
        &serde_json::json!({"type": "tool_search"})
    );
}

#[test]
fn tools_lists_exactly_the_compiled_in_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu(&["tools", "--json"], dir.path());
    assert!(out.status.success());
    let specs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, expected_tools());
    for spec in &specs {
        for key in [
            "description",
            "input_schema",
            "output_schema",
            "parallel_safe",
            "effect_tags",
        ] {
            assert!(spec.get(key).is_some(), "{key} missing in {spec}");
        }
    }
    let table = jianmu(&["tools"], dir.path());
    let table = String::from_utf8(table.stdout).unwrap();
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("NAME"));
    let listed: Vec<&str> = lines
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(listed, expected_tools());
}

#[test]
fn usage_errors_exit_2() {
    check(
        &["call", "no_such_tool", "{}"],
        2,
        "",
        &format!(
            "jianmu: unknown tool `no_such_tool`; known tools: {}\n",
            expected_names_and_aliases().join(", ")
        ),
    );
    // The name is a usage error whatever the arguments are.
    let out = jianmu(&["call", "no_such_tool", "not json"], Path::new("."));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    #[cfg(not(feature = "shell"))]
    check(
        &["schema", "bash"],
        2,
        "",
        "jianmu: tool `bash` is not compiled in; enable the `shell` Cargo feature of jianmu-provider\n",
    );
    let out = jianmu(&["frobnicate"], Path::new("."));
    assert_eq!(out.status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[execution]\ntool_runner = \"kvm\"\n",
    )
    .unwrap();
    let out = jianmu(&["tools"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("jianmu: invalid jianmu.toml"), "{err}");
    check(
        &["--workspace", "/definitely/not/here", "tools"],
        2,
        "",
        "jianmu: workspace /definitely/not/here is not an existing directory: No such file or directory (os error 2)\n",
    );
}

#[cfg(feature = "calculator")]
mod calculator {
    use super::*;

    #[test]
    fn call_prints_the_answer() {
        check(
            &["call", "calculator", "\"2**100\""],
            0,
            "1267650600228229401496703205376\n",
            "",
        );
        check(
            &["call", "calculator", r#"{"input": "7/2"}"#],
            0,
            "3.5\n",
            "",
        );
    }

    #[test]
    fn tool_errors_exit_1_with_one_line_on_stderr() {
        check(
            &["call", "calculator", "\"1/0\""],
            1,
            "",
            "Error: ZeroDivisionError: division by zero\n",
        );
        check(
            &["call", "calculator", "{\"input\": 3}"],
            1,
            "",
            "Error: invalid arguments for `calculator`: at /input: 3 is not of type \"string\"\n",
        );
        check(
            &["call", "calculator", "2+2"],
            1,
            "",
            "Error: the arguments are not valid JSON (trailing characters at line 1 column 2); a bare-string tool takes a quoted string, e.g. '\"2+2\"'\n",
        );
    }

    #[test]
    fn schema_prints_the_spec_and_accepts_aliases() {
        let out = jianmu(&["schema", "calculator"], Path::new("."));
        assert!(out.status.success());
        let spec: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(spec["name"], "calculator");
        assert_eq!(spec["input_schema"]["type"], "string");
        assert_eq!(spec["parallel_safe"], true);
    }

    #[test]
    fn config_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        // Readable by the sandbox's default user, so the Docker settings are accepted
        // and the missing daemon is what the call runs into.
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            dir.path().join("jianmu.toml"),
            "[execution]\ntool_runner = \"docker\"\n[execution.docker]\ndocker_host = \"unix:///nonexistent/docker.sock\"\n",
        )
        .unwrap();
        // The file asks for docker, which is not there: the call fails and says so
        // rather than silently running locally. (It names an engine, which only a file
        // named with --config may do.)
        let out = jianmu(
            &["--config", "jianmu.toml", "call", "calculator", "\"1+1\""],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        #[cfg(feature = "docker")]
        {
            // The call could not run at all: an operator's problem, not the model's.
            assert_eq!(out.status.code(), Some(3));
            assert!(
                stderr.starts_with("Error: runner failed for `calculator`: sandbox unavailable: cannot reach the Docker daemon at unix:///nonexistent/docker.sock"),
                "{stderr}"
            );
        }
        #[cfg(not(feature = "docker"))]
        {
            assert_eq!(out.status.code(), Some(2));
            assert_eq!(
                stderr,
                "jianmu: sandbox `docker` is not compiled into this build of jianmu\n"
            );
        }
        // The flag overrides the file.
        let out = jianmu(
            &[
                "--config",
                "jianmu.toml",
                "call",
                "calculator",
                "\"1+1\"",
                "--sandbox",
                "local",
            ],
            dir.path(),
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n");
    }

    #[test]
    fn docs_tools_md_is_fresh() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = jianmu(&["tools", "--markdown"], &root);
        assert!(out.status.success());
        let live = String::from_utf8(out.stdout).unwrap();
        let committed = std::fs::read_to_string(root.join("docs/tools.md")).unwrap_or_default();
        // Only the full build lists every tool, so only it owns the page.
        if cfg!(feature = "full") {
            assert!(
                live == committed,
                "docs/tools.md is stale: run `cargo xtask docs`"
            );
        }
    }
}

#[cfg(all(feature = "fs", feature = "code"))]
mod files {
    use super::*;

    #[test]
    fn write_read_search_replace_in_a_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().to_str().unwrap();
        let run = |args: &[&str]| {
            let mut all = args.to_vec();
            all.extend(["--workspace", dir]);
            let out = jianmu(&all, Path::new("/"));
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let ok = |s: &str| (0, s.to_owned(), String::new());
        assert_eq!(
            run(&[
                "call",
                "write_file",
                r#"{"path": "src/a.rs", "content": "fn alpha() {}\n"}"#
            ]),
            ok("Wrote src/a.rs (14 bytes)\n")
        );
        assert_eq!(
            run(&["call", "file_read", r#"{"path": "src/a.rs"}"#]),
            ok("fn alpha() {}\n")
        );
        assert_eq!(
            run(&["call", "grep_search", r#"{"query": "alpha"}"#]),
            ok("src/a.rs:1:fn alpha() {}\n")
        );
        assert_eq!(
            run(&[
                "call",
                "str_replace",
                r#"{"path": "src/a.rs", "old": "alpha", "new": "beta"}"#
            ]),
            ok("Replaced 1 occurrence in src/a.rs\n")
        );
        assert_eq!(
            run(&["call", "glob_search", r#"{"pattern": "*.rs"}"#]),
            ok("src/a.rs\n")
        );
        assert_eq!(
            run(&["call", "read_file", r#"{"path": "../../etc/passwd"}"#]),
            (
                1,
                String::new(),
                "Error: refused `../../etc/passwd`: the path is outside the workspace\n".to_owned()
            )
        );
    }
}

#[cfg(all(feature = "fs", feature = "calculator"))]
mod policy {
    use super::*;

    #[test]
    fn deny_read_only_and_the_audit_log() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().to_str().unwrap();
        let log = ws.path().join("audit.jsonl");
        let log_arg = log.to_str().unwrap();
        let run = |args: &[&str]| {
            let mut all = args.to_vec();
            all.extend(["--workspace", dir, "--audit-log", log_arg]);
            let out = jianmu(&all, Path::new("/"));
            (
                out.status.code().unwrap(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        assert_eq!(
            run(&["call", "write_file", r#"{"path": "a.txt", "content": "x"}"#, "--read-only"]),
            (1, "Error: call to `write_file` denied: effect `filesystem:write` is denied (read-only mode)\n".to_owned())
        );
        assert_eq!(
            run(&["call", "calculator", r#""1+1""#, "--deny", "calculator"]),
            (
                1,
                "Error: call to `calculator` denied: the tool is denied (deny `calculator`)\n"
                    .to_owned()
            )
        );
        assert_eq!(run(&["call", "calculator", r#""1+1""#, "--read-only"]).0, 0);
        std::fs::write(
            ws.path().join("jianmu.toml"),
            "[policy]\ndeny = [\"filesystem\"]\n",
        )
        .unwrap();
        let out = jianmu(
            &[
                "call",
                "list_dir",
                "{}",
                "--config",
                ws.path().join("jianmu.toml").to_str().unwrap(),
                "--workspace",
                dir,
            ],
            Path::new("/"),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "Error: call to `list_dir` denied: effect `filesystem:read` is denied (deny `filesystem`)\n"
        );
        let lines: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let outcomes: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l["tool"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("write_file", "error"),
                ("calculator", "error"),
                ("calculator", "ok")
            ]
        );
    }
}

#[test]
fn version_names_the_features_and_completions_are_printed() {
    let out = jianmu(&["--version"], Path::new("."));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("jianmu {} (features: ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    for name in expected_features() {
        assert!(text.contains(name), "{text} lacks {name}");
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = jianmu(&["completions", shell], Path::new("."));
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("jianmu") && script.contains("call"),
            "{shell}"
        );
    }
    let out = jianmu(&["completions", "tcsh"], Path::new("."));
    assert_eq!(out.status.code(), Some(2));
}

/// The Cargo features this test binary was built with, as `--version` names them.
fn expected_features() -> Vec<&'static str> {
    [
        ("calculator", cfg!(feature = "calculator")),
        ("fs", cfg!(feature = "fs")),
        ("git", cfg!(feature = "git")),
        ("lsp", cfg!(feature = "lsp")),
        ("shell", cfg!(feature = "shell")),
        ("mcp", cfg!(feature = "mcp")),
        ("docker", cfg!(feature = "docker")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

#[test]
fn sandbox_status_says_what_isolation_is_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu(&["sandbox", "status", "--json"], dir.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kernel = &report["kernel"];
    for tool in ["bash", "python_repl", "git", "lsp"] {
        let line = report["local"][tool].as_str().unwrap();
        assert!(line.starts_with("supervised ("), "{line}");
        assert_eq!(
            line.contains("own pid namespace"),
            kernel["user_namespaces"] == true,
            "{line}"
        );
        assert_eq!(
            line.contains("landlock v"),
            kernel["landlock_abi"].as_u64() > Some(0),
            "{line}"
        );
        // The network mode in force: a private network where the kernel makes one.
        assert_eq!(
            line.contains("private network (loopback only)"),
            kernel["private_networks"] == true && kernel["user_namespaces"] == true,
            "{line}"
        );
    }
    assert!(report["docker"]["summary"].is_string());
    // The view each tool's commands get: made here, and listed.
    if kernel["user_namespaces"] == true {
        let view = &report["view"]["bash"];
        assert_eq!(view["error"], Value::Null, "{view}");
        let list = |kind: &str| view[kind].as_array().unwrap().clone();
        assert!(
            list("read_only").contains(&serde_json::json!("/usr")),
            "{view}"
        );
        let ws = dir.path().canonicalize().unwrap();
        assert!(
            list("writable").contains(&serde_json::json!(ws.to_str().unwrap())),
            "{view}"
        );
        assert!(
            list("hidden").contains(&serde_json::json!("/run")),
            "{view}"
        );
    }
    // `mode = "off"` keeps only the supervision; the text form is one line per part.
    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[tools.bash.isolation]\nmode = \"off\"\n",
    )
    .unwrap();
    let out = jianmu(
        &["--config", "jianmu.toml", "sandbox", "status"],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let bash = text.lines().find(|l| l.starts_with("bash: ")).unwrap();
    assert!(
        bash == "bash: supervised (own pid namespace)" || bash == "bash: supervised (subreaper)",
        "{text}"
    );
    // One line per tool, the kernel, Docker; then the view of the tools that have one.
    let summary = text
        .lines()
        .take_while(|l| !l.starts_with("view of "))
        .count();
    assert_eq!(summary, 6, "{text}");
    if kernel["user_namespaces"] == true {
        assert!(
            text.contains("view of git's commands:\n  read-only: /usr"),
            "{text}"
        );
        assert!(text.contains("  hidden: /run, /var/run"), "{text}");
    }
}

/// A project's own test suite that starts local servers (HTTP, IPv6, UDP, Unix and
/// abstract sockets, asyncio, XML-RPC, a multiprocessing manager) passes under `jianmu
/// call bash` with the default settings, as it does outside.
#[cfg(all(feature = "shell", target_os = "linux"))]
#[test]
fn a_projects_socket_using_suite_passes_under_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("test_sockets.py"),
        include_str!("socket_suite.py"),
    )
    .unwrap();
    let outside = jianmu_process::std_command("python3")
        .args(["-m", "unittest", "test_sockets"])
        .env("SUITE_OUTSIDE", "1")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        outside.status.success(),
        "{}",
        String::from_utf8_lossy(&outside.stderr)
    );
    let out = jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "python3 -m unittest -v test_sockets 2>&1"}"#,
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (A ResourceWarning may still be printed after "OK", at interpreter exit.)
    assert!(
        text.contains("Ran 9 tests") && text.lines().any(|l| l == "OK") && !text.contains("FAILED"),
        "{text}"
    );
}

/// A one-shot call's saved output outlives the call (its answer names the file, read
/// after the process ends), under the folder and within the budget `[outputs]` sets.
#[cfg(feature = "shell")]
#[test]
fn a_one_shot_call_keeps_the_output_it_saved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[outputs]\nmax_chars = 2000\nfolder = \"scratch/saved\"\n",
    )
    .unwrap();
    let out = jianmu(
        &["call", "bash", r#"{"command": "seq 1 5000"}"#],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // The budget: 1600 bytes of head and 400 of tail, and the notes around them.
    assert!(stdout.len() < 2600, "{}: {stdout}", stdout.len());
    let at = stdout.find("scratch/saved/kept-").expect(&stdout);
    let path: String = stdout[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ':' && *c != ')')
        .collect();
    let all: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(dir.path().join(path)).unwrap(), all);

    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[outputs]\nfolder = \"../out\"\n",
    )
    .unwrap();
    let out = jianmu(&["call", "bash", r#"{"command": "true"}"#], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("must be a relative path inside the workspace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `jianmu.toml` found in the working folder (a cloned repository's, or one a command
/// wrote) may only tighten: one that opens the network or names a program is refused,
/// saying how to trust it; named with `--config`, the same file is used; a tightening
/// one is used as found.
#[cfg(feature = "shell")]
#[test]
fn a_settings_file_found_here_may_only_tighten() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[tools.bash.isolation]\nnetwork = true\n[tools.bash]\nshell = \"./evil\"\n",
    )
    .unwrap();
    let out = jianmu(&["call", "bash", r#"{"command": "echo hi"}"#], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[tools.bash.isolation] network = true")
            && err.contains("[tools.bash] shell = \"./evil\"")
            && err.contains("--config jianmu.toml"),
        "{err}"
    );
    let out = jianmu(
        &["--config", "jianmu.toml", "sandbox", "status"],
        dir.path(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("host network"));
    std::fs::write(
        dir.path().join("jianmu.toml"),
        "[policy]\ndeny = [\"calculator\"]\n",
    )
    .unwrap();
    let out = jianmu(&["call", "calculator", r#"{"input": "1+1"}"#], dir.path());
    assert_ne!(
        out.status.code(),
        Some(0),
        "the tightening file was not read"
    );
}

/// SIGTERM ends `jianmu call` at once, even while a page is being converted (work on
/// a blocking thread the call no longer waits for).
#[cfg(feature = "http")]
#[test]
fn a_call_ends_at_sigterm_whatever_runs() {
    use std::io::{Read as _, Write as _};
    use std::time::{Duration, Instant};
    // A page big enough that converting it takes far longer than this test waits.
    let row = "<div class=c><p>word <a href=/x>link</a> <b>bold</b> text text text</p></div>";
    let page = format!("<html><body>{}</body></html>", row.repeat(300_000));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sent_tx, sent) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                return;
            }
            request.extend_from_slice(&buf[..n]);
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            page.len()
        );
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(page.as_bytes()).unwrap();
        let _ = sent_tx.send(());
        let _ = conn.read(&mut buf);
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[tools.web_fetch]\nallow_hosts = [\"127.0.0.1\"]\ntimeout_secs = 900\n\
         respect_robots = false\nmax_body_bytes = 64000000\n",
    )
    .unwrap();
    let mut child = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
        .args(["--config", config.to_str().unwrap(), "call", "web_fetch"])
        .arg(format!("{{\"url\": \"http://127.0.0.1:{port}/\"}}"))
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    sent.recv_timeout(Duration::from_secs(60))
        .expect("the page is fetched");
    std::thread::sleep(Duration::from_millis(500));
    let kill = jianmu_process::std_command("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("jianmu call was still converting 20 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143), "128 + SIGTERM");
}

/// An error names its cause once: the chain printed, not the cause repeated.
#[cfg(feature = "calculator")]
#[test]
fn an_error_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("no/such/folder/audit.jsonl");
    let out = jianmu(
        &[
            "call",
            "calculator",
            "\"1+1\"",
            "--audit-log",
            log.to_str().unwrap(),
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("cannot open the audit log"), "{text}");
    assert_eq!(
        text.matches("No such file or directory").count(),
        1,
        "{text}"
    );
}
