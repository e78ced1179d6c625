//! `edit_file` on real files: every rule of the tool, and the form of the file kept.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use jianmu_tool_code::{EditFile, EditSettings};
use jianmu_tool_core::ToolHandle;
use jianmu_workspace::Workspace;
use serde_json::json;

use crate::call;

fn fixture() -> (tempfile::TempDir, ToolHandle) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(Workspace::open(dir.path()).unwrap());
    let tool = ToolHandle::new(EditFile::new(ws, EditSettings::default())).unwrap();
    (dir, tool)
}

#[tokio::test]
async fn edits_apply_in_order_and_answer_a_diff() {
    let (dir, t) = fixture();
    let file = dir.path().join("a.py");
    std::fs::write(&file, "def f():\n    return 1\n\ndef g():\n    return 2\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).unwrap();
    let out = call(
        &t,
        json!({"path": "a.py", "edits": [
            {"old": "return 1", "new": "return 10"},
            {"old": "return 10\n", "new": "return 10\n\n# f done\n"},
            {"old": "def", "new": "async def", "replace_all": true, "expected_count": 2},
        ]}),
    )
    .await;
    assert_eq!(
        out,
        "Edited `a.py`: 3 edits, 4 replacements (+5 -3)\n\
         --- a/a.py\n+++ b/a.py\n@@ -1,5 +1,7 @@\n-def f():\n-    return 1\n+async def f():\n+    return 10\n+\n+# f done\n \n-def g():\n+async def g():\n     return 2\n"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "async def f():\n    return 10\n\n# f done\n\nasync def g():\n    return 2\n"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o751
    );
}

#[tokio::test]
async fn one_failing_edit_writes_nothing_and_says_which() {
    let (dir, t) = fixture();
    let file = dir.path().join("a.txt");
    let before = "alpha\nbeta\ngamma\nbeta\n";
    std::fs::write(&file, before).unwrap();
    let out = call(
        &t,
        json!({"path": "a.txt", "edits": [
            {"old": "alpha", "new": "ALPHA"},
            {"old": "beta", "new": "BETA"},
        ]}),
    )
    .await;
    assert_eq!(
        out,
        "error: edit 2 of 2: `old` occurs 2 times in `a.txt` (at lines 2, 4); add surrounding lines to make it unique, or set `replace_all`; nothing was written"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before.as_bytes());
    let out = call(
        &t,
        json!({"path": "a.txt", "edits": [{"old": "beta", "new": "b", "expected_count": 3, "replace_all": true}]}),
    )
    .await;
    assert_eq!(
        out,
        "error: expected 3 occurrences of `old` in `a.txt`, found 2; nothing was written"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before.as_bytes());
}

#[tokio::test]
async fn a_missing_old_points_at_the_nearest_region() {
    let (dir, t) = fixture();
    let body: String = (1..=40)
        .map(|i| format!("line {i}: value = {}\n", i * 3))
        .collect();
    std::fs::write(dir.path().join("c.txt"), &body).unwrap();
    let out = call(
        &t,
        json!({"path": "c.txt", "edits": [{"old": "line 20: value = 60\nline 21: value = 64\n", "new": "x"}]}),
    )
    .await;
    assert_eq!(
        out,
        "error: `old` was not found in `c.txt`; nothing was written.\n\
         The closest region starts at line 20; line 21 differs:\n  old:  line 21: value = 64\n  file: line 21: value = 63\n\
         Lines 18-23 of the file:\n18\tline 18: value = 54\n19\tline 19: value = 57\n20\tline 20: value = 60\n21\tline 21: value = 63\n22\tline 22: value = 66\n23\tline 23: value = 69\n"
    );
    // Indentation only: said so.
    let out = call(
        &t,
        json!({"path": "c.txt", "edits": [{"old": "  line 7: value = 21", "new": "x"}]}),
    )
    .await;
    assert!(
        out.contains("line 7 differs (they differ only in indentation or trailing spaces)"),
        "{out}"
    );
    // Nothing alike: say to read the file again.
    let out = call(
        &t,
        json!({"path": "c.txt", "edits": [{"old": "zzzz qqqq", "new": "x"}]}),
    )
    .await;
    assert!(
        out.ends_with(
            "No line of the file resembles `zzzz qqqq`: read the file again before editing."
        ),
        "{out}"
    );
}

#[tokio::test]
async fn crlf_bom_and_encodings_are_kept_or_refused() {
    let (dir, t) = fixture();
    let crlf = dir.path().join("w.txt");
    std::fs::write(&crlf, "\u{feff}one\r\ntwo\r\nthree\r\n").unwrap();
    let out = call(
        &t,
        json!({"path": "w.txt", "edits": [{"old": "one\ntwo\n", "new": "one\n2\n"}]}),
    )
    .await;
    assert!(out.starts_with("Edited `w.txt`"), "{out}");
    assert_eq!(
        std::fs::read(&crlf).unwrap(),
        "\u{feff}one\r\n2\r\nthree\r\n".as_bytes()
    );
    let latin1 = dir.path().join("l.txt");
    std::fs::write(&latin1, b"caf\xe9\n").unwrap();
    let out = call(
        &t,
        json!({"path": "l.txt", "edits": [{"old": "caf", "new": "bar"}]}),
    )
    .await;
    assert_eq!(
        out,
        "error: `l.txt` is not UTF-8 text (invalid byte at offset 3); only UTF-8 files are edited, never converted; nothing was written"
    );
    assert_eq!(std::fs::read(&latin1).unwrap(), b"caf\xe9\n");
}

#[tokio::test]
async fn dry_run_writes_nothing_and_paths_stay_inside() {
    let (dir, t) = fixture();
    let file = dir.path().join("d.txt");
    std::fs::write(&file, "keep\n").unwrap();
    let out = call(
        &t,
        json!({"path": "d.txt", "edits": [{"old": "keep", "new": "change"}], "dry_run": true}),
    )
    .await;
    assert_eq!(
        out,
        "Dry run: 1 edit would change `d.txt` (+1 -1); nothing was written\n--- a/d.txt\n+++ b/d.txt\n@@ -1 +1 @@\n-keep\n+change\n"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep\n");
    let out = call(
        &t,
        json!({"path": "../x", "edits": [{"old": "a", "new": "b"}]}),
    )
    .await;
    assert!(out.starts_with("error: refused `../x`"), "{out}");
    let out = call(&t, json!({"path": "d.txt", "edits": []})).await;
    assert!(
        out.starts_with("error: invalid arguments for `edit_file`: at /edits"),
        "{out}"
    );
    let out = call(
        &t,
        json!({"path": "d.txt", "edits": [{"old": "keep", "new": "keep"}]}),
    )
    .await;
    assert_eq!(out, "`d.txt` is unchanged: the edits change nothing");
}

#[tokio::test]
async fn the_nearest_region_search_is_bounded_on_huge_lines() {
    let (dir, t) = fixture();
    // One 3 MB line, and an `old` whose first line is 1 MB: a character diff of the
    // two would take minutes.
    std::fs::write(
        dir.path().join("h.txt"),
        format!("{}\n", "ab".repeat(1_500_000)),
    )
    .unwrap();
    let old = format!("{}x\n", "ba".repeat(500_000));
    let start = std::time::Instant::now();
    let out = call(
        &t,
        json!({"path": "h.txt", "edits": [{"old": old, "new": ""}]}),
    )
    .await;
    assert!(
        out.starts_with("error: `old` was not found in `h.txt`"),
        "{}",
        &out[..100]
    );
    assert!(out.len() < 4000, "{}", out.len());
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}
