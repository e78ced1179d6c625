//! Housekeeping that runs on its own: a task that looks at a value every so often
//! for as long as the value lives (idle shell sessions and interpreters end this way
//! without waiting for a call).

use std::sync::Weak;
use std::time::Duration;

/// Calls `tick` with the value behind `value` every `every`, from a task on the
/// current Tokio runtime, until the value is dropped. Returns false (and starts
/// nothing) outside a Tokio runtime.
pub fn spawn_periodic<T, F>(value: Weak<T>, every: Duration, tick: F) -> bool
where
    T: Send + Sync + 'static,
    F: Fn(&T) + Send + 'static,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    rt.spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(value) = value.upgrade() else {
                return;
            };
            tick(&value);
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn ticks_while_the_value_lives() {
        let count = Arc::new(AtomicUsize::new(0));
        assert!(super::spawn_periodic(
            Arc::downgrade(&count),
            Duration::from_secs(1),
            |c| {
                c.fetch_add(1, Ordering::Relaxed);
            }
        ));
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(count.load(Ordering::Relaxed), 3);
        let weak = Arc::downgrade(&count);
        drop(count);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn outside_a_runtime_nothing_starts() {
        let value = Arc::new(());
        assert!(!super::spawn_periodic(
            Arc::downgrade(&value),
            Duration::from_secs(1),
            |()| {}
        ));
    }
}
