//! Helpers the workspace's tests share (a dev-dependency only; never linked into a
//! library or the `jianmu` binary).

use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use serde_json::Value;

/// Calls `tool` with `args` through the real call path (merge, validation, the default
/// runner): its text, or `error: ` and the error.
pub async fn call(tool: &ToolHandle, args: Value) -> String {
    match tool.execute(args, ExecuteOptions::default()).await {
        Ok(out) => out.text,
        Err(e) => format!("error: {e}"),
    }
}

/// Live processes (not zombies) whose command line, its arguments joined by spaces,
/// contains `needle`, by PID: how tests check that nothing a call started is left.
#[must_use]
pub fn running_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            });
            live && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|mut c| {
                for b in &mut c {
                    if *b == 0 {
                        *b = b' ';
                    }
                }
                String::from_utf8_lossy(&c).contains(needle)
            })
        })
        .collect()
}
