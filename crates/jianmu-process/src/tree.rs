//! A supervised command's process tree as the kernel lists it (`/proc/PID/task/TID/children`):
//! what [`crate::Supervised::stop_others`] walks to end everything a command started
//! while keeping the command itself, for a shell that lives across calls.

/// The live (not zombie) processes below `root`, except `keep` (which is still walked:
/// its children are listed).
pub(crate) fn live_below(root: u32, keep: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut todo = children(root);
    // A bound on the walk: a process tree cannot be this big within a pids limit, and
    // a malicious fork loop cannot make the walk endless.
    let mut budget = 100_000usize;
    while let Some(pid) = todo.pop() {
        budget = budget.saturating_sub(1);
        if budget == 0 {
            break;
        }
        todo.extend(children(pid));
        if pid != keep && !is_zombie(pid) {
            found.push(pid);
        }
    }
    found
}

/// The children of every thread of `pid`.
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        let mut path = task.path();
        path.push("children");
        if let Ok(list) = std::fs::read_to_string(path) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// The oldest child of `pid` (by start time): a supervisor's worker, whose later
/// siblings are orphans it adopted.
pub(crate) fn oldest_child(pid: u32) -> Option<u32> {
    children(pid)
        .into_iter()
        .filter_map(|c| Some((start_time(c)?, c)))
        .min()
        .map(|(_, c)| c)
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last `)`.
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn is_zombie(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|f| f.first().is_some_and(|s| s == "Z" || s == "X"))
}

fn start_time(pid: u32) -> Option<u64> {
    // Field 22 of stat; the first field after the name is field 3.
    stat_fields(pid)?.get(19)?.parse().ok()
}
