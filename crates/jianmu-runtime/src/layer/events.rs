//! `WithEvents`: emits each call's lifecycle on an event bus (which the audit log
//! listens to).

use std::time::Instant;

use jianmu_tool_core::{
    CallContext, Emitter, EventBus, EventKind, ExecutionEvent, PreparedCall, Runner, ToolError,
    ToolOutput,
};
use serde_json::Value;

use super::delegate;

/// Emits `execution.started` before a call and `execution.completed` or
/// `execution.failed` (with the error) after it; a call whose future is dropped before
/// it finishes emits `execution.failed` with `cancelled`. Events carry the arguments,
/// copied only when someone listens.
#[derive(Debug, Clone)]
pub struct WithEvents<R> {
    inner: R,
    bus: EventBus,
}

impl<R> WithEvents<R> {
    /// `inner`, reporting on `bus`.
    pub fn new(inner: R, bus: EventBus) -> Self {
        Self { inner, bus }
    }

    /// The bus events go to.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// Reports on `bus` from now on.
    pub fn set_events(&mut self, bus: EventBus) {
        self.bus = bus;
    }

    /// The wrapped runner.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// The wrapped runner, to change its settings.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

/// Emits `execution.failed` with `cancelled` if the call's future is dropped before it
/// finishes.
struct Pending<'a> {
    emitter: Emitter,
    tool: &'a str,
    call_id: &'a str,
    cx: &'a CallContext,
    args: Option<&'a Value>,
    started: Instant,
    done: bool,
}

impl Pending<'_> {
    fn emit(&self, kind: EventKind, error: Option<&str>) {
        let mut event = ExecutionEvent::new(kind, self.tool, self.call_id);
        event.parent_call_id = self.cx.parent();
        event.context = self.cx.event_context();
        event.arguments = self.args;
        if kind != EventKind::Started {
            event.elapsed = self.started.elapsed();
        }
        event.error = error;
        self.emitter.emit(&event);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.emit(EventKind::Failed, Some("cancelled"));
        }
    }
}

impl<R: Runner> Runner for WithEvents<R> {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        // One look at the subscribers per call; events carry the arguments, copied only
        // when someone listens.
        let emitter = self.bus.emitter();
        let logged = (!emitter.is_empty()).then(|| call.args.clone());
        let (tool, cx) = (call.tool, call.cx);
        let mut pending = Pending {
            emitter,
            tool: tool.name(),
            call_id: cx.call_id(),
            cx,
            args: logged.as_ref(),
            started: Instant::now(),
            done: false,
        };
        pending.emit(EventKind::Started, None);
        let result = self.inner.run(call).await;
        pending.done = true;
        match &result {
            Ok(_) => pending.emit(EventKind::Completed, None),
            Err(e) => pending.emit(EventKind::Failed, Some(&e.to_string())),
        }
        result
    }

    delegate!();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jianmu_tool_core::{EventBus, ExecuteOptions, InProcess};
    use serde_json::json;

    use super::WithEvents;
    use crate::layer::tests::{probes, recorder};

    #[tokio::test]
    async fn events_surround_success_and_failure_with_id_context_and_error() {
        let bus = EventBus::new();
        let log = recorder(&bus);
        let runner = WithEvents::new(InProcess, bus);
        let set = probes();
        let ctx = json!({"turn": 3});
        let options = ExecuteOptions::default()
            .runner(&runner)
            .call_id("c1")
            .event_context(&ctx);
        set.execute_with("echo", json!("hi"), options)
            .await
            .unwrap();
        let options = ExecuteOptions::default().runner(&runner).call_id("c2");
        set.execute_with("fail", json!("x"), options)
            .await
            .unwrap_err();
        assert_eq!(
            *log.lock().unwrap(),
            [
                r#"execution.started echo c1 ctx={"turn":3} err=-"#,
                r#"execution.completed echo c1 ctx={"turn":3} err=-"#,
                "execution.started fail c2 ctx=- err=-",
                "execution.failed fail c2 ctx=- err=no luck",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_call_is_reported_cancelled() {
        let bus = EventBus::new();
        let log = recorder(&bus);
        let runner = WithEvents::new(InProcess, bus);
        let set = probes();
        let options = ExecuteOptions::default().runner(&runner).call_id("c4");
        let call = set.execute_with("slow", json!("x"), options);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), call)
                .await
                .is_err()
        );
        assert_eq!(
            *log.lock().unwrap(),
            [
                "execution.started slow c4 ctx=- err=-",
                "execution.failed slow c4 ctx=- err=cancelled",
            ]
        );
    }
}
