//! Jobs on a terminal (`tty: true`): a REPL driven by typing, `isatty` and the size,
//! Ctrl-C reaching the foreground program, a full-screen program's screen read back,
//! and nothing left after `bash_kill`.

use jianmu_tool_core::{ToolConfig, ToolSet};
use serde_json::{Value, json};

use crate::jobs::{data, run, tools};

fn set(dir: &std::path::Path) -> ToolSet {
    tools(&ToolConfig::new(dir))
}

/// Reads job `job`'s screen (typing `input` first) until it shows `needle`, or 30 s.
async fn screen_until(set: &ToolSet, job: u64, input: Option<&str>, needle: &str) -> Value {
    let mut args = json!({"job": job, "wait_ms": 100});
    if let Some(input) = input {
        args["input"] = json!(input);
    }
    let mut last = Value::Null;
    for _ in 0..300 {
        let out = run(set, "bash_output", args.clone()).await.unwrap();
        last = data(&out).clone();
        if last["output"].as_str().unwrap().contains(needle) {
            return last;
        }
        args = json!({"job": job, "wait_ms": 100});
    }
    panic!("never saw {needle:?} on the screen: {last}");
}

fn start(command: &str) -> Value {
    json!({"command": command, "background": true, "tty": true, "yield_ms": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_repl_is_driven_by_typing_and_ctrl_c_interrupts_it() {
    let dir = tempfile::tempdir().unwrap();
    let set = set(dir.path());
    let started = run(&set, "bash", start("python3 -i -q")).await.unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    let prompt = screen_until(&set, job, None, ">>>").await;
    // Waiting at its prompt, the REPL says so (it may need a moment to get there).
    let mut waiting = prompt["waiting_for_input"].clone();
    for _ in 0..50 {
        if waiting == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let out = run(&set, "bash_output", json!({"job": job})).await.unwrap();
        waiting = data(&out)["waiting_for_input"].clone();
    }
    assert_eq!(waiting, true, "{prompt}");

    let evaluated = screen_until(&set, job, Some("print(6 * 7)\n"), "\n42\n").await;
    assert!(
        evaluated["output"]
            .as_str()
            .unwrap()
            .contains(">>> print(6 * 7)\n42\n>>>"),
        "{evaluated}"
    );
    let busy = run(
        &set,
        "bash_output",
        json!({"job": job, "input": "import time; time.sleep(60)\n", "wait_ms": 300}),
    )
    .await
    .unwrap();
    assert_eq!(data(&busy)["waiting_for_input"], false, "{}", busy.text);
    let interrupted = screen_until(&set, job, Some("\u{3}"), "KeyboardInterrupt").await;
    assert_eq!(interrupted["running"], true);
    // Ctrl-D at the prompt ends the REPL.
    let out = run(
        &set,
        "bash_output",
        json!({"job": job, "input": "\u{4}", "wait_ms": 10_000}),
    )
    .await
    .unwrap();
    // (Python ends by SIGINT after a KeyboardInterrupt.)
    assert_eq!(data(&out)["running"], false, "{}", out.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_sees_a_terminal_of_the_size_asked_and_ctrl_c_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    sized_and_interrupted(&set(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_supervisor_alone_a_terminal_job_works_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        ToolConfig::new(dir.path()).with_settings("bash", json!({"isolation": {"mode": "off"}}));
    sized_and_interrupted(&tools(&config)).await;
}

async fn sized_and_interrupted(set: &ToolSet) {
    let mut args =
        start("test -t 0 && test -t 1 && test -t 2 && echo on-a-tty; stty size; exec sleep 60");
    args["rows"] = json!(30);
    args["cols"] = json!(100);
    let started = run(set, "bash", args).await.unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    let seen = screen_until(set, job, None, "30 100").await;
    let screen = seen["output"].as_str().unwrap();
    assert!(screen.starts_with("on-a-tty\n30 100"), "{screen}");
    assert!(screen.contains("[screen 30x100;"), "{screen}");
    // `sleep` has no handler of its own: the terminal's Ctrl-C still ends it.
    let out = run(
        set,
        "bash_output",
        json!({"job": job, "input": "\u{3}", "wait_ms": 10_000}),
    )
    .await
    .unwrap();
    assert_eq!(data(&out)["running"], false, "{}", out.text);
    assert_eq!(data(&out)["exit_code"], 130, "{}", out.text);

    // Without `background`, a terminal is refused with what to do.
    let e = run(set, "bash", json!({"command": "true", "tty": true}))
        .await
        .unwrap_err();
    assert!(e.contains("go with `background: true`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_screen_program_is_read_as_its_screen_and_killing_it_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let set = set(dir.path());
    let marker = format!("jm-tty-{}", std::process::id());
    let program = "import curses, time\n\
        def main(w):\n    w.addstr(10, 20, 'IN THE MIDDLE')\n    w.addstr(0, 0, 'top left')\n    w.refresh()\n    time.sleep(60)\n\
        curses.wrapper(main)\n";
    std::fs::write(dir.path().join("tui.py"), program).unwrap();
    let started = run(
        &set,
        "bash",
        start(&format!(
            "(exec -a {marker} sleep 60) & exec python3 tui.py"
        )),
    )
    .await
    .unwrap();
    let job = data(&started)["job"].as_u64().unwrap();
    let seen = screen_until(&set, job, None, "IN THE MIDDLE").await;
    let screen = seen["output"].as_str().unwrap();
    let rows: Vec<&str> = screen.lines().collect();
    assert_eq!(rows[0], "top left", "{screen}");
    assert_eq!(
        rows[10],
        format!("{}IN THE MIDDLE", " ".repeat(20)),
        "{screen}"
    );
    // The raw stream, asked for by the tool's settings unless a call says otherwise,
    // has the escape sequences the screen is drawn with.
    let config = ToolConfig::new(dir.path()).with_settings("bash_output", json!({"raw": true}));
    let raw_by_default = tools(&config);
    let started = run(
        &raw_by_default,
        "bash",
        start(r"sleep 0.5; printf 'a\033[2Jb'; sleep 60"),
    )
    .await
    .unwrap();
    let other = data(&started)["job"].as_u64().unwrap();
    let mut stream = String::new();
    for _ in 0..100 {
        let out = run(
            &raw_by_default,
            "bash_output",
            json!({"job": other, "wait_ms": 50}),
        )
        .await
        .unwrap();
        stream.push_str(data(&out)["output"].as_str().unwrap());
        if stream.contains('b') {
            break;
        }
    }
    assert_eq!(stream, "a\u{1b}[2Jb");
    let screen = run(
        &raw_by_default,
        "bash_output",
        json!({"job": other, "raw": false}),
    )
    .await
    .unwrap();
    let screen = data(&screen)["output"].as_str().unwrap().to_owned();
    assert!(screen.starts_with(" b\n[screen 24x80"), "{screen:?}");
    assert!(!jianmu_test_support::running_with(&marker).is_empty());
    let killed = run(&set, "bash_kill", json!({"job": job})).await.unwrap();
    assert_eq!(data(&killed)["running"], false);
    assert!(jianmu_test_support::running_with(&marker).is_empty());
}
