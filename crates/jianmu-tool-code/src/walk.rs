//! The shared walk of `glob_search` and `grep_search`: ripgrep's `ignore` walker over a
//! folder of the workspace, and a bounded "first N in sorted order" collector, so a
//! search over a huge tree keeps only what it will print.

use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use ignore::{WalkBuilder, WalkParallel};
use jianmu_tool_core::ToolError;
use jianmu_workspace::{Workspace, show};

/// The folder a search runs in.
pub(crate) struct Root {
    /// Workspace-relative, symlinks resolved; empty for the workspace root.
    pub(crate) rel: PathBuf,
    /// The same, absolute, for the walker.
    pub(crate) abs: PathBuf,
}

/// Resolves the `path` argument to a folder inside the workspace.
pub(crate) fn root(ws: &Workspace, path: &str) -> Result<Root, ToolError> {
    let given = ws.relative(path)?;
    // Resolve symlinks beneath the root first, so the walker starts from a real
    // folder inside the workspace.
    let rel = ws.canonical(&given)?;
    if !ws.metadata(&rel)?.is_dir() {
        return Err(ToolError::failed(format!(
            "`{}` is not a directory",
            show(&given)
        )));
    }
    let abs = ws.root().join(&rel);
    Ok(Root { rel, abs })
}

/// A walker like ripgrep's and fd's defaults: `.gitignore` (inside git repositories),
/// `.ignore`, hidden files skipped unless asked, symlinks not followed. Inside the
/// saved outputs (`.jianmu/outputs`, which git is told to ignore), every file is
/// searched: a search there asked for them.
pub(crate) fn walker(root: &Root, include_hidden: bool) -> WalkBuilder {
    let mut b = WalkBuilder::new(&root.abs);
    b.hidden(!include_hidden).follow_links(false);
    if root.rel.starts_with(jianmu_workspace::OUTPUTS) {
        b.standard_filters(false).hidden(!include_hidden);
    }
    b
}

/// The workspace-relative display of `entry` (an absolute path under `root.abs`).
pub(crate) fn display(root: &Root, entry: &Path) -> Option<String> {
    let below = entry.strip_prefix(&root.abs).ok()?;
    let rel = root.rel.join(below);
    let text = rel.to_str()?.to_owned();
    (!text.is_empty()).then_some(text)
}

/// Keeps the `k` smallest items seen, and counts them all.
pub(crate) struct TopK<T: Ord> {
    k: usize,
    heap: BinaryHeap<T>,
    pub(crate) total: u64,
}

impl<T: Ord> TopK<T> {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        self.total += 1;
        if self.heap.len() < self.k {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|max| item < *max) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    pub(crate) fn merge(&mut self, other: TopK<T>) {
        let total = self.total + other.total;
        for item in other.heap {
            self.push(item);
        }
        self.total = total;
    }

    pub(crate) fn into_sorted(self) -> (Vec<T>, u64) {
        (self.heap.into_sorted_vec(), self.total)
    }
}

/// A thread's own collector, merged into the shared one when the walk drops it.
pub(crate) struct Local<T: Ord> {
    pub(crate) top: TopK<T>,
    shared: Arc<Mutex<TopK<T>>>,
}

impl<T: Ord> Local<T> {
    pub(crate) fn new(k: usize, shared: &Arc<Mutex<TopK<T>>>) -> Self {
        Self {
            top: TopK::new(k),
            shared: shared.clone(),
        }
    }
}

impl<T: Ord> Drop for Local<T> {
    fn drop(&mut self) {
        let top = std::mem::replace(&mut self.top, TopK::new(0));
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .merge(top);
    }
}

/// Runs `walk`, giving each walker thread a visitor made by `visitor`, and returns
/// the merged first `k` items and the total.
pub(crate) fn collect<T, V>(walk: WalkParallel, k: usize, visitor: V) -> (Vec<T>, u64)
where
    T: Ord + Send + 'static,
    V: Fn(
            Local<T>,
        )
            -> Box<dyn FnMut(Result<ignore::DirEntry, ignore::Error>) -> ignore::WalkState + Send>
        + Sync,
{
    let shared = Arc::new(Mutex::new(TopK::new(k)));
    walk.run(|| visitor(Local::new(k, &shared)));
    let top = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(PoisonError::into_inner),
        TopK::new(0),
    );
    top.into_sorted()
}

/// The output shape DESIGN.md fixes: one line per item, then, when the limit cut the
/// list, a last line in parentheses saying so; `none` when there is nothing at all.
pub(crate) fn listing(
    lines: impl Iterator<Item = String>,
    total: u64,
    what: &str,
    none: &str,
) -> String {
    let mut text = String::new();
    let mut shown = 0u64;
    for line in lines {
        text.push_str(&line);
        text.push('\n');
        shown += 1;
    }
    if total > shown {
        text.push_str(&format!(
            "({} more {what} not shown: {total} in all; narrow the search or raise `limit`)\n",
            total - shown
        ));
    }
    if total == 0 {
        text.push_str(none);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::TopK;

    #[test]
    fn topk_keeps_the_smallest_and_counts_all() {
        let mut a = TopK::new(3);
        for x in [9, 1, 8, 2, 7] {
            a.push(x);
        }
        let mut b = TopK::new(3);
        for x in [0, 6] {
            b.push(x);
        }
        a.merge(b);
        assert_eq!(a.into_sorted(), (vec![0, 1, 2], 7));
    }
}
