//! `apply_patch` on real files: every rule of the tool, and a differential test
//! against `git apply` on generated changes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use jianmu_tool_code::{ApplyPatch, PatchSettings};
use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_workspace::Workspace;
use serde_json::json;

use crate::call;
use jianmu_test_support::Rng;

fn fixture() -> (tempfile::TempDir, ToolHandle) {
    fixture_with(PatchSettings::default())
}

fn strict() -> (tempfile::TempDir, ToolHandle) {
    fixture_with(PatchSettings {
        strict: true,
        ..PatchSettings::default()
    })
}

fn fixture_with(settings: PatchSettings) -> (tempfile::TempDir, ToolHandle) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(Workspace::open(dir.path()).unwrap());
    let tool = ToolHandle::new(ApplyPatch::new(ws, settings)).unwrap();
    (dir, tool)
}

/// Every file under `root` and its bytes.
fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn put(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

#[tokio::test]
async fn adds_deletes_updates_and_moves_files() {
    let (dir, t) = fixture();
    let root = dir.path();
    put(
        root,
        "src/lib.rs",
        "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n",
    );
    put(root, "old.txt", "bye\nnow\n");
    put(root, "src/name.rs", "x\ny\n");
    let patch = "*** Begin Patch\n\
                 *** Add File: docs/new.md\n+# New\n+text\n\
                 *** Delete File: old.txt\n\
                 *** Update File: src/lib.rs\n@@ fn b() {\n-    2\n+    20\n }\n\
                 *** Update File: src/name.rs\n*** Move to: src/renamed.rs\n x\n-y\n+z\n\
                 *** End Patch";
    let out = call(&t, json!({ "patch": patch })).await;
    assert_eq!(
        out,
        "Applied the patch: 4 files changed (+4 -4)\n\
         A docs/new.md (+2)\n\
         D old.txt (-2)\n\
         M src/lib.rs (+1 -1)\n\
         R src/name.rs -> src/renamed.rs (+1 -1)"
    );
    let files = snapshot(root);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(names, ["docs/new.md", "src/lib.rs", "src/renamed.rs"]);
    assert_eq!(files["docs/new.md"], b"# New\ntext\n");
    assert_eq!(
        files["src/lib.rs"],
        b"fn a() {\n    1\n}\n\nfn b() {\n    20\n}\n"
    );
    assert_eq!(files["src/renamed.rs"], b"x\nz\n");
}

#[tokio::test]
async fn the_patch_may_come_as_a_bare_string_and_answers_structured_output() {
    let (dir, t) = fixture();
    put(dir.path(), "a.txt", "one\n");
    let out = t
        .execute(
            json!("*** Begin Patch\n*** Update File: a.txt\n-one\n+two\n*** End Patch\n"),
            ExecuteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.structured.unwrap(),
        json!({"files": [{"path": "a.txt", "status": "M", "added": 1, "removed": 1}], "added": 1, "removed": 1})
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "two\n"
    );
}

#[tokio::test]
async fn strict_puts_a_pure_addition_after_its_context_not_at_the_end() {
    let (dir, t) = strict();
    put(dir.path(), "m.py", "import os\n\ndef main():\n    pass\n");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: m.py\n@@ import os\n+import sys\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "Applied the patch: 1 file changed (+1 -0)\nM m.py (+1 -0)"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("m.py")).unwrap(),
        "import os\nimport sys\n\ndef main():\n    pass\n"
    );
    // Without anything to place it by, it is refused rather than guessed.
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: m.py\n+import re\n*** End Patch"}),
    )
    .await;
    assert!(
        out.contains("hunk 1 (patch line 3) only adds lines and does not say where"),
        "{out}"
    );
}

#[tokio::test]
async fn patches_apply_as_codex_applies_them() {
    let (dir, t) = fixture();
    let root = dir.path();
    put(root, "a.txt", "old a\n");
    put(root, "b.txt", "b\n");
    put(root, "c.txt", "c\n");
    put(root, "m.py", "import os\n\ndef main():\n    pass");
    put(root, "e.txt", "x\ny\nx\n");
    // Adding a file that exists replaces it; moving onto one replaces it; an update
    // that only adds lines appends them, even under its `@@` line; headers may have
    // whitespace around them; a file updated ends with a line break.
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n *** Add File: a.txt \n+new a\n*** Update File: b.txt\n  *** Move to: c.txt\n@@\n-b\n+B\n*** Update File: m.py\n@@ import os\n+import sys\n*** Update File: e.txt\n x\n+z\n*** End of File\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "Applied the patch: 4 files changed (+4 -1)\nA a.txt (+1)\nR b.txt -> c.txt (+1 -1)\nM m.py (+1 -0)\nM e.txt (+1 -0)\n\
         Note: hunk 1 of m.py only adds lines, so it was appended at the end of the file (as codex places such hunks), not after its `@@` line; to put lines elsewhere, give the unchanged lines around them as context."
    );
    let files = snapshot(root);
    let text = |k: &str| String::from_utf8(files[k].clone()).unwrap();
    assert_eq!(text("a.txt"), "new a\n");
    assert!(!files.contains_key("b.txt"));
    assert_eq!(text("c.txt"), "B\n");
    assert_eq!(
        text("m.py"),
        "import os\n\ndef main():\n    pass\nimport sys\n"
    );
    assert_eq!(text("e.txt"), "x\ny\nx\nz\n");
    // A patch that fails later puts a replaced file back as it was.
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Add File: a.txt\n+again\n*** Update File: c.txt\n*** Move to: a.txt\n-B\n+b\n*** End Patch"}),
    )
    .await;
    assert!(out.contains("`a.txt` appears twice in the patch"), "{out}");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Add File: a.txt\n+again\n*** Update File: c.txt\n-nothing\n+b\n*** End Patch"}),
    )
    .await;
    assert!(out.ends_with("no file was changed"), "{out}");
    assert_eq!(snapshot(root), files);
    // A folder is not replaced.
    std::fs::create_dir(root.join("d")).unwrap();
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Add File: d\n+x\n*** End Patch"}),
    )
    .await;
    assert!(out.contains("`d` exists and is not a file"), "{out}");
}

#[tokio::test]
async fn a_failing_second_file_changes_no_file() {
    let (dir, t) = fixture();
    put(dir.path(), "a.txt", "alpha\nbeta\n");
    put(dir.path(), "b.txt", "gamma\ndelta\n");
    put(dir.path(), "c.txt", "gone?\n");
    let before = snapshot(dir.path());
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n\
                         *** Update File: a.txt\n-alpha\n+ALPHA\n\
                         *** Add File: new.txt\n+new\n\
                         *** Delete File: c.txt\n\
                         *** Update File: b.txt\n gamma\n-DELTA\n+epsilon\n\
                         *** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "error: `b.txt`: hunk 1 (patch line 9): its 2 context and removed lines were not found.\n\
         Closest: file line 1 matches the hunk's first line; then the hunk has\n  `DELTA`\n\
         where line 2 of the file is `delta`; no file was changed"
    );
    assert_eq!(snapshot(dir.path()), before);
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let (dir, t) = fixture();
    let outside = dir
        .path()
        .parent()
        .unwrap()
        .join("jianmu-patch-outside.txt");
    for (path, expect) in [
        (
            "../escape.txt",
            "error: `../escape.txt` (patch line 2): refused `../escape.txt`: the path is outside the workspace; no file was changed",
        ),
        (
            outside.to_str().unwrap(),
            "the path is outside the workspace; no file was changed",
        ),
    ] {
        let out = call(
            &t,
            json!({"patch": format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch")}),
        )
        .await;
        assert!(out.contains(expect), "{out}");
    }
    assert!(!outside.exists());
    // A move out is refused as well, and the file stays.
    put(dir.path(), "in.txt", "x\n");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: in.txt\n*** Move to: ../../out.txt\n*** End Patch"}),
    )
    .await;
    assert!(
        out.contains("refused `../../out.txt`: the path is outside the workspace"),
        "{out}"
    );
    assert!(dir.path().join("in.txt").exists());
    // A symlink out of the workspace cannot be followed to update what it points to.
    let target = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(target.path(), "secret\n").unwrap();
    std::os::unix::fs::symlink(target.path(), dir.path().join("link")).unwrap();
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: link\n-secret\n+owned\n*** End Patch"}),
    )
    .await;
    assert!(out.contains("through a symbolic link"), "{out}");
    assert_eq!(std::fs::read_to_string(target.path()).unwrap(), "secret\n");
}

#[tokio::test]
async fn files_keep_their_line_endings_and_byte_order_mark() {
    let (dir, t) = fixture();
    std::fs::write(dir.path().join("w.txt"), "\u{feff}one\r\ntwo\r\nthree\r\n").unwrap();
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: w.txt\n one\n-two\n+2\n+2.5\n three\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "Applied the patch: 1 file changed (+2 -1)\nM w.txt (+2 -1)"
    );
    assert_eq!(
        std::fs::read(dir.path().join("w.txt")).unwrap(),
        "\u{feff}one\r\n2\r\n2.5\r\nthree\r\n".as_bytes()
    );
    // A file without a final line break gets one, as codex gives it; with
    // `strict`, it keeps its end as it was.
    let patch =
        json!({"patch": "*** Begin Patch\n*** Update File: n.txt\n a\n-b\n+c\n*** End Patch"});
    std::fs::write(dir.path().join("n.txt"), "a\nb").unwrap();
    call(&t, patch.clone()).await;
    assert_eq!(std::fs::read(dir.path().join("n.txt")).unwrap(), b"a\nc\n");
    let (dir, t) = strict();
    std::fs::write(dir.path().join("n.txt"), "a\nb").unwrap();
    call(&t, patch).await;
    assert_eq!(std::fs::read(dir.path().join("n.txt")).unwrap(), b"a\nc");
}

#[tokio::test]
async fn strict_refuses_existing_files_and_all_refuse_missing_and_repeated_ones() {
    let (dir, t) = strict();
    put(dir.path(), "a.txt", "a\n");
    put(dir.path(), "b.txt", "b\n");
    for (patch, expect) in [
        (
            "*** Add File: a.txt\n+x\n",
            "error: `a.txt` already exists (`*** Add File:` creates a file); to change it, use `*** Update File:`; no file was changed",
        ),
        (
            "*** Delete File: nope.txt\n",
            "error: `nope.txt` does not exist; no file was changed",
        ),
        (
            "*** Update File: nope.txt\n-a\n",
            "error: `nope.txt` does not exist; no file was changed",
        ),
        (
            "*** Update File: a.txt\n*** Move to: b.txt\n",
            "error: `b.txt` already exists (`*** Move to:` creates a file)",
        ),
        (
            "*** Update File: a.txt\n-a\n+b\n*** Update File: ./a.txt\n-b\n+c\n",
            "error: `a.txt` appears twice in the patch (patch line 5)",
        ),
    ] {
        let out = call(
            &t,
            json!({"patch": format!("*** Begin Patch\n{patch}*** End Patch")}),
        )
        .await;
        assert!(
            out.starts_with(expect) || out.contains(expect),
            "{patch:?}: {out}"
        );
    }
    assert_eq!(snapshot(dir.path()).len(), 2);
    std::fs::write(dir.path().join("bin.dat"), b"x\0y\n").unwrap();
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: bin.dat\n-x\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "error: `bin.dat` is a binary file (it has NUL bytes); no file was changed"
    );
    // A file emptied of its only line.
    call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n-a\n*** End Patch"}),
    )
    .await;
    assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"");
    assert_eq!(std::fs::read(dir.path().join("b.txt")).unwrap(), b"b\n");
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(Workspace::open(dir.path()).unwrap());
    let settings = PatchSettings {
        max_file_size: 8,
        max_files: 2,
        max_total_size: 12,
        strict: false,
        durable: true,
        diagnostics: false,
    };
    let t = ToolHandle::new(ApplyPatch::new(ws, settings)).unwrap();
    put(dir.path(), "a.txt", "1234\n");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n-1234\n+123456789\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "error: `a.txt` would be 10 bytes, over the limit of 8 bytes; no file was changed"
    );
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Add File: x\n*** Add File: y\n*** Add File: z\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "error: the patch touches 3 files, over the limit of 2; split it; no file was changed"
    );
    // Old and new contents together count against one patch's memory.
    put(dir.path(), "b.txt", "5678\n");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n-1234\n+12\n*** Update File: b.txt\n-5678\n+56\n*** End Patch"}),
    )
    .await;
    assert_eq!(
        out,
        "error: the files the patch touches up to `b.txt` (patch line 5) hold over 12 bytes, old and new contents together, the limit for one patch; split it; no file was changed"
    );
    assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"1234\n");
}

const COMMON: [&str; 6] = ["", "}", "{", "    return x;", "// note", "    x += 1;"];

/// Lines of a file: every third line unique, the rest common, so each hunk's context
/// is unambiguous (as it is in real code) while repeated lines still abound.
fn lines(rng: &mut Rng, tag: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                format!("{tag} line {i} {}", rng.next_u64() % 1000)
            } else {
                COMMON[rng.below(COMMON.len())].to_owned()
            }
        })
        .collect()
}

fn text(lines: &[String]) -> String {
    lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect()
}

/// A random change to `old`: lines removed, replaced and inserted.
fn change(rng: &mut Rng, tag: &str, old: &[String]) -> Vec<String> {
    let mut new = old.to_vec();
    for k in 0..1 + rng.below(6) {
        let at = rng.below(new.len() + 1);
        match rng.below(3) {
            0 if at < new.len() => {
                new.remove(at);
            }
            1 if at < new.len() => new[at] = format!("{tag} changed {k}"),
            _ => {
                for j in 0..1 + rng.below(3) {
                    new.insert(at, format!("{tag} added {k}.{j}"));
                }
            }
        }
    }
    new
}

/// The same change as a `*** Begin Patch` patch and as a git patch.
#[derive(Default)]
struct Both {
    ours: String,
    git: String,
}

impl Both {
    fn update(&mut self, path: &str, old: &str, new: &str) {
        let diff = similar::TextDiff::from_lines(old, new);
        let unified = diff
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string();
        if unified.is_empty() {
            return;
        }
        self.git
            .push_str(&format!("diff --git a/{path} b/{path}\n{unified}"));
        self.ours.push_str(&format!("*** Update File: {path}\n"));
        for line in unified.lines().skip(2) {
            // `@@ -a,b +c,d @@` becomes a bare `@@`: this format has no line numbers.
            self.ours
                .push_str(if line.starts_with("@@") { "@@" } else { line });
            self.ours.push('\n');
        }
    }

    fn add(&mut self, path: &str, lines: &[String]) {
        self.git.push_str(&format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
            lines.len()
        ));
        self.ours.push_str(&format!("*** Add File: {path}\n"));
        for l in lines {
            self.git.push_str(&format!("+{l}\n"));
            self.ours.push_str(&format!("+{l}\n"));
        }
    }

    fn delete(&mut self, path: &str, lines: &[String]) {
        self.git.push_str(&format!(
            "diff --git a/{path} b/{path}\ndeleted file mode 100644\n--- a/{path}\n+++ /dev/null\n@@ -1,{} +0,0 @@\n",
            lines.len()
        ));
        for l in lines {
            self.git.push_str(&format!("-{l}\n"));
        }
        self.ours.push_str(&format!("*** Delete File: {path}\n"));
    }
}

#[tokio::test]
async fn generated_patches_apply_as_git_applies_them() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..60 {
        let ours_dir = tempfile::tempdir().unwrap();
        let git_dir = tempfile::tempdir().unwrap();
        let mut both = Both::default();
        let mut expected = BTreeMap::new();
        for f in 0..1 + rng.below(4) {
            let path = format!("d{}/f{f}.txt", f % 2);
            let tag = format!("c{case}f{f}");
            let n = 3 + rng.below(80);
            let old = lines(&mut rng, &tag, n);
            for root in [ours_dir.path(), git_dir.path()] {
                put(root, &path, &text(&old));
            }
            match rng.below(8) {
                0 => both.delete(&path, &old),
                _ => {
                    let new = change(&mut rng, &tag, &old);
                    both.update(&path, &text(&old), &text(&new));
                    expected.insert(path, text(&new).into_bytes());
                }
            }
        }
        if rng.below(3) == 0 {
            let n = 1 + rng.below(10);
            let new = lines(&mut rng, &format!("c{case}new"), n);
            both.add("new/added.txt", &new);
            expected.insert("new/added.txt".to_owned(), text(&new).into_bytes());
        }
        if both.ours.is_empty() {
            continue;
        }
        let ws = Arc::new(Workspace::open(ours_dir.path()).unwrap());
        let tool = ToolHandle::new(ApplyPatch::new(ws, PatchSettings::default())).unwrap();
        let patch = format!("*** Begin Patch\n{}*** End Patch\n", both.ours);
        let out = call(&tool, json!({ "patch": patch })).await;
        assert!(
            out.starts_with("Applied the patch"),
            "case {case}: {out}\n{patch}"
        );
        let git_patch = git_dir.path().join(".change.patch");
        std::fs::write(&git_patch, &both.git).unwrap();
        crate::run("git", &["apply", ".change.patch"], git_dir.path());
        std::fs::remove_file(&git_patch).unwrap();
        let ours = snapshot(ours_dir.path());
        assert_eq!(ours, snapshot(git_dir.path()), "case {case}:\n{patch}");
        assert_eq!(ours, expected, "case {case}");
    }
}

/// A hunk of only added lines under an `@@` line goes at the end of the file, as
/// codex places it, and the answer says so (the model was told neither the rule nor
/// where its lines went).
#[tokio::test]
async fn an_added_only_hunk_under_an_anchor_says_it_went_to_the_end() {
    let (dir, t) = fixture();
    put(dir.path(), "f.py", "def f():\n    pass\n\nx = 1\n");
    let out = t
        .execute(
            json!("*** Begin Patch\n*** Update File: f.py\n@@ def f():\n+    return 2\n*** End Patch\n"),
            ExecuteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.py")).unwrap(),
        "def f():\n    pass\n\nx = 1\n    return 2\n"
    );
    assert!(
        out.text
            .contains("hunk 1 of f.py only adds lines, so it was appended at the end of the file"),
        "{}",
        out.text
    );
    // With context, or without an `@@` line, nothing needs saying.
    let out = t
        .execute(
            json!("*** Begin Patch\n*** Update File: f.py\n+y = 2\n*** End Patch\n"),
            ExecuteOptions::default(),
        )
        .await
        .unwrap();
    assert!(!out.text.contains("Note:"), "{}", out.text);
}

/// The folders a patch's deletions and moves empty are removed, as `git apply`
/// removes them; a folder with anything left in it stays.
#[tokio::test]
async fn folders_a_patch_empties_are_removed() {
    let (dir, t) = fixture();
    put(dir.path(), "a/b/only.txt", "x\n");
    put(dir.path(), "k/gone.txt", "y\n");
    put(dir.path(), "k/kept.txt", "z\n");
    put(dir.path(), "m/n/moved.txt", "w\n");
    let out = call(
        &t,
        json!({"patch": "*** Begin Patch\n*** Delete File: a/b/only.txt\n*** Delete File: k/gone.txt\n*** Update File: m/n/moved.txt\n*** Move to: moved.txt\n*** End Patch"}),
    )
    .await;
    assert!(out.starts_with("Applied the patch"), "{out}");
    assert!(!dir.path().join("a").exists());
    assert!(!dir.path().join("m").exists());
    assert!(dir.path().join("k/kept.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("moved.txt")).unwrap(),
        "w\n"
    );
}
