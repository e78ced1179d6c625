//! `WithSpan`: runs each call inside a `tracing` span.

use jianmu_tool_core::{PreparedCall, Runner, ToolError, ToolOutput};
use tracing::Instrument as _;

use super::delegate;

/// Opens a `tool` span (fields `name`, `call_id`, `runner`) around each call, so
/// everything the tool and the runner log is tied to the call.
#[derive(Debug, Clone)]
pub struct WithSpan<R> {
    inner: R,
}

impl<R> WithSpan<R> {
    /// `inner`, traced.
    pub fn new(inner: R) -> Self {
        Self { inner }
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

impl<R: Runner> Runner for WithSpan<R> {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        let span = tracing::debug_span!(
            "tool",
            name = call.tool.name(),
            call_id = call.cx.call_id(),
            runner = self.inner.name()
        );
        self.inner.run(call).instrument(span).await
    }

    delegate!();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use jianmu_tool_core::{ExecuteOptions, InProcess};
    use serde_json::json;
    use tracing::Subscriber;
    use tracing::span::{Attributes, Id};

    use super::WithSpan;
    use crate::layer::tests::probes;

    /// Records the fields of every span opened.
    #[derive(Default, Clone)]
    struct Spans(Arc<Mutex<Vec<String>>>);

    impl Subscriber for Spans {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &Attributes<'_>) -> Id {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    self.0.push_str(&format!(" {}={v:?}", f.name()));
                }
                fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                    self.0.push_str(&format!(" {}={v}", f.name()));
                }
            }
            let mut fields = Fields(attrs.metadata().name().to_owned());
            attrs.record(&mut fields);
            let mut spans = self.0.lock().unwrap();
            spans.push(fields.0);
            Id::from_u64(spans.len() as u64)
        }
        fn record(&self, _: &Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[tokio::test]
    async fn each_call_runs_in_a_span_naming_tool_call_and_runner() {
        let spans = Spans::default();
        let _guard = tracing::subscriber::set_default(spans.clone());
        let runner = WithSpan::new(InProcess);
        let out = probes()
            .execute_with(
                "echo",
                json!("hi"),
                ExecuteOptions::default().runner(&runner).call_id("c9"),
            )
            .await
            .unwrap();
        assert_eq!(out.text, "hi");
        assert_eq!(
            *spans.0.lock().unwrap(),
            ["tool name=echo call_id=c9 runner=local"]
        );
    }
}
