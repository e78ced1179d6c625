//! `jianmu mcp` driven by a real MCP client: the Python `mcp` package, in a venv the
//! test makes (once) under `target/`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

const MCP_VERSION: &str = "2.3.0";

/// The venv's python with `mcp` installed, made on first use.
pub(crate) fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv");
    let python = venv.join("bin/python");
    let has_mcp = |p: &Path| {
        jianmu_process::std_command(p)
            .args(["-c", &format!("import mcp, importlib.metadata as m; assert m.version('mcp') == '{MCP_VERSION}'")])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_mcp(&python) {
        let status = jianmu_process::std_command("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 is needed for the MCP client test");
        assert!(status.success(), "cannot create {}", venv.display());
        let status = jianmu_process::std_command(&python)
            .args(["-m", "pip", "install", "-q", &format!("mcp=={MCP_VERSION}")])
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cannot install mcp=={MCP_VERSION} from PyPI"
        );
    }
    python
}

#[test]
fn a_real_mcp_client_lists_calls_and_cancels() {
    client_scenario(&[], |_| {});
}

/// The same scenario with every call running in the Docker sandbox: the answers do
/// not change.
#[cfg(feature = "docker")]
#[test]
fn a_real_mcp_client_gets_the_same_answers_from_the_docker_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[execution.docker]\nimage = \"{}\"\n",
            crate::docker::test_image()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    client_scenario(
        &["--sandbox", "docker", "--config", &config],
        crate::docker::give_to_sandbox_user,
    );
}

/// Runs the client `script` with this build's `jianmu` and `args`; what it saw.
fn run_client(script: &Path, args: &[&std::ffi::OsStr]) -> Value {
    let out = jianmu_process::std_command(python())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_jianmu"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `mcp_client.py` against `jianmu mcp FLAGS` and checks what it saw;
/// `prepare` gets the workspace before the server starts.
fn client_scenario(flags: &[&str], prepare: fn(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
    // Big enough that a regex scan of it is still running when the call is cancelled.
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    std::fs::write(
        ws.join("big.txt"),
        line.repeat(128 * 1024 * 1024 / line.len()),
    )
    .unwrap();
    std::fs::write(ws.join("pixel.png"), jianmu_test_support::PNG).unwrap();
    prepare(&ws);
    let audit = dir.path().join("audit.jsonl");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.py");
    let mut args = vec![ws.as_os_str(), audit.as_os_str()];
    args.extend(flags.iter().map(std::ffi::OsStr::new));
    let seen = run_client(&script, &args);
    assert_eq!(seen["server"], "jianmu");
    assert_eq!(seen["numbered"], "1\thi\n(lines 1-1 of 1)");
    let script = seen["script"][1].as_str().unwrap();
    assert_eq!(seen["script"][0], false, "{script}");
    assert!(
        script.starts_with("value: [1,42]\ncalls: 2 (2 ok, 0 failed; "),
        "{script}"
    );
    assert_eq!(
        seen["image"],
        json!([["text", null], ["image", "image/png"], true, 3])
    );
    let tools = seen["tools"].as_object().unwrap();
    assert!(tools.len() >= 8, "{tools:?}");
    assert_eq!(
        tools["calculator"],
        json!({"schema_type": "object", "read_only": true, "destructive": false, "output_schema": false})
    );
    assert_eq!(tools["write_file"]["destructive"], true);
    // A script may do what the tools it calls do.
    assert_eq!(tools["run_script"]["destructive"], true);
    // Every tool with structured output advertises its schema, and what it returned
    // passed the client's check against it.
    for name in [
        "write_file",
        "read_file",
        "list_dir",
        "glob_search",
        "grep_search",
        "edit_file",
        "apply_patch",
        "bash",
        "bash_output",
        "bash_kill",
        "bash_jobs",
    ] {
        assert_eq!(tools[name]["output_schema"], true, "{name}");
    }
    // ... and its structured content holds the whole answer the text block gives.
    for (name, outcome) in seen["checked"].as_object().unwrap() {
        assert_eq!(outcome, &json!([false, true, true]), "{name}");
    }
    assert_eq!(seen["checked"].as_object().unwrap().len(), 10);
    // A 3 s command sent with a progress token: progress notifications while it ran,
    // growing, with the output so far in words.
    assert_eq!(seen["progress"]["result"], json!([false, "begun\nover\n"]));
    let updates = seen["progress"]["updates"].as_array().unwrap();
    assert!(updates.len() >= 2, "{updates:?}");
    let values: Vec<f64> = updates.iter().map(|u| u[0].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(
        values[0] >= 1.0 && values[values.len() - 1] < 4.0,
        "{values:?}"
    );
    assert_eq!(updates[0][1], Value::Null);
    assert!(
        updates[0][2]
            .as_str()
            .unwrap()
            .ends_with("s; 1 line (6 bytes) of output so far"),
        "{updates:?}"
    );
    assert_eq!(seen["job"], json!([true, "ready\n", true, false, false]));
    assert_eq!(
        seen["ok"],
        json!([false, "1267650600228229401496703205376"])
    );
    assert_eq!(
        seen["tool_error"],
        json!([true, "ZeroDivisionError: division by zero"])
    );
    assert_eq!(
        seen["bad_arguments"],
        json!([
            true,
            "invalid arguments for `calculator`: at /input: 7 is not of type \"string\""
        ])
    );
    assert_eq!(
        seen["refused"],
        json!([
            true,
            "refused `../outside.txt`: the path is outside the workspace"
        ])
    );
    // A tool that does not exist is a protocol error naming the known ones.
    assert_eq!(seen["unknown"][0], -32602, "{}", seen["unknown"]);
    assert!(
        seen["unknown"][1]
            .as_str()
            .unwrap()
            .contains("unknown tool `no_such_tool`; known tools: apply_patch"),
        "{}",
        seen["unknown"]
    );
    assert_eq!(seen["structured"]["bytes_written"], 2);
    // A stateful tool keeps its state for the session.
    assert_eq!(seen["stateful"], json!([false, "kept"]));
    assert_eq!(seen["after_cancel"], json!([false, "42"]));
    // The audit log saw the grep end as cancelled, not completed.
    let log = std::fs::read_to_string(&audit).unwrap();
    let grep: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["tool"] == "grep_search" && l["arguments"]["glob"] == "big.txt")
        .collect();
    assert_eq!(grep.len(), 1, "{log}");
    assert_eq!(
        (&grep[0]["outcome"], &grep[0]["error"]),
        (&json!("error"), &json!("cancelled"))
    );
}

/// `[mcp] defer` leaves tools out of `tools/list`; a real client finds them with
/// `tool_search`, is told the list changed, and can call them from then on.
#[test]
fn a_real_mcp_client_finds_deferred_tools_with_tool_search() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let git = jianmu_process::std_command("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(git.success());
    let config = dir.path().join("jianmu.toml");
    std::fs::write(&config, "[mcp]\ndefer = [\"git_*\", \"lsp\"]\n").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_defer.py");
    let seen = run_client(&script, &[ws.as_os_str(), config.as_os_str()]);
    let names =
        |key: &str| -> Vec<String> { serde_json::from_value(seen[key]["names"].clone()).unwrap() };
    let (plain, deferred) = (names("plain"), names("deferred"));
    assert!(plain.contains(&"git_status".to_owned()) && !plain.contains(&"tool_search".to_owned()));
    assert!(
        !deferred
            .iter()
            .any(|n| n.starts_with("git_") || n == "hover"),
        "{deferred:?}"
    );
    assert!(
        deferred.contains(&"tool_search".to_owned()) && deferred.contains(&"read_file".to_owned())
    );
    assert_eq!(seen["plain"]["list_changed"], false);
    assert_eq!(seen["deferred"]["list_changed"], true);
    let (plain_chars, deferred_chars) = (
        seen["plain"]["chars"].as_u64().unwrap(),
        seen["deferred"]["chars"].as_u64().unwrap(),
    );
    assert!(
        deferred_chars < plain_chars,
        "{deferred_chars} vs {plain_chars}"
    );
    eprintln!("tools/list: {plain_chars} characters, {deferred_chars} with git and lsp deferred");
    assert_eq!(seen["early"][0], true);
    assert!(
        seen["early"][1].as_str().unwrap().contains("tool_search"),
        "{seen}"
    );
    assert_eq!(seen["found"][0], false, "{seen}");
    assert_eq!(seen["found"][1][0], "git_status", "{seen}");
    assert_eq!(seen["found"][2], true, "{seen}");
    assert_eq!(seen["bad"][0], true, "{seen}");
    assert_eq!(seen["picked"], json!(["hover"]));
    assert!(seen["changed"].as_u64().unwrap() >= 1, "{seen}");
    let relisted: Vec<String> = serde_json::from_value(seen["relisted"].clone()).unwrap();
    assert!(relisted.contains(&"git_status".to_owned()) && relisted.contains(&"hover".to_owned()));
    assert!(!relisted.contains(&"git_log".to_owned()), "{relisted:?}");
    assert_eq!(seen["status"][0], false, "{seen}");
}

/// `jianmu mcp --ask`: the real Python client is asked by elicitation on both
/// revisions (2025-11-25 on the protocol session; 2026-07-28 by `input_required` and a
/// retry), its answer holds as given (`allow_session` remembered, a decline refused),
/// and a client that cannot be asked is refused with the rule named.
#[test]
fn asks_reach_the_client_by_elicitation_on_both_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_ask.py");
    let seen = run_client(&script, &[dir.path().as_os_str()]);
    let refused = "call to `bash` denied: the call was refused when asked (ask `command:echo`); \
                   do not retry it unchanged";
    let ran = json!([["ok", "one\n"], ["ok", "two\n"], ["ok", "three"]]);
    for revision in ["legacy", "2026-07-28"] {
        let case = |answer: &str| &seen[format!("{revision} {answer}")];
        let asked = |answer: &str| case(answer)["asked"].as_array().unwrap().len();
        assert_eq!(case("allow_session")["calls"], ran, "{revision}");
        assert_eq!(
            asked("allow_session"),
            1,
            "{revision}: remembered for the session"
        );
        assert_eq!(case("allow_once")["calls"], ran, "{revision}");
        assert_eq!(asked("allow_once"), 2, "{revision}: once is once");
        for answer in ["deny", "decline"] {
            assert_eq!(
                case(answer)["calls"],
                json!([["error", refused], ["error", refused], ["ok", "three"]]),
                "{revision} {answer}"
            );
        }
        let first = &case("allow_once")["asked"][0];
        assert_eq!(
            first["message"],
            "Allow the tool `bash` to run?\necho one\n(asked by the policy rule `command:echo`)"
        );
        assert_eq!(
            first["schema"]["properties"]["decision"]["enum"],
            json!(["allow_once", "allow_session", "deny"])
        );
        assert_eq!(asked("None"), 0);
    }
    // Without elicitation: on a protocol session a tool error; on 2026-07-28 the
    // error the specification gives for a missing client capability.
    let legacy = "call to `bash` denied: it needs approval (ask `command:echo`) and the client \
                  declared no elicitation capability to ask with";
    assert_eq!(
        seen["legacy None"]["calls"],
        json!([["error", legacy], ["error", legacy], ["ok", "three"]])
    );
    let modern = "call to `bash` needs approval (ask `command:echo`), asked by elicitation, which \
                  this client did not declare";
    assert_eq!(
        seen["2026-07-28 None"]["calls"],
        json!([["raised", modern], ["raised", modern], ["ok", "three"]])
    );
}
