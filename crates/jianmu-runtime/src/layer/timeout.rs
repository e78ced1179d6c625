//! `WithTimeout`: stops a call that runs past its time limit.

use std::future::Future as _;
use std::task::Poll;
use std::time::Duration;

use jianmu_tool_core::{PreparedCall, Runner, ToolError, ToolOutput};

use super::delegate;

/// Drops the wrapped call after its limit and answers [`ToolError::Timeout`]. Dropping
/// the call is what stops its work: tools kill what they started when their future
/// goes (see `jianmu-process`), and a sandbox cancels the call inside its container.
#[derive(Debug, Clone)]
pub struct WithTimeout<R> {
    inner: R,
    limit: Option<Duration>,
}

impl<R> WithTimeout<R> {
    /// `inner` with `limit` (none: no limit).
    pub fn new(inner: R, limit: Option<Duration>) -> Self {
        Self { inner, limit }
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// Sets the limit.
    pub fn set_limit(&mut self, limit: Option<Duration>) {
        self.limit = limit;
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

impl<R: Runner> Runner for WithTimeout<R> {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        let tool = call.tool;
        let mut work = std::pin::pin!(self.inner.run(call));
        let Some(limit) = self.limit else {
            return work.await;
        };
        // The timer lives on the heap: inline, it would grow every future that holds
        // this one, and a stack of layers moves those futures around.
        let mut timer = Box::pin(tokio::time::sleep(limit));
        std::future::poll_fn(|task| {
            if let Poll::Ready(result) = work.as_mut().poll(task) {
                return Poll::Ready(result);
            }
            timer.as_mut().poll(task).map(|()| {
                Err(ToolError::Timeout {
                    partial: None,
                    tool: tool.name().to_owned(),
                    after: limit,
                })
            })
        })
        .await
    }

    delegate!();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jianmu_tool_core::{InProcess, ToolError, ToolSet};
    use serde_json::json;

    use super::WithTimeout;
    use crate::layer::tests::{probes, slow_calls};

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_limit_is_a_timeout_and_its_work_is_dropped() {
        let (set, dropped) = slow_calls();
        let runner = WithTimeout::new(InProcess, Some(Duration::from_millis(1500)));
        let err = set
            .execute("slow", json!("x"), Some(&runner))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Timeout { .. }), "{err}");
        assert_eq!(err.to_string(), "`slow` timed out after 1.500 s");
        assert!(err.is_model_facing());
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_within_its_limit_or_without_one_is_untouched() {
        let set: ToolSet = probes();
        for limit in [Some(Duration::from_secs(1)), None] {
            let runner = WithTimeout::new(InProcess, limit);
            let out = set
                .execute("echo", json!("hi"), Some(&runner))
                .await
                .unwrap();
            assert_eq!(out.text, "hi");
        }
    }
}
