//! rhai_repl and python_repl through the real call path: state, every limit, and
//! recovery after each failure.

use std::time::{Duration, Instant};

use jianmu_tool_core::ToolHandle;
use jianmu_tool_script::{PythonRepl, PythonSettings, RhaiRepl, RhaiSettings};
use serde_json::json;

use jianmu_test_support::call;

fn rhai(settings: RhaiSettings) -> ToolHandle {
    ToolHandle::new(RhaiRepl::new(settings)).unwrap()
}

/// Limits small enough for a debug build to hit them quickly.
fn small() -> RhaiSettings {
    RhaiSettings {
        max_operations: 200_000,
        ..RhaiSettings::default()
    }
}

#[tokio::test]
async fn rhai_keeps_state_and_captures_print() {
    let r = rhai(small());
    assert_eq!(call(&r, json!({"code": "let x = 40;"})).await, "");
    assert_eq!(call(&r, json!({"code": "x + 2"})).await, "42");
    assert_eq!(call(&r, json!({"code": "fn sq(n) { n * n }"})).await, "");
    assert_eq!(call(&r, json!({"code": "sq(7)"})).await, "49");
    assert_eq!(
        call(&r, json!({"code": r#"print("hi"); print("there");"#})).await,
        "hi\nthere\n"
    );
    assert_eq!(
        call(&r, json!({"code": r#"print("ignored"); 1 + 1"#})).await,
        "2"
    );
    assert_eq!(
        call(&r, json!({"code": "", "reset": true})).await,
        "(the scope was cleared)"
    );
    assert!(
        call(&r, json!({"code": "x"}))
            .await
            .starts_with("error: error: Variable not found: x")
    );
    assert!(
        call(&r, json!({"code": "sq(2)"}))
            .await
            .contains("Function not found")
    );
    let spec = r.spec();
    assert!(!spec.parallel_safe);
    assert_eq!(spec.effect_tags, ["code:exec"]);
}

#[tokio::test]
async fn rhai_limits_hold_and_the_next_call_works() {
    let r = rhai(small());
    let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
    let cases = [
        (
            "loop {}",
            "error: the code ran too many operations and was stopped (an endless loop?)",
        ),
        (
            "fn f(x) { f(x + 1) } f(0)",
            "error: function calls nest too deeply and were stopped (runaway recursion?)",
        ),
        (
            "let s = \"xx\"; loop { s += s; }",
            "error: error: Length of string too large (line 1, position 24)",
        ),
        (
            "let a = []; loop { a.push(1); }",
            "error: the code ran too many operations and was stopped (an endless loop?)",
        ),
        (
            "eval(\"1\")",
            "error: syntax error: reserved keyword 'eval' is disabled (line 1, position 1)",
        ),
        (
            "import \"hacks\" as h;",
            "error: error: Module not found: hacks (line 1, position 8)",
        ),
    ];
    for (code, expect) in cases {
        assert_eq!(call(&r, json!({"code": code})).await, expect, "{code}");
        assert_eq!(
            call(&r, json!({"code": "1 + 1"})).await,
            "2",
            "after {code}"
        );
    }
    let err = call(&r, json!({"code": deep})).await;
    assert!(
        err.starts_with("error: syntax error: Expression exceeds maximum complexity"),
        "{err}"
    );
    let big = rhai(RhaiSettings {
        max_array_size: 1000,
        ..small()
    });
    assert_eq!(
        call(
            &big,
            json!({"code": "let a = []; for i in 0..2000 { a.push(i); }"})
        )
        .await,
        "error: error: Size of array/BLOB too large (line 1, position 34)"
    );
}

#[tokio::test]
async fn rhai_wall_clock_limit_and_output_cap() {
    let r = rhai(RhaiSettings {
        max_operations: 0,
        timeout_secs: 0.3,
        ..RhaiSettings::default()
    });
    let start = Instant::now();
    assert_eq!(
        call(&r, json!({"code": "loop {}"})).await,
        "error: the code ran past the time limit of 0.3 s and was stopped"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(call(&r, json!({"code": "6 * 7"})).await, "42");
    // The output cap, with a time limit a loaded machine cannot hit.
    let r = rhai(RhaiSettings {
        max_operations: 0,
        ..RhaiSettings::default()
    });
    let out = call(
        &r,
        json!({"code": "for i in 0..5000 { print(`line ${i}`); }"}),
    )
    .await;
    assert!(
        out.ends_with(" more characters)"),
        "{}",
        &out[out.len().saturating_sub(80)..]
    );
    assert!(out.contains("\n... (output truncated: "));
    assert!(out.starts_with("line 0\nline 1\n"));
}

fn python(settings: PythonSettings) -> ToolHandle {
    ToolHandle::new(PythonRepl::new(settings, std::env::temp_dir()).unwrap()).unwrap()
}

#[tokio::test]
async fn python_keeps_state_prints_and_reports_exceptions() {
    let p = python(PythonSettings::default());
    assert_eq!(call(&p, json!({"code": "x = 40"})).await, "");
    assert_eq!(call(&p, json!({"code": "x + 2"})).await, "42");
    assert_eq!(call(&p, json!({"code": "print('hi')"})).await, "hi\n");
    assert_eq!(call(&p, json!({"code": "None"})).await, "");
    assert_eq!(
        call(
            &p,
            json!({"code": "import sys; print('out'); print('oops', file=sys.stderr)"})
        )
        .await,
        "out\n[stderr]\noops\n"
    );
    assert_eq!(
        call(&p, json!({"code": "1/0"})).await,
        "error:   File \"<repl>\", line 1, in <module>\nZeroDivisionError: division by zero"
    );
    let err = call(&p, json!({"code": "def f(:\n  pass"})).await;
    assert!(err.contains("SyntaxError"), "{err}");
    assert_eq!(
        call(&p, json!({"code": "input()"})).await,
        "error:   File \"<repl>\", line 1, in <module>\nEOFError: EOF when reading a line"
    );
    // State survived the errors.
    assert_eq!(call(&p, json!({"code": "x"})).await, "40");
}

#[tokio::test]
async fn python_output_is_capped_and_never_breaks_on_bytes() {
    let p = python(PythonSettings::default());
    let out = call(&p, json!({"code": "print('x' * 10**7)"})).await;
    assert!(out.starts_with(&"x".repeat(10_000)), "{}", out.len());
    assert!(
        out.ends_with("\n... (output truncated: 9990001 more characters)"),
        "{}",
        &out[10_000..]
    );
    let out = call(&p, json!({"code": "'y' * 20000"})).await;
    assert!(
        out.ends_with("\n... (output truncated: 10000 more characters)"),
        "{}",
        &out[10_000..]
    );
    assert_eq!(call(&p, json!({"code": "import sys"})).await, "");
    // What the code printed (bytes decoded safely), then an expression's value.
    assert_eq!(
        call(
            &p,
            json!({"code": "sys.stdout.buffer.write(b'\\xff\\xfeok')"})
        )
        .await,
        "\u{fffd}\u{fffd}ok\n4"
    );
    assert_eq!(
        call(
            &p,
            json!({"code": "_ = sys.stdout.buffer.write(b'\\xffok')"})
        )
        .await,
        "\u{fffd}ok"
    );
}

#[tokio::test]
async fn python_shows_the_last_expression_like_a_notebook() {
    let p = python(PythonSettings::default());
    for (code, expect) in [
        ("import os; type(os.getuid()).__name__", "int"),
        ("import math; math.sqrt(16)", "4.0"),
        ("print('a'); 1 + 1", "a\n2"),
        ("x = 5\nx * 2", "10"),
        // `None` shows nothing; pure statements answer what they printed.
        ("print('only')\nNone", "only\n"),
        ("for i in range(2): print(i)", "0\n1\n"),
        ("y = 1", ""),
    ] {
        assert_eq!(call(&p, json!({"code": code})).await, expect, "{code}");
    }
    // `reset` starts a fresh interpreter: every name is gone.
    assert_eq!(call(&p, json!({"code": "'y' in dir()"})).await, "True");
    assert_eq!(
        call(&p, json!({"code": "'y' in dir()", "reset": true})).await,
        "False"
    );
}

fn running_with(needle: &str) -> usize {
    jianmu_test_support::running_with(needle).len()
}

/// Starts `sleep {arg}` forked and in its own session, the way code escapes a process
/// group, and reports how many are running.
fn escapee(arg: &str) -> String {
    format!(
        "import os, subprocess\n\
         if os.fork() == 0:\n    os.setsid()\n    subprocess.Popen(['sleep', '{arg}'], start_new_session=True)\n    os._exit(0)\n\
         import time; time.sleep(0.3)"
    )
}

#[tokio::test]
async fn python_timeout_stops_everything_and_recovers() {
    let p = python(PythonSettings::default());
    assert_eq!(call(&p, json!({"code": "x = 1"})).await, "");
    let arg = format!("300.{}1", std::process::id());
    let code = format!(
        "{}\nprint('before', flush=False)\nimport sys; print('warned', file=sys.stderr)\nwhile True: pass",
        escapee(&arg)
    );
    let start = Instant::now();
    // As `bash` answers a time limit: with what the code printed until then.
    assert_eq!(
        call(&p, json!({"code": code, "timeout": 1.0})).await,
        "error: `python_repl` timed out after 1 s; everything it started was stopped. Its output until then:\nbefore\n[stderr]\nwarned\n"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        running_with(&format!("sleep {arg}")),
        0,
        "the forked child survived"
    );
    // The next call runs in a fresh interpreter, and its answer says so first.
    let err = call(&p, json!({"code": "x"})).await;
    assert!(
        err.starts_with("error: [the previous call ran past its time limit, so the interpreter was stopped: its variables and imports are lost, and this call ran in a fresh one]\n"),
        "{err}"
    );
    assert!(err.ends_with("NameError: name 'x' is not defined"), "{err}");
    assert_eq!(call(&p, json!({"code": "1 + 1"})).await, "2");
    // Nothing printed: said so.
    assert_eq!(
        call(&p, json!({"code": "while True: pass", "timeout": 0.5})).await,
        "error: `python_repl` timed out after 500 ms; everything it started was stopped; it printed nothing"
    );
}

#[tokio::test]
async fn an_interpreter_that_ended_is_replaced_and_the_answer_says_so() {
    let p = python(PythonSettings::default());
    assert_eq!(call(&p, json!({"code": "x = 1"})).await, "");
    // Code that leaves a thread which ends the interpreter after its call.
    let later = "import threading, os, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\ny = 2";
    assert_eq!(call(&p, json!({"code": later})).await, "");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        call(&p, json!({"code": "'again'"})).await,
        "[the interpreter had ended since the previous call (the code left something that stopped it): its variables and imports are lost, and this call ran in a fresh one]\nagain"
    );
    assert_eq!(call(&p, json!({"code": "'same'"})).await, "same");
}

#[tokio::test]
async fn python_processes_end_with_their_call() {
    let p = python(PythonSettings::default());
    let arg = format!("300.{}2", std::process::id());
    assert_eq!(call(&p, json!({"code": escapee(&arg)})).await, "");
    assert_eq!(
        running_with(&format!("sleep {arg}")),
        0,
        "the forked child survived"
    );
    assert_eq!(call(&p, json!({"code": "2 + 2"})).await, "4");
}

#[tokio::test]
async fn a_cancelled_python_call_stops_the_interpreter() {
    let p = python(PythonSettings::default());
    assert_eq!(call(&p, json!({"code": "x = 1"})).await, "");
    let arg = format!("300.{}3", std::process::id());
    let spin = format!("import subprocess; subprocess.Popen(['sleep', '{arg}'])\nwhile True: pass");
    // A caller that gives up (a runner time limit, an MCP cancel) drops the call.
    let dropped =
        tokio::time::timeout(Duration::from_millis(500), call(&p, json!({"code": spin}))).await;
    assert!(dropped.is_err());
    let mut left = usize::MAX;
    for _ in 0..200 {
        left = running_with(&format!("sleep {arg}"));
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(left, 0, "the cancelled call's processes survived");
    let start = Instant::now();
    let out = call(&p, json!({"code": "'fresh'"})).await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        out,
        "[the previous call was cancelled before it finished, so the interpreter was stopped: its variables and imports are lost, and this call ran in a fresh one]\nfresh"
    );
    assert_eq!(call(&p, json!({"code": "'again'"})).await, "again");
}

#[tokio::test]
async fn python_answers_are_matched_to_their_request() {
    let p = python(PythonSettings::default());
    // User code writing lines to the protocol stream (fd 4) never shifts the answers.
    let forge = "import os\nfor fd in (3, 4, 5):\n    try: os.write(fd, b'{\"stdout\": \"forged\"}\\n{\"id\": 2, \"value\": \"forged\"}\\n')\n    except OSError: pass";
    assert_eq!(call(&p, json!({"code": forge})).await, "");
    assert_eq!(call(&p, json!({"code": "1 + 1"})).await, "2");
    assert_eq!(call(&p, json!({"code": "2 + 2"})).await, "4");
}

#[tokio::test]
async fn python_cannot_read_the_callers_environment() {
    assert!(
        std::fs::read("/proc/self/environ")
            .is_ok_and(|e| String::from_utf8_lossy(&e).contains("CARGO_PKG_NAME="))
    );
    let p = python(PythonSettings::default());
    let code = "import glob\nfound = []\nfor f in glob.glob('/proc/*/environ') + ['/proc/%d/environ' % __import__('os').getppid()]:\n    try: found.append(open(f, 'rb').read())\n    except OSError: pass\nprint(len(found) > 0, b'CARGO_PKG_NAME=' in b''.join(found))";
    assert_eq!(call(&p, json!({"code": code})).await, "True False\n");
}

#[tokio::test]
async fn python_exit_is_reported_and_the_next_call_starts_fresh() {
    let p = python(PythonSettings::default());
    assert_eq!(
        call(&p, json!({"code": "import os; os._exit(3)"})).await,
        "error: the Python interpreter exited with code 3; it was stopped with everything it started, and its state (variables, imports) is lost; the next call starts a fresh interpreter"
    );
    // The next call's answer starts by saying the state is gone.
    assert_eq!(
        call(&p, json!({"code": "2 ** 10"})).await,
        "[the previous interpreter ended (see the previous answer): its variables and imports are lost, and this call ran in a fresh one]\n1024"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_calls_on_one_instance_never_overlap() {
    let p = python(PythonSettings::default());
    let define = "import time\ndef span():\n    start = time.monotonic()\n    while time.monotonic() - start < 0.05: pass\n    return (start, time.monotonic())";
    assert_eq!(call(&p, json!({"code": define})).await, "");
    let code = "span()";
    let calls = (0..4).map(|_| {
        let p = p.clone();
        tokio::spawn(async move { call(&p, json!({"code": code})).await })
    });
    let mut spans: Vec<(f64, f64)> = Vec::new();
    for c in calls {
        let text = c.await.unwrap();
        let nums: Vec<f64> = text
            .trim_matches(|c| c == '(' || c == ')')
            .split(", ")
            .map(|n| n.parse().unwrap_or_else(|_| panic!("{text}")))
            .collect();
        spans.push((nums[0], nums[1]));
    }
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "calls overlapped: {spans:?}");
    }
}

#[tokio::test]
async fn python_settings_modules_globals_and_a_missing_interpreter() {
    let mut globals = serde_json::Map::new();
    globals.insert("answer".into(), json!(42));
    let p = python(PythonSettings {
        allowed_modules: Some(vec!["math".into()]),
        globals,
        ..PythonSettings::default()
    });
    assert_eq!(call(&p, json!({"code": "answer"})).await, "42");
    assert_eq!(call(&p, json!({"code": "import math"})).await, "");
    assert_eq!(call(&p, json!({"code": "math.sqrt(16)"})).await, "4.0");
    let err = call(&p, json!({"code": "import os"})).await;
    assert!(
        err.ends_with("ImportError: import of 'os' is not allowed (allowed modules: math)"),
        "{err}"
    );
    let missing = python(PythonSettings {
        python: "/nonexistent/python3".into(),
        ..PythonSettings::default()
    });
    let err = call(&missing, json!({"code": "1"})).await;
    assert!(
        err.starts_with("error: cannot start the Python interpreter `/nonexistent/python3`: "),
        "{err}"
    );
}

#[tokio::test]
async fn named_python_sessions_keep_their_own_state_within_limits() {
    let p = python(PythonSettings {
        max_interpreters: 2,
        session_idle_secs: 1,
        ..PythonSettings::default()
    });
    assert_eq!(call(&p, json!({"code": "x = 'default'"})).await, "");
    assert_eq!(
        call(&p, json!({"code": "x = 'a'", "session": "a"})).await,
        ""
    );
    assert_eq!(
        call(&p, json!({"code": "x = 'b'", "session": "b"})).await,
        ""
    );
    assert_eq!(call(&p, json!({"code": "x", "session": "a"})).await, "a");
    assert_eq!(call(&p, json!({"code": "x", "session": "b"})).await, "b");
    assert_eq!(call(&p, json!({"code": "x"})).await, "default");
    // One more than the limit is refused, naming those to reuse.
    let full = call(&p, json!({"code": "1", "session": "c"})).await;
    assert!(
        full.contains("already 2 Python sessions") && full.contains("(a, b)"),
        "{full}"
    );
    let bad = call(&p, json!({"code": "1", "session": "../x"})).await;
    assert!(bad.starts_with("error:"), "{bad}");
    // `reset` with a name forgets that interpreter only.
    assert_eq!(
        call(
            &p,
            json!({"code": "'x' in dir()", "session": "a", "reset": true})
        )
        .await,
        "False"
    );
    assert_eq!(call(&p, json!({"code": "x", "session": "b"})).await, "b");
    // Idle ones are stopped without a call: the interpreter is gone (found by a
    // process name it gives itself).
    let name = format!("jmidle{}", std::process::id() % 100_000);
    let renamed = call(
        &p,
        json!({"code": format!("import ctypes; ctypes.CDLL(None).prctl(15, b'{name}', 0, 0, 0)"), "session": "b"}),
    )
    .await;
    assert_eq!(renamed, "0");
    let named = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .count()
    };
    assert_eq!(named(), 1);
    let gone = Instant::now() + Duration::from_secs(10);
    while named() > 0 && Instant::now() < gone {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(named(), 0, "an idle interpreter is stopped");
    assert_eq!(
        call(&p, json!({"code": "'x' in dir()", "session": "b"})).await,
        "False",
        "an idle session is forgotten"
    );
}

#[tokio::test]
async fn without_a_session_a_fresh_setting_keeps_nothing() {
    let p = python(PythonSettings {
        without_session: jianmu_tool_script::WithoutSession::Fresh,
        ..PythonSettings::default()
    });
    assert_eq!(call(&p, json!({"code": "x = 41"})).await, "");
    let lost = call(&p, json!({"code": "x + 1"})).await;
    assert!(lost.contains("NameError"), "{lost}");
    assert_eq!(
        call(&p, json!({"code": "x = 41", "session": "s"})).await,
        ""
    );
    assert_eq!(
        call(&p, json!({"code": "x + 1", "session": "s"})).await,
        "42"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rhai_values_nested_thousands_deep_neither_crash_nor_stay() {
    // Past what a 2 MiB thread stack survives (in a debug build) when Rhai checks or
    // drops it; each level checks the whole value, so a debug build needs its time.
    let r = rhai(RhaiSettings {
        timeout_secs: 600.0,
        ..RhaiSettings::default()
    });
    let deep = "let m = #{}; for i in 0..2500 { m = #{a: m}; } let kept = [1, [2]]; m";
    let answer = call(&r, json!({ "code": deep })).await;
    assert_eq!(
        answer,
        "(a value nested more than 500 levels deep)\n(not kept: m, nested more than 500 levels deep)"
    );
    assert_eq!(call(&r, json!({"code": "kept"})).await, "[1, [2]]");
    assert_eq!(call(&r, json!({"code": "m"})).await, "");
    // The tool (and everything it kept) is dropped on this runtime's threads.
    drop(r);
}

#[tokio::test]
async fn rhai_values_sharing_one_string_are_counted_whole() {
    let r = rhai(RhaiSettings::default());
    // 400 entries sharing one 1 MiB string: 1 MiB held, 400 MiB written out.
    let build =
        r#"let s = "x"; s.pad(1048576, "x"); let m = #{}; for k in 0..400 { m["k" + k] = s; }"#;
    let answer = call(&r, json!({"code": format!("{build} m")})).await;
    assert!(
        answer.contains("a value over 16 MiB written out"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    let printed = call(&r, json!({"code": format!("{build} print(m);")})).await;
    assert!(
        printed.contains("a value over 16 MiB written out"),
        "{}",
        &printed[..printed.len().min(300)]
    );
    let interpolated = call(&r, json!({"code": format!("{build} `${{m}}`")})).await;
    assert!(
        interpolated.contains("a value over 16 MiB written out"),
        "{}",
        &interpolated[..interpolated.len().min(300)]
    );
    // Small values still read as before.
    assert_eq!(
        call(&r, json!({"code": "#{a: [1, 2]}"})).await,
        "#{\"a\": [1, 2]}"
    );
    assert_eq!(
        call(&r, json!({"code": "print([1, \"b\"]);"})).await,
        "[1, \"b\"]\n"
    );
}
