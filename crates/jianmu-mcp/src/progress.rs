//! MCP progress notifications: a call whose request carried a `progressToken` gets a
//! [`ProgressSink`] that keeps the latest report, and a task that sends it to the
//! client as `notifications/progress`, at most once per [`PROGRESS_THROTTLE`]. The
//! progress value is the call's running time in seconds, so it only grows.

use std::sync::Arc;
use std::time::Duration;

use jianmu_tool_core::{Progress, ProgressSink};
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The shortest time between two notifications of one call.
pub(crate) const PROGRESS_THROTTLE: Duration = Duration::from_millis(500);

/// A sink for the call's reports and the task forwarding them; abort the task when
/// the call has its answer.
pub(crate) fn forward(
    peer: Peer<RoleServer>,
    token: ProgressToken,
) -> (ProgressSink, JoinHandle<()>) {
    let (tx, rx) = watch::channel(None::<Progress>);
    let sink: ProgressSink = Arc::new(move |p: &Progress| {
        tx.send_replace(Some(*p));
    });
    (sink, tokio::spawn(send(peer, token, rx)))
}

async fn send(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut latest: watch::Receiver<Option<Progress>>,
) {
    let mut last = None;
    while latest.changed().await.is_ok() {
        let Some(report) = *latest.borrow_and_update() else {
            continue;
        };
        // Progress must grow from one notification to the next.
        if last.is_some_and(|l| report.elapsed_ms <= l) {
            continue;
        }
        last = Some(report.elapsed_ms);
        let mut param =
            ProgressNotificationParam::new(token.clone(), report.elapsed_ms as f64 / 1000.0);
        param.message = Some(report.message());
        if peer.notify_progress(param).await.is_err() {
            return;
        }
        tokio::time::sleep(PROGRESS_THROTTLE).await;
    }
}
