//! `jianmu call` and the policy's `ask` rules: asked at a terminal (under a real pty),
//! refused without one (the flag that allows it named), answered by `--approve`.

use std::path::Path;

use super::jianmu;

/// Runs `jianmu ARGS` in `dir` under a new pty, answering `answer` to its question;
/// returns (exit code, everything the terminal showed).
fn on_a_terminal(args: &[&str], dir: &Path, answer: &str) -> (i32, String) {
    const DRIVER: &str = r#"
import os, pty, sys, json
args = json.loads(sys.argv[1]); answer = sys.argv[2].encode()
pid, fd = pty.fork()
if pid == 0:
    os.execv(args[0], args)
seen = b""
answered = False
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
    if not answered and b"Allow?" in seen:
        os.write(fd, answer + b"\n")
        answered = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(json.dumps({"code": os.waitstatus_to_exitcode(status), "seen": seen.decode("utf-8", "replace")}))
"#;
    let mut argv = vec![env!("CARGO_BIN_EXE_jianmu")];
    argv.extend(args);
    let out = jianmu_process::std_command("python3")
        .args(["-c", DRIVER, &serde_json::to_string(&argv).unwrap(), answer])
        .current_dir(dir)
        .env_remove("JIANMU_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        i32::try_from(got["code"].as_i64().unwrap()).unwrap(),
        got["seen"].as_str().unwrap().replace("\r\n", "\n"),
    )
}

const CALL: [&str; 5] = [
    "call",
    "--ask",
    "command:echo",
    "bash",
    r#"{"command": "echo hi"}"#,
];

#[test]
fn a_terminal_is_asked_and_its_answer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (code, seen) = on_a_terminal(&CALL, dir.path(), "y");
    assert_eq!(code, 0, "{seen}");
    assert!(
        seen.contains("jianmu: `bash` needs approval (ask `command:echo`):\n  echo hi\nAllow? [y] once, [s] for this session, [N] no: "),
        "{seen}"
    );
    assert!(seen.ends_with("y\nhi\n"), "{seen:?}");

    let (code, seen) = on_a_terminal(&CALL, dir.path(), "n");
    assert_eq!(code, 1, "{seen}");
    assert!(
        seen.contains(
            "Error: call to `bash` denied: the call was refused when asked (ask `command:echo`)"
        ),
        "{seen}"
    );
    assert!(!seen.contains("\nhi\n"), "{seen}");
}

#[test]
fn without_a_terminal_the_call_is_refused_and_the_flag_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = jianmu(&CALL, dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error: call to `bash` denied: it needs approval (ask `command:echo`) and there is no \
         terminal to ask on; run with --approve 'command:echo' to allow it\n"
    );
    assert!(out.stdout.is_empty());
    // The flag it names allows it; a command the rule does not match is never asked.
    let mut approved = CALL.to_vec();
    approved.extend(["--approve", "command:echo"]);
    let out = jianmu(&approved, dir.path());
    assert_eq!(
        (out.status.code(), &out.stdout[..]),
        (Some(0), &b"hi\n"[..])
    );
    let out = jianmu(
        &[
            "call",
            "--ask",
            "command:echo",
            "bash",
            r#"{"command": "printf ok"}"#,
        ],
        dir.path(),
    );
    assert_eq!(
        (out.status.code(), &out.stdout[..]),
        (Some(0), &b"ok\n"[..])
    );
    // A rule that cannot be used is a usage error, before any call.
    let out = jianmu(
        &["call", "--ask", "command-re:(", "calculator", r#""1""#],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("policy entry `command-re:(`: not a regular expression"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `jianmu checkpoint list|diff|restore` for the operator, over the checkpoint a call
/// took before it changed a file; a restore an `ask` rule asks about is refused
/// without a terminal, naming `--approve`, which `checkpoint restore` takes as `call`
/// does.
#[test]
fn the_operator_lists_diffs_and_restores_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let config = dir.path().join("jianmu.toml");
    let store = dir.path().join("store");
    std::fs::write(
        &config,
        format!("[checkpoints]\ndir = {:?}\n", store.display().to_string()),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = jianmu(&all, &ws);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Nothing changed yet: no store is made.
    let (code, _, err) = run(&["call", "read_file", r#"{"path": "a.txt"}"#]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!store.exists());
    let (code, _, err) = run(&[
        "call",
        "write_file",
        r#"{"path": "a.txt", "content": "two\n"}"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, list, err) = run(&["checkpoint", "list"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.contains("before write_file"), "{list}");
    let id = list.split_whitespace().next().unwrap().to_owned();
    let (code, diff, err) = run(&["checkpoint", "diff", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(diff.contains("-one") && diff.contains("+two"), "{diff}");
    let (code, out, err) = run(&["--ask", "filesystem:write", "checkpoint", "restore", &id]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("run with --approve 'filesystem:write' to allow it"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");
    let (code, out, err) = run(&[
        "--ask",
        "filesystem:write",
        "checkpoint",
        "restore",
        &id,
        "--approve",
        "filesystem:write",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("restored {id}")), "{out}");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
}
