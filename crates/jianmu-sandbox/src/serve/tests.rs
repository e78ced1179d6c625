//! `serve`, the server loop inside a sandbox container, over an in-memory pipe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jianmu_tool_core::{
    FunctionTool, Progress, ToolConfig, ToolError, ToolHandle, ToolOutput, ToolSet, ToolSpec,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::wire::{Reply, Request, on_host, to_line};
use jianmu_test_support::probes as tools;

struct Host {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    input: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl Host {
    async fn send(&mut self, request: Request) {
        self.input.write_all(&to_line(&request)).await.unwrap();
    }
    async fn reply(&mut self) -> Reply {
        let line = self.lines.next_line().await.unwrap().expect("a reply");
        serde_json::from_str(&line).unwrap()
    }
}

fn start(
    make: impl FnOnce(ToolConfig) -> Result<ToolSet, ToolError> + Send + 'static,
) -> (Host, tokio::task::JoinHandle<std::io::Result<()>>) {
    let (host, runner) = tokio::io::duplex(64 * 1024);
    let (rd, wr) = tokio::io::split(runner);
    let server = tokio::spawn(super::serve(rd, wr, make));
    let (rd, input) = tokio::io::split(host);
    let lines = BufReader::new(rd).lines();
    (Host { lines, input }, server)
}

#[tokio::test]
async fn calls_run_concurrently_cancel_drops_the_work_and_unknown_tools_are_named() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let (mut host, server) = start(move |config| {
        assert_eq!(config.workspace(), std::path::Path::new("/w"));
        assert_eq!(config.raw_settings("echo"), Some(&json!({"loud": true})));
        let mut set = tools();
        let flag = Arc::clone(&flag);
        let hang = FunctionTool::new(ToolSpec::new("hang", "Hangs."), move |_| {
            let guard = SetOnDrop(Arc::clone(&flag));
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok("never".into())
            }
        });
        set.insert(ToolHandle::new(hang).unwrap());
        set.insert(ToolHandle::new(WhoAmI).unwrap());
        Ok(set)
    });
    host.send(Request::Init {
        config: ToolConfig::new("/w").with_settings("echo", json!({"loud": true})),
        warm: false,
        egress: None,
    })
    .await;
    let Reply::Ready { version } = host.reply().await else {
        panic!("not ready")
    };
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    // Call 1 never ends; call 2 still answers.
    host.send(Request::Call {
        id: 1,
        tool: "hang".into(),
        args: json!(""),
        call_id: String::new(),
        context: None,
        progress: false,
    })
    .await;
    host.send(Request::Call {
        id: 2,
        tool: "echo".into(),
        args: json!("hi"),
        call_id: String::new(),
        context: None,
        progress: false,
    })
    .await;
    assert_eq!(
        host.reply().await,
        Reply::Done {
            id: 2,
            result: Ok(ToolOutput::text("hi")),
            oom_kills: 0
        }
    );
    host.send(Request::Cancel { id: 1 }).await;
    let Reply::Done {
        id: 1,
        result: Err(e),
        ..
    } = host.reply().await
    else {
        panic!("no answer to the cancel")
    };
    assert_eq!(e.to_string(), "call to `hang` was cancelled");
    // The task is aborted: its future (and what it holds) is dropped.
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(dropped.load(Ordering::SeqCst));
    host.send(Request::Call {
        id: 3,
        tool: "nope".into(),
        args: json!({}),
        call_id: String::new(),
        context: None,
        progress: false,
    })
    .await;
    let Reply::Done {
        id: 3,
        result: Err(e),
        ..
    } = host.reply().await
    else {
        panic!("no answer")
    };
    let err = on_host(Err(e)).unwrap_err().to_string();
    assert!(
        err.contains("not available inside the sandbox image"),
        "{err}"
    );
    host.send(Request::Call {
        id: 4,
        tool: "fail".into(),
        args: json!(""),
        call_id: String::new(),
        context: None,
        progress: false,
    })
    .await;
    let Reply::Done { id: 4, result, .. } = host.reply().await else {
        panic!("no answer")
    };
    assert_eq!(on_host(result).unwrap_err().to_string(), "no luck");
    // End of input ends the server.
    host.input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

/// Answers the id of the call it runs in.
struct WhoAmI;

impl jianmu_tool_core::Tool for WhoAmI {
    type Args = Value;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "whoami";
    const DESCRIPTION: &'static str =
        "Says its call id and event context, and reports progress once.";
    async fn call(
        &self,
        _: Value,
        cx: &jianmu_tool_core::CallContext,
    ) -> Result<String, ToolError> {
        cx.report_progress(&Progress::new(Duration::from_secs(1), 5, 1));
        Ok(format!("{} {:?}", cx.call_id(), cx.event_context()))
    }
}

#[tokio::test]
async fn calls_keep_the_host_call_id_and_are_not_validated_again() {
    let (mut host, server) = start(|_| {
        let mut set = tools();
        set.insert(ToolHandle::new(WhoAmI).unwrap());
        Ok(set)
    });
    host.send(Request::Init {
        config: ToolConfig::new("/w"),
        warm: false,
        egress: None,
    })
    .await;
    assert!(matches!(host.reply().await, Reply::Ready { .. }));
    host.send(Request::Call {
        id: 1,
        tool: "whoami".into(),
        args: json!({}),
        call_id: "mcp-42".into(),
        context: Some(json!({"turn": 2})),
        progress: false,
    })
    .await;
    let Reply::Done { id: 1, result, .. } = host.reply().await else {
        panic!("no answer")
    };
    assert_eq!(
        on_host(result).unwrap().text,
        r#"mcp-42 Some(Object {"turn": Number(2)})"#
    );
    // A call that asks for progress gets the tool's reports before its answer.
    host.send(Request::Call {
        id: 3,
        tool: "whoami".into(),
        args: json!({}),
        call_id: "c3".into(),
        context: None,
        progress: true,
    })
    .await;
    assert_eq!(
        host.reply().await,
        Reply::Progress {
            id: 3,
            progress: Progress::new(Duration::from_secs(1), 5, 1)
        }
    );
    assert!(matches!(host.reply().await, Reply::Done { id: 3, .. }));
    // `echo` takes a string; the host would have refused 42. Its runner trusts the
    // host and runs the tool as asked (the tool sees no string).
    host.send(Request::Call {
        id: 2,
        tool: "echo".into(),
        args: json!(42),
        call_id: "c2".into(),
        context: None,
        progress: false,
    })
    .await;
    let Reply::Done { id: 2, result, .. } = host.reply().await else {
        panic!("no answer")
    };
    assert_eq!(on_host(result).unwrap().text, "");
    host.input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A tool that blocks its thread cannot be dropped mid-way: the cancel is
/// confirmed only when it is really gone, which is what the host waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_confirmed_only_once_the_work_is_gone() {
    let finished = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&finished);
    let begun = Arc::clone(&started);
    let (mut host, server) = start(move |_| {
        let flag = Arc::clone(&flag);
        let stuck = FunctionTool::new(ToolSpec::new("stuck", "Blocks."), move |_| {
            let flag = Arc::clone(&flag);
            let begun = Arc::clone(&begun);
            async move {
                begun.store(true, Ordering::SeqCst);
                // Blocks the worker without yielding, like a runaway sync loop.
                std::thread::sleep(Duration::from_secs(1));
                flag.store(true, Ordering::SeqCst);
                Ok("done".into())
            }
        });
        Ok(ToolSet::from_tools([ToolHandle::new(stuck).unwrap()]))
    });
    host.send(Request::Init {
        config: ToolConfig::new("/w"),
        warm: false,
        egress: None,
    })
    .await;
    assert!(matches!(host.reply().await, Reply::Ready { .. }));
    host.send(Request::Call {
        id: 7,
        tool: "stuck".into(),
        args: json!(""),
        call_id: String::new(),
        context: None,
        progress: false,
    })
    .await;
    while !started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    host.send(Request::Cancel { id: 7 }).await;
    let Reply::Done {
        id: 7,
        result: Err(e),
        ..
    } = host.reply().await
    else {
        panic!("no confirmation")
    };
    assert!(matches!(e, ToolError::Cancelled { .. }), "{e}");
    assert!(
        finished.load(Ordering::SeqCst),
        "confirmed before the work ended"
    );
    host.input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn tools_that_cannot_be_built_are_reported_and_end_the_runner() {
    let (mut host, server) = start(|_| Err(ToolError::failed("bad settings")));
    host.send(Request::Init {
        config: ToolConfig::new("/w"),
        warm: false,
        egress: None,
    })
    .await;
    assert_eq!(
        host.reply().await,
        Reply::InitFailed {
            message: "bad settings".into()
        }
    );
    assert!(server.await.unwrap().is_err());
}

#[test]
fn errors_keep_their_kind_across_the_wire() {
    let timeout = ToolError::Timeout {
        tool: "bash".into(),
        after: Duration::from_millis(1500),
        partial: Some("so far".into()),
    };
    let back: ToolError = serde_json::from_value(serde_json::to_value(&timeout).unwrap()).unwrap();
    assert!(
        matches!(back, ToolError::Timeout { ref tool, after, ref partial } if tool == "bash" && after == Duration::from_millis(1500) && partial.as_deref() == Some("so far"))
    );
    let runner = ToolError::runner("t", "disk gone");
    let back: ToolError = serde_json::from_value(serde_json::to_value(&runner).unwrap()).unwrap();
    assert_eq!(
        jianmu_tool_core::error_chain(&back),
        jianmu_tool_core::error_chain(&runner)
    );
}
