//! Killing a command's whole process tree. Its process group is killed first; a child
//! that left the group (`setsid`, `setpgid`) is still found by the marker every
//! process of the call inherits in its environment, and killed too.

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// The environment variable that marks a call's processes.
pub(crate) const MARKER_VAR: &str = "JIANMU_BASH_CALL";

/// A marker unique to this process and call.
pub(crate) fn marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kills the tree when dropped (unless disarmed).
pub(crate) struct Guard {
    pid: Option<u32>,
    needle: Vec<u8>,
    armed: bool,
}

impl Guard {
    pub(crate) fn new(pid: Option<u32>, marker: String) -> Self {
        Self {
            pid,
            needle: format!("{MARKER_VAR}={marker}").into_bytes(),
            armed: true,
        }
    }

    /// Kills the process group: one system call, enough for everything that did not
    /// leave the group.
    pub(crate) fn kill_group(&self) {
        if let Some(pid) = self.pid.and_then(|p| Pid::from_raw(p as i32)) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }

    /// Nothing is left to find: skip the scan of `/proc` on drop.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Processes whose environment carries the marker.
    fn marked(&self) -> Vec<Pid> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|var| var == self.needle.as_slice())
                })
            })
            .filter_map(Pid::from_raw)
            .collect()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.kill_group();
        // A few passes catch processes forked while the previous pass was killing.
        for _ in 0..3 {
            let found = self.marked();
            if found.is_empty() {
                break;
            }
            for pid in found {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}
