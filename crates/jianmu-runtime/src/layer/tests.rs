//! What the layer tests share: probe tools, an event recorder, and the proof that the
//! layers compose in any order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jianmu_tool_core::{
    EventBus, FunctionTool, InProcess, Policy, Runner, ToolHandle, ToolSet, ToolSpec,
};
use serde_json::json;

use super::RunnerExt;

pub(crate) use jianmu_test_support::probes;

/// A `slow` tool that counts how often its work was dropped before finishing.
pub(crate) fn slow_calls() -> (ToolSet, Arc<AtomicU64>) {
    struct CountDrop(Arc<AtomicU64>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicU64::new(0));
    let counter = dropped.clone();
    let slow = FunctionTool::new(ToolSpec::new("slow", "Sleeps."), move |_| {
        let guard = CountDrop(counter.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            std::mem::forget(guard);
            Ok("woke".into())
        }
    });
    (
        ToolSet::from_tools([ToolHandle::new(slow).unwrap()]),
        dropped,
    )
}

/// Every event on `bus`, one line each: kind, tool, call id, context, error.
pub(crate) fn recorder(bus: &EventBus) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    bus.subscribe(move |e| {
        sink.lock().unwrap().push(format!(
            "{} {} {} ctx={} err={}",
            e.kind.as_str(),
            e.tool,
            e.call_id,
            e.context.map_or("-".into(), |c| c.to_string()),
            e.error.unwrap_or("-"),
        ));
    });
    log
}

/// The outcome of `echo`, `shell` and `slow` through `runner`, and what the bus saw.
async fn outcomes(runner: &impl Runner, log: &Mutex<Vec<String>>) -> Vec<String> {
    let set = probes();
    let mut out = Vec::new();
    for tool in ["echo", "shell", "slow"] {
        let r = set
            .execute(
                tool,
                json!("hi"),
                Some(runner as &dyn jianmu_tool_core::DynRunner),
            )
            .await;
        out.push(match r {
            Ok(o) => format!("{tool}: ok {}", o.text),
            Err(e) => format!("{tool}: {e}"),
        });
    }
    out.push(format!("{} events", log.lock().unwrap().len()));
    out
}

#[tokio::test(start_paused = true)]
async fn layers_compose_in_any_order_with_the_same_answers() {
    let deny_exec = || Policy {
        deny: vec!["process".into()],
        ..Policy::default()
    };
    let limit = Duration::from_secs(2);
    let expected = |events: &str| {
        [
            "echo: ok hi".to_owned(),
            "shell: call to `shell` denied: effect `process:exec` is denied (deny `process`)"
                .to_owned(),
            "slow: `slow` timed out after 2 s".to_owned(),
            events.to_owned(),
        ]
    };

    // Events outermost: every call is reported, the denied one too.
    let bus = EventBus::new();
    let log = recorder(&bus);
    let a = InProcess
        .with_timeout(limit)
        .with_policy(deny_exec())
        .with_span()
        .with_events(bus);
    assert_eq!(outcomes(&a, &log).await, expected("6 events"));
    assert!(log.lock().unwrap()[5].ends_with("err=`slow` timed out after 2 s"));

    // Events innermost: the denied call never reaches them, and the timed-out call is
    // seen from inside, as cancelled.
    let bus = EventBus::new();
    let log = recorder(&bus);
    let b = InProcess
        .with_events(bus)
        .with_span()
        .with_policy(deny_exec())
        .with_timeout(limit);
    assert_eq!(outcomes(&b, &log).await, expected("4 events"));
    assert!(log.lock().unwrap()[3].ends_with("err=cancelled"));
    assert_eq!(a.name(), "local");
    assert_eq!(b.name(), "local");
}
