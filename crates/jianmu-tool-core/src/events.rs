//! The event bus: `execution.started`, `execution.completed` and `execution.failed`
//! for every call that goes through a runner, to any number of subscribers.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde_json::{Value, json};

/// Which point of a call's life an event marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// The call is about to run.
    Started,
    /// The call returned an output.
    Completed,
    /// The call returned an error.
    Failed,
}

impl EventKind {
    /// The event's name: `execution.started`, `execution.completed` or `execution.failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "execution.started",
            Self::Completed => "execution.completed",
            Self::Failed => "execution.failed",
        }
    }
}

/// One event. It borrows from the call, so emitting costs no allocation; use
/// [`ExecutionEvent::to_json`] to keep it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ExecutionEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The tool's name.
    pub tool: &'a str,
    /// The call id.
    pub call_id: &'a str,
    /// The id of the call that made this one (a tool calling tools).
    pub parent_call_id: Option<&'a str>,
    /// The caller's event context.
    pub context: Option<&'a Value>,
    /// The call's (validated) arguments.
    pub arguments: Option<&'a Value>,
    /// Time since the call started; zero for `Started`.
    pub elapsed: Duration,
    /// The error text, for `Failed`.
    pub error: Option<&'a str>,
}

impl<'a> ExecutionEvent<'a> {
    /// A new event with no context, no elapsed time and no error.
    pub fn new(kind: EventKind, tool: &'a str, call_id: &'a str) -> Self {
        Self {
            kind,
            tool,
            call_id,
            parent_call_id: None,
            context: None,
            arguments: None,
            elapsed: Duration::ZERO,
            error: None,
        }
    }

    /// The event as JSON, for logs.
    pub fn to_json(&self) -> Value {
        json!({
            "event": self.kind.as_str(),
            "tool": self.tool,
            "call_id": self.call_id,
            "parent_call_id": self.parent_call_id,
            "context": self.context,
            "arguments": self.arguments,
            "elapsed_us": u64::try_from(self.elapsed.as_micros()).unwrap_or(u64::MAX),
            "error": self.error,
        })
    }
}

type Subscriber = Arc<dyn Fn(&ExecutionEvent<'_>) + Send + Sync>;

/// A cheap-to-clone handle on a list of subscribers. Clones share the list.
#[derive(Clone, Default)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

#[derive(Default)]
struct BusInner {
    // Copy-on-write, so emitting never holds the lock while a subscriber runs and a
    // subscriber may itself subscribe or unsubscribe.
    subscribers: RwLock<Arc<[(u64, Subscriber)]>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("subscribers", &self.snapshot().len())
            .finish()
    }
}

/// Identifies a subscription, for [`EventBus::unsubscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

impl EventBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls `f` for every event from now on. A panicking subscriber is caught and
    /// logged; it never fails the call.
    pub fn subscribe<F>(&self, f: F) -> SubscriptionId
    where
        F: Fn(&ExecutionEvent<'_>) + Send + Sync + 'static,
    {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mut guard = self
            .inner
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<_> = guard.iter().cloned().collect();
        list.push((id, Arc::new(f)));
        *guard = list.into();
        SubscriptionId(id)
    }

    /// Stops calling a subscriber. Returns false if it was not subscribed.
    pub fn unsubscribe(&self, id: SubscriptionId) -> bool {
        let mut guard = self
            .inner
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = guard.len();
        let list: Vec<_> = guard.iter().filter(|(i, _)| *i != id.0).cloned().collect();
        let removed = list.len() != before;
        *guard = list.into();
        removed
    }

    /// True when someone listens; callers may skip building events otherwise.
    pub fn has_subscribers(&self) -> bool {
        !self.snapshot().is_empty()
    }

    /// Delivers `event` to every subscriber and to `tracing`.
    pub fn emit(&self, event: &ExecutionEvent<'_>) {
        self.emitter().emit(event);
    }

    /// The subscribers as they are now, to emit several events of one call without
    /// looking them up again (a subscriber added meanwhile sees the next call).
    pub fn emitter(&self) -> Emitter {
        Emitter {
            subscribers: self.snapshot(),
        }
    }

    fn snapshot(&self) -> Arc<[(u64, Subscriber)]> {
        self.inner
            .subscribers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The subscribers of an [`EventBus`] at one moment; see [`EventBus::emitter`].
#[derive(Clone)]
pub struct Emitter {
    subscribers: Arc<[(u64, Subscriber)]>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter")
            .field("subscribers", &self.subscribers.len())
            .finish()
    }
}

impl Emitter {
    /// True when no one listens (events still go to `tracing`).
    pub fn is_empty(&self) -> bool {
        self.subscribers.is_empty()
    }

    /// Delivers `event` to these subscribers and to `tracing`; a panicking subscriber
    /// is logged, not propagated.
    pub fn emit(&self, event: &ExecutionEvent<'_>) {
        tracing::debug!(
            event = event.kind.as_str(),
            tool = event.tool,
            call_id = event.call_id,
            elapsed_us = event.elapsed.as_micros() as u64,
            error = event.error,
        );
        for (_, subscriber) in self.subscribers.iter() {
            if catch_unwind(AssertUnwindSafe(|| subscriber(event))).is_err() {
                tracing::error!(event = event.kind.as_str(), "an event subscriber panicked");
            }
        }
    }
}
