//! The MCP server's metrics, exposed as Prometheus text at `GET /metrics` by the
//! HTTP service: calls, errors and latency per tool, sessions, calls in flight.
//!
//! Label values are bounded: a tool name is only used when the tool exists (any
//! other name counts as `unknown`), and an error's class is one of a fixed set.

use std::time::Duration;

use jianmu_tool_core::ToolError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets, in seconds: 250 µs to 2 minutes (the default time limit).
const BUCKETS: [f64; 16] = [
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0,
    120.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    tool: String,
    class: &'static str,
}

type Latency = Family<ToolLabel, Histogram, fn() -> Histogram>;

/// The server's metrics and the registry that renders them.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    calls: Family<ToolLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Latency,
    in_flight: Gauge,
    /// Told when the last call running ends.
    idle: tokio::sync::Notify,
    /// Client sessions open now.
    pub(crate) sessions_open: Gauge,
    /// Client sessions opened since the start.
    pub(crate) sessions_total: Counter,
    /// Requests refused: no or a wrong token (401), a foreign origin (403), the
    /// session limit (503).
    refused: Family<RefusedLabel, Counter>,
    /// Per principal (names come from the token file, so they are bounded).
    principal_calls: Family<PrincipalCallLabels, Counter>,
    principal_sessions: Family<PrincipalLabel, Gauge>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrincipalLabel {
    principal: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrincipalCallLabels {
    principal: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabel {
    reason: &'static str,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("jianmu");
        let calls = Family::<ToolLabel, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let latency: Latency = Family::new_with_constructor(|| Histogram::new(BUCKETS));
        let in_flight = Gauge::default();
        let sessions_open = Gauge::default();
        let sessions_total = Counter::default();
        let refused = Family::<RefusedLabel, Counter>::default();
        let principal_calls = Family::<PrincipalCallLabels, Counter>::default();
        let principal_sessions = Family::<PrincipalLabel, Gauge>::default();
        registry.register(
            "principal_tool_calls",
            "Tool calls answered over HTTP, by principal and outcome (ok, error)",
            principal_calls.clone(),
        );
        registry.register(
            "principal_sessions_open",
            "Protocol sessions open now, by principal",
            principal_sessions.clone(),
        );
        registry.register("tool_calls", "Tool calls answered, by tool", calls.clone());
        registry.register(
            "tool_errors",
            "Tool calls that failed, by tool and class (arguments, failed, timeout, unknown_tool, denied, runner, cancelled, other)",
            errors.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "Time from a call's arrival to its answer, by tool",
            latency.clone(),
        );
        registry.register(
            "tool_calls_in_flight",
            "Tool calls running now",
            in_flight.clone(),
        );
        registry.register(
            "mcp_sessions_open",
            "Client sessions open now",
            sessions_open.clone(),
        );
        registry.register(
            "mcp_sessions",
            "Client sessions opened since the start",
            sessions_total.clone(),
        );
        registry.register(
            "http_refused",
            "HTTP requests refused, by reason (unauthorized, origin, host, sessions, body, principal)",
            refused.clone(),
        );
        Self {
            registry,
            calls,
            errors,
            latency,
            in_flight,
            idle: tokio::sync::Notify::new(),
            sessions_open,
            sessions_total,
            refused,
            principal_calls,
            principal_sessions,
        }
    }

    /// The gauge of `principal`'s open protocol sessions.
    pub(crate) fn principal_sessions(&self, principal: &str) -> Gauge {
        self.principal_sessions
            .get_or_create(&PrincipalLabel {
                principal: principal.to_owned(),
            })
            .clone()
    }

    /// Counts one answered call of `principal`.
    pub(crate) fn principal_call(&self, principal: &str, ok: bool) {
        self.principal_calls
            .get_or_create(&PrincipalCallLabels {
                principal: principal.to_owned(),
                outcome: if ok { "ok" } else { "error" },
            })
            .inc();
    }

    /// Counts a call as running until the guard is dropped.
    pub(crate) fn start(&self) -> InFlight<'_> {
        self.in_flight.inc();
        InFlight(self)
    }

    /// Records one answered call of `tool` (`None`: no such tool).
    pub(crate) fn record(
        &self,
        tool: Option<&str>,
        took: Duration,
        outcome: Result<(), &ToolError>,
    ) {
        let tool = tool.unwrap_or("unknown").to_owned();
        self.latency
            .get_or_create(&ToolLabel { tool: tool.clone() })
            .observe(took.as_secs_f64());
        if let Err(e) = outcome {
            self.errors
                .get_or_create(&ErrorLabels {
                    tool: tool.clone(),
                    class: class(e),
                })
                .inc();
        }
        self.calls.get_or_create(&ToolLabel { tool }).inc();
    }

    /// Counts a refused HTTP request.
    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&RefusedLabel { reason }).inc();
    }

    /// Waits until no call is running.
    pub(crate) async fn calls_done(&self) {
        crate::until(&self.idle, || self.in_flight() <= 0).await;
    }

    /// How many calls are running now.
    pub(crate) fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// A call counted as in flight.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.dec() == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

fn class(e: &ToolError) -> &'static str {
    match e {
        ToolError::InvalidArguments { .. } => "arguments",
        ToolError::Failed { .. } => "failed",
        ToolError::Timeout { .. } => "timeout",
        ToolError::UnknownTool { .. } | ToolError::NotCompiled { .. } => "unknown_tool",
        ToolError::Denied { .. } => "denied",
        ToolError::Runner { .. } => "runner",
        ToolError::Cancelled { .. } => "cancelled",
        _ => "other",
    }
}
