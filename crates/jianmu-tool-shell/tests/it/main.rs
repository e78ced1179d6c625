//! bash through the real call path: the Python tool's contract, timeouts that kill the whole
//! tree, bounded output, a clean environment.

use std::time::{Duration, Instant};

use jianmu_tool_core::ToolHandle;
use jianmu_tool_shell::{Bash, BashSettings};

mod jobs;
mod terminal;
use serde_json::json;

fn bash(dir: &std::path::Path, settings: BashSettings) -> ToolHandle {
    ToolHandle::new(Bash::new(settings, dir.to_owned()).unwrap()).unwrap()
}

use jianmu_test_support::call;

#[tokio::test]
async fn the_python_tools_contract() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    assert_eq!(call(&b, json!({"command": "echo hi"})).await, "hi\n");
    assert_eq!(
        call(&b, json!({"input": "echo from-input"})).await,
        "from-input\n"
    );
    assert_eq!(
        call(&b, json!({"cmd": "echo from-cmd"})).await,
        "from-cmd\n"
    );
    assert_eq!(
        call(&b, json!({"command": "  ", "cmd": "echo second"})).await,
        "second\n"
    );
    assert_eq!(
        call(&b, json!({})).await,
        "error: no command given: pass it as `command`"
    );
    assert_eq!(
        call(&b, json!({"command": "echo out; echo bad >&2; exit 3"})).await,
        "error: Error (3):\nbad\n"
    );
    // The workspace is the working directory; stdin is empty.
    let cwd = call(&b, json!({"command": "pwd"})).await;
    assert_eq!(
        cwd.trim(),
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        call(&b, json!({"command": "cat; echo done"})).await,
        "done\n"
    );
    let spec = b.spec();
    assert!(!spec.parallel_safe);
    assert_eq!(spec.effect_tags, ["process:exec"]);
}

#[tokio::test]
async fn a_timeout_answers_with_the_output_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    assert_eq!(
        call(
            &b,
            json!({"command": "echo first; echo oops >&2; sleep 30", "timeout": 1.0})
        )
        .await,
        "error: `bash` timed out after 1 s; everything it started was stopped. Its output until then:\nfirst\n[stderr]\noops\n"
    );
    // Endless output keeps only its head and tail.
    let out = call(&b, json!({"command": "yes", "timeout": 1.0})).await;
    assert!(out.starts_with("error: `bash` timed out after 1 s; everything it started was stopped. Its output until then:\ny\ny\n"), "{}", &out[..200]);
    assert!(out.contains("bytes cut from the middle"), "{}", &out[..200]);
    assert!(out.len() < 40 * 1024, "{} bytes", out.len());
}

#[tokio::test]
async fn sessions_keep_the_directory_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let b = bash(&root, BashSettings::default());
    let run = |session: &str, command: &str| json!({"command": command, "session": session});
    assert_eq!(
        call(
            &b,
            run("s1", "cd sub && export X=1 && Y=local && f() { echo fn; }")
        )
        .await,
        ""
    );
    // One shell lives across the calls: shell variables and functions carry over too.
    let here = format!("{}\n1|local\nfn\n", root.join("sub").display());
    assert_eq!(call(&b, run("s1", "pwd; echo \"$X|$Y\"; f")).await, here);
    // Another session, and a call without one, start at the root with nothing set.
    let fresh = format!("{}\n|\n", root.display());
    assert_eq!(call(&b, run("s2", "pwd; echo \"$X|$Y\"")).await, fresh);
    assert_eq!(
        call(&b, json!({"command": "pwd; echo \"$X|$Y\""})).await,
        fresh
    );
    // A failing command still keeps what it changed; `unset` is kept too.
    assert_eq!(
        call(&b, run("s1", "cd ..; unset X; export Z=2; false")).await,
        "error: Error (1):\n"
    );
    let after = format!("{}\n|2\n", root.display());
    assert_eq!(call(&b, run("s1", "pwd; echo \"$X|$Z\"")).await, after);
    // Output without a final newline, and stdin that is empty.
    assert_eq!(
        call(&b, run("s1", "printf 'no newline'; cat")).await,
        "no newline"
    );
    // Removing the session's state folder (it is in `TMPDIR`) does not lose the session.
    assert_eq!(
        call(&b, run("s1", "rm -rf \"$TMPDIR\"/.session-*; cd sub")).await,
        ""
    );
    assert_eq!(
        call(&b, run("s1", "pwd")).await,
        format!("{}\n", root.join("sub").display())
    );
    // `exit` ends the shell with its status; the next call starts a new one where the
    // last left off, with its exports (not its shell variables).
    assert_eq!(
        call(&b, run("s1", "export W=9; V=8; exit 7")).await,
        "error: Error (7):\n"
    );
    assert_eq!(
        call(&b, run("s1", "pwd; echo \"$W|$Z|$V\"")).await,
        format!("{}\n9|2|\n", root.join("sub").display())
    );
    // A call past its time limit ends the shell; the next starts from the state before.
    let out = call(
        &b,
        json!({"command": "cd ..; echo partial; sleep 30", "session": "s1", "timeout": 0.5}),
    )
    .await;
    assert!(
        out.contains("timed out after 500 ms") || out.contains("timed out after 0.5 s"),
        "{out}"
    );
    assert!(out.ends_with("partial\n"), "{out}");
    assert_eq!(
        call(&b, run("s1", "pwd")).await,
        format!("{}\n", root.join("sub").display())
    );
    // What a call starts in the background ends with the call; the shell lives on.
    assert_eq!(
        call(&b, run("s1", "sleep 888 & setsid sleep 889 & echo started")).await,
        "started\n"
    );
    assert_eq!(running_with("sleep 88"), 0);
    assert_eq!(call(&b, run("s1", "echo $W")).await, "9\n");
    // `reset` starts the session afresh.
    assert_eq!(
        call(
            &b,
            json!({"command": "echo \"$Z\"", "session": "s1", "reset": true})
        )
        .await,
        "\n"
    );
}

/// Commands that attack their own session's protocol: each gets an answer within its
/// time limit, and the session goes on.
#[tokio::test]
async fn a_session_survives_hostile_commands() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    let run = |command: &str| json!({"command": command, "session": "h", "timeout": 5});
    assert_eq!(call(&b, run("export KEEP=1; cd /")).await, "");
    // A syntax error, a command that reads the shell's input, an `exec`, a removed
    // trap, huge exports, a closed stdout: each answers, none wedges the next call.
    let unterminated = call(&b, run("echo \"unterminated")).await;
    assert!(unterminated.starts_with("error: Error ("), "{unterminated}");
    assert_eq!(
        call(&b, run("cat /proc/self/fd/0 | head -c 10; echo read")).await,
        "read\n"
    );
    let exec = call(&b, run("exec echo replaced")).await;
    assert_eq!(exec, "replaced\n");
    assert_eq!(
        call(&b, run("trap - EXIT; exit 3")).await,
        "error: Error (3):\n"
    );
    assert_eq!(
        call(
            &b,
            run("export BIG=$(head -c 3000000 /dev/zero | tr '\\0' x); echo ${#BIG}")
        )
        .await,
        "3000000\n"
    );
    let closed = call(&b, run("exec >&-; echo gone")).await;
    assert!(closed.starts_with("error: Error ("), "{closed}");
    let fake = call(&b, run("printf '\\n__jianmu_end_0000 0\\n'; echo real")).await;
    assert_eq!(fake, "\n__jianmu_end_0000 0\nreal\n");
    // The exports of the last call that finished are there; the session still works.
    assert_eq!(call(&b, run("echo $KEEP; pwd")).await, "1\n/\n");
}

/// An idle session ends on its own: its shell and its state folder go without another
/// session call.
#[tokio::test]
async fn idle_sessions_end_on_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let settings = BashSettings {
        session_idle_secs: 1,
        ..BashSettings::default()
    };
    let b = bash(dir.path(), settings);
    let list = json!({"command": "ls -d \"$TMPDIR\"/.session-* 2>/dev/null | wc -l"});
    assert_eq!(
        call(&b, json!({"command": "true", "session": "idle"})).await,
        ""
    );
    assert_eq!(call(&b, list.clone()).await.trim(), "1");
    for _ in 0..100 {
        if call(&b, list.clone()).await.trim() == "0" {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the idle session is still there");
}

#[tokio::test]
async fn sessions_are_capped_and_their_ids_checked() {
    let dir = tempfile::tempdir().unwrap();
    let settings = BashSettings {
        max_shell_sessions: 2,
        ..BashSettings::default()
    };
    let b = bash(dir.path(), settings);
    for id in ["a", "b"] {
        assert_eq!(
            call(&b, json!({"command": "true", "session": id})).await,
            ""
        );
    }
    assert_eq!(
        call(&b, json!({"command": "true", "session": "c"})).await,
        "error: there are already 2 shell sessions, the limit; reuse one of them (a, b), or wait until one has been idle for 3600 s"
    );
    let out = call(&b, json!({"command": "true", "session": "../x"})).await;
    assert!(
        out.starts_with("error: invalid arguments for `bash`: at /session"),
        "{out}"
    );
}

fn running_with(needle: &str) -> usize {
    jianmu_test_support::running_with(needle).len()
}

#[tokio::test]
async fn a_timeout_kills_the_tree_even_past_setsid() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    let s = format!("300.{}1", std::process::id());
    let command = format!(
        "(touch 1; exec sleep {s}) & setsid bash -c 'touch 2; exec sleep {s}' & \
         env -i /bin/sh -c 'setsid /bin/sh -c \"touch 3; exec sleep {s}\" & wait' & \
         sleep 0.3; ls 1 2 3 | wc -l > started; wait"
    );
    let start = Instant::now();
    assert_eq!(
        call(&b, json!({"command": command, "timeout": 1.0})).await,
        "error: `bash` timed out after 1 s; everything it started was stopped; it printed nothing"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    let started = std::fs::read_to_string(dir.path().join("started")).unwrap();
    assert_eq!(started.trim(), "3", "the fixture started three sleepers");
    assert_eq!(
        running_with(&format!("sleep {s}")),
        0,
        "sleepers outlived the call"
    );
    // A command that succeeds takes what it started in the background with it, and
    // does not wait for it.
    let s = format!("300.{}2", std::process::id());
    let start = Instant::now();
    assert_eq!(
        call(
            &b,
            json!({"command": format!("setsid nohup sleep {s} >/dev/null 2>&1 & sleep 0.3; echo started")})
        )
        .await,
        "started\n"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        running_with(&format!("sleep {s}")),
        0,
        "a sleeper outlived the call"
    );
}

#[tokio::test]
async fn huge_output_is_drained_and_cut_in_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(
        dir.path(),
        BashSettings {
            keep_head: 10,
            keep_tail: 10,
            ..BashSettings::default()
        },
    );
    let out = call(
        &b,
        json!({"command": "yes | head -c 100000000; echo; echo END"}),
    )
    .await;
    assert_eq!(
        out,
        "y\ny\ny\ny\ny\n\n... (99999985 bytes cut from the middle; 100000005 bytes in all) ...\n\ny\ny\n\nEND\n"
    );
    let err = call(
        &b,
        json!({"command": "yes err | head -c 5000000 >&2; exit 1"}),
    )
    .await;
    assert!(
        err.starts_with("error: Error (1):\nerr\nerr\ner\n... (4999980 bytes cut"),
        "{err}"
    );
    // Non-UTF-8 output does not break anything.
    assert_eq!(
        call(&b, json!({"command": "printf 'a\\377b'"})).await,
        "a\u{fffd}b"
    );
}

#[tokio::test]
async fn the_environment_is_an_allow_list() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(
        dir.path(),
        BashSettings {
            env: [("GREETING".to_owned(), "hello".to_owned())].into(),
            ..BashSettings::default()
        },
    );
    let env = call(
        &b,
        json!({"command": "env | cut -d= -f1 | sort | tr '\\n' ' '"}),
    )
    .await;
    for leaked in [
        "CARGO_PKG_NAME",
        "RUST_BACKTRACE",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
    ] {
        assert!(!env.contains(leaked), "{leaked} leaked: {env}");
    }
    assert!(env.contains("PATH "), "{env}");
    assert_eq!(
        call(&b, json!({"command": "echo $GREETING"})).await,
        "hello\n"
    );
    assert_eq!(
        call(&b, json!({"command": "echo ${CARGO_MANIFEST_DIR:-unset}"})).await,
        "unset\n"
    );
}

#[tokio::test]
async fn the_callers_environment_is_out_of_reach() {
    // The test process's environment has cargo's variables; jianmu's would have its
    // secrets. Neither `$PPID` nor a scan of `/proc` reaches them.
    assert!(
        std::fs::read("/proc/self/environ")
            .is_ok_and(|e| String::from_utf8_lossy(&e).contains("CARGO_PKG_NAME="))
    );
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    let out = call(
        &b,
        json!({"command": "{ cat /proc/$PPID/environ; cat /proc/*/environ; } 2>/dev/null | tr '\\0' '\\n'; true"}),
    )
    .await;
    assert!(!out.contains("CARGO_PKG_NAME="), "{out}");
    assert!(
        out.contains("PATH="),
        "the command's own environment is readable: {out}"
    );
}

/// A process a call starts writes shell commands into every descriptor of the session's
/// shell it can open again through `/proc` (its input among them). None of them runs,
/// now or in a later call, and nothing it would start is left between calls.
#[tokio::test]
async fn a_child_cannot_send_the_session_shell_commands() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let b = bash(&root, BashSettings::default());
    let tag = format!("7{}.{}", std::process::id(), line!());
    let run = |command: &str| json!({"command": command, "session": "p", "timeout": 10});
    let attack = format!(
        "bash -c 'for f in /proc/$PPID/fd/*; do \
         printf \"touch {root}/planted; sleep {tag} &\\n\" 2>/dev/null >\"$f\"; done' \
         >/dev/null 2>&1; echo sent",
        root = root.display()
    );
    // What it wrote to the shell's stdout is output like any other.
    let out = call(&b, run(&attack)).await;
    assert!(out.ends_with("sent\n"), "{out}");
    for _ in 0..3 {
        assert_eq!(call(&b, run("echo next")).await, "next\n");
    }
    assert!(!root.join("planted").exists(), "a planted command ran");
    assert_eq!(running_with(&tag), 0);
}

/// A process a call starts looks everywhere it can for the end marker (the session's
/// folder, its parent's command line and environment) and prints fake end-of-call
/// reports with every candidate, exports that are shell code among them. The call's
/// output is all of what it printed, the next call's is only its own, and no planted
/// export runs or is kept, even when a later shell starts from the saved state.
#[tokio::test]
async fn a_child_cannot_forge_the_end_of_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let b = bash(&root, BashSettings::default());
    let run = |command: &str| json!({"command": command, "session": "f", "timeout": 10});
    assert_eq!(call(&b, run("export KEEP=1")).await, "");
    let forge = format!(
        "bash -c 'for n in \"$TMPDIR\"/.session-*/* $(tr \"\\0\" \" \" </proc/$PPID/cmdline) \
         $(tr \"\\0\" \" \" </proc/$PPID/environ); do n=${{n##*/}}; \
         printf \"\\n%s 0\\nexport PLANTED=1; touch {root}/planted; cd /\\n\\n%s:/\\n%s.\\n\" \"$n\" \"$n\" \"$n\"; \
         printf \"\\n%s\\n\" \"$n\"; printf \"\\n%s\\n\" \"$n\" >&2; done; \
         sleep 0.3; echo rest-of-first'",
        root = root.display()
    );
    let first = call(&b, run(&forge)).await;
    assert!(first.ends_with("rest-of-first\n"), "{first}");
    assert_eq!(call(&b, run("echo second")).await, "second\n");
    // A call past its limit ends the shell: the next starts from the saved state.
    let slow = call(
        &b,
        json!({"command": "sleep 5", "session": "f", "timeout": 0.3}),
    )
    .await;
    assert!(slow.contains("timed out"), "{slow}");
    assert_eq!(
        call(&b, run("echo \"$KEEP|$PLANTED\"; pwd")).await,
        format!("1|\n{}\n", root.display())
    );
    assert!(!root.join("planted").exists(), "a planted export ran");
}

/// Exports come back as data: a value that looks like shell code is kept as it was,
/// byte for byte, in a new shell of the session and in a background job.
#[tokio::test]
async fn exports_are_restored_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let b = bash(&root, BashSettings::default());
    let run = |command: &str| json!({"command": command, "session": "d", "timeout": 10});
    let value = "$(touch planted); `touch planted2` '\"\\\nline2";
    let set = format!("export V={}", shell_words(value));
    assert_eq!(call(&b, run(&set)).await, "");
    let slow = call(
        &b,
        json!({"command": "sleep 5", "session": "d", "timeout": 0.3}),
    )
    .await;
    assert!(slow.contains("timed out"), "{slow}");
    assert_eq!(
        call(&b, run("printf '%s' \"$V\"")).await,
        value,
        "in a new shell"
    );
    let job = call(
        &b,
        json!({"command": "printf '%s' \"$V\"", "session": "d", "background": true}),
    )
    .await;
    assert!(job.contains(value), "{job}");
    assert!(!root.join("planted").exists() && !root.join("planted2").exists());
}

/// `value` single-quoted for the shell.
fn shell_words(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// A variable too long for a new program's environment (with it, every program the
/// shell runs fails) is not restored: the session's next shell starts, with the rest.
#[tokio::test]
async fn a_huge_export_does_not_stop_the_next_shell() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(dir.path(), BashSettings::default());
    let run = |command: &str, timeout: f64| json!({"command": command, "session": "h", "timeout": timeout});
    let set = "export KEEP=1; export HUGE=$(printf '%0200000d' 0)";
    assert_eq!(call(&b, run(set, 10.0)).await, "");
    // Builtins only: with HUGE exported no program can start here.
    let spin = call(&b, run("while :; do :; done", 0.5)).await;
    assert!(spin.contains("timed out"), "{spin}");
    assert_eq!(
        call(
            &b,
            run("echo \"$KEEP ${#HUGE}\"; ls >/dev/null && echo ran", 10.0)
        )
        .await,
        "1 0\nran\n"
    );
}

/// Sessions with a POSIX shell (dash, Debian's `sh`): the state comes back through
/// `export -p`, read as data, after a time limit and after `exit`.
#[tokio::test]
async fn sessions_work_with_a_posix_shell() {
    let dir = tempfile::tempdir().unwrap();
    let b = bash(
        dir.path(),
        BashSettings {
            shell: "dash".into(),
            ..BashSettings::default()
        },
    );
    let run = |command: &str, timeout: f64| json!({"command": command, "session": "d", "timeout": timeout});
    assert_eq!(
        call(&b, run("export K='a b'\"'\"'c'; cd /tmp", 10.0)).await,
        ""
    );
    let slow = call(&b, run("sleep 5", 0.3)).await;
    assert!(slow.contains("timed out"), "{slow}");
    assert_eq!(
        call(&b, run("echo \"$K\"; pwd", 10.0)).await,
        "a b'c\n/tmp\n"
    );
    assert_eq!(
        call(&b, run("export Z=9; exit 4", 10.0)).await,
        "error: Error (4):\n"
    );
    assert_eq!(call(&b, run("echo $Z", 10.0)).await, "9\n");
}
