//! glob_search, grep_search, file_info and str_replace on real trees, compared with
//! the real `rg` and `fd` where they overlap.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jianmu_tool_code::{FileInfo, GlobSearch, GrepSearch, ReplaceSettings, StrReplace};
use jianmu_tool_core::ToolHandle;
use jianmu_workspace::Workspace;
use serde_json::{Value, json};

mod edit;
mod patch;

struct Fx {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    ws: Arc<Workspace>,
}

impl Fx {
    fn path(&self, rel: &str) -> PathBuf {
        self.top.join("ws").join(rel)
    }

    fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn tool(&self, name: &str) -> ToolHandle {
        let ws = self.ws.clone();
        match name {
            "glob" => ToolHandle::new(GlobSearch::new(ws)),
            "grep" => ToolHandle::new(GrepSearch::new(ws)),
            "info" => ToolHandle::new(FileInfo::new(ws)),
            _ => ToolHandle::new(StrReplace::new(ws, ReplaceSettings::default())),
        }
        .unwrap()
    }
}

fn run(program: &str, args: &[&str], dir: &Path) -> String {
    let out = jianmu_process::std_command(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} must be installed (.ci/run installs it): {e}"));
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A git repository with ignored, hidden, binary, nested and symlinked entries.
fn tree() -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(top.join("ws")).unwrap();
    std::fs::create_dir_all(top.join("outside")).unwrap();
    std::fs::write(top.join("outside/leak.rs"), "fn needle() {} // outside\n").unwrap();
    let fx = Fx {
        ws: Arc::new(Workspace::open(top.join("ws")).unwrap()),
        top,
        _tmp: tmp,
    };
    run("git", &["init", "-q"], &fx.path(""));
    fx.put(".gitignore", "target/\n*.log\n");
    fx.put("src/.ignore", "generated.rs\n");
    fx.put(
        "src/main.rs",
        "fn main() {\n    needle();\n}\n\nfn needle() {}\n",
    );
    fx.put(
        "src/lib.rs",
        "//! Needle docs.\npub fn needle_count() -> usize { 2 }\n",
    );
    fx.put("src/generated.rs", "fn needle() {} // ignored by .ignore\n");
    fx.put(
        "src/deep/er/mod.rs",
        "// a needle in a haystack\nconst NEEDLE: u8 = 1;\n",
    );
    fx.put("docs/guide.md", "Find the needle.\nNo match here.\n");
    fx.put("docs/notes.txt", "needle needle needle\n");
    fx.put(
        "target/debug/out.rs",
        "fn needle() {} // ignored by .gitignore\n",
    );
    fx.put("build.log", "needle in a log\n");
    fx.put(".hidden/secret.rs", "fn needle() {} // hidden\n");
    fx.put(".env.rs", "needle\n");
    fx.put("data.bin", b"needle\x00\x01\x02 binary");
    fx.put("weird name.rs", "// needle with a space\n");
    std::fs::create_dir_all(fx.path("empty.rs")).unwrap();
    symlink(fx.top.join("outside"), fx.path("out")).unwrap();
    symlink("src/main.rs", fx.path("main-link.rs")).unwrap();
    fx
}

pub(crate) use jianmu_test_support::call;

fn sorted(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

fn fd() -> &'static str {
    let found = |p: &str| {
        jianmu_process::std_command(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found("fdfind") { "fdfind" } else { "fd" }
}

#[tokio::test]
async fn grep_matches_ripgrep() {
    let fx = tree();
    let grep = fx.tool("grep");
    let root = fx.path("");
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({"query": "needle"}), vec!["-F", "-s", "needle"]),
        (
            json!({"query": "NEEDLE", "case_sensitive": false}),
            vec!["-F", "-i", "NEEDLE"],
        ),
        (
            json!({"query": r"fn \w+\(\)", "regex": true}),
            vec!["-s", r"fn \w+\(\)"],
        ),
        (
            json!({"query": "needle", "include_hidden": true}),
            vec!["-F", "-s", "--hidden", "needle"],
        ),
        (
            json!({"query": "needle", "glob": "*.rs"}),
            vec!["-F", "-s", "-g", "*.rs", "needle"],
        ),
        (
            json!({"query": "needle", "glob": "!*.md"}),
            vec!["-F", "-s", "-g", "!*.md", "needle"],
        ),
        (
            json!({"query": "needle", "path": "src"}),
            vec!["-F", "-s", "needle", "src"],
        ),
        (
            json!({"query": "needle(", "regex": false}),
            vec!["-F", "-s", "needle("],
        ),
    ];
    for (args, rg_args) in cases {
        let mut full = vec!["-n", "--no-heading", "--color", "never"];
        full.extend(rg_args);
        let expected = sorted(&run("rg", &full, &root));
        assert!(
            !expected.is_empty() || args["query"] == "needle(",
            "fixture too thin for {args}"
        );
        let ours = call(&grep, args.clone()).await;
        let ours: Vec<String> = sorted(&ours)
            .into_iter()
            .filter(|l| !l.starts_with('('))
            .collect();
        assert_eq!(ours, expected, "grep_search {args}");
    }
}

#[tokio::test]
async fn glob_matches_fd() {
    let fx = tree();
    let glob = fx.tool("glob");
    let root = fx.path("");
    for (args, fd_args) in [
        (json!({"pattern": "*.rs"}), vec!["--glob", "*.rs"]),
        (
            json!({"pattern": "*.rs", "include_hidden": true}),
            vec!["--glob", "--hidden", "*.rs"],
        ),
        (json!({"pattern": "*.md"}), vec!["--glob", "*.md"]),
        (json!({"pattern": "*"}), vec!["--glob", "*"]),
        (
            json!({"pattern": "m*", "path": "src"}),
            vec!["--glob", "m*", "src"],
        ),
    ] {
        let expected = sorted(&run(fd(), &fd_args, &root));
        assert!(!expected.is_empty(), "fixture too thin for {args}");
        let ours = call(&glob, args.clone()).await;
        assert_eq!(sorted(&ours), expected, "glob_search {args}");
    }
    // With a `/`, the pattern matches the path below `path`.
    assert_eq!(
        call(&glob, json!({"pattern": "src/**/*.rs"})).await,
        "src/deep/er/mod.rs\nsrc/lib.rs\nsrc/main.rs\n"
    );
}

/// The saved outputs are searched when asked for, though git ignores them.
#[tokio::test]
async fn grep_searches_the_saved_outputs_git_ignores() {
    let fx = tree();
    fx.put(".jianmu/outputs/.gitignore", "*\n");
    fx.put(".jianmu/outputs/abc/bash-1.txt", "line\nthe needle line\n");
    let out = call(
        &fx.tool("grep"),
        json!({"query": "the needle", "path": ".jianmu/outputs"}),
    )
    .await;
    assert_eq!(out, ".jianmu/outputs/abc/bash-1.txt:2:the needle line\n");
    // Elsewhere the ignore files still hold.
    let out = call(
        &fx.tool("grep"),
        json!({"query": "the needle", "include_hidden": true}),
    )
    .await;
    assert!(!out.contains("bash-1.txt"), "{out}");
}

#[tokio::test]
async fn limits_cut_with_a_note_and_stay_sorted() {
    let fx = tree();
    for i in 0..50 {
        fx.put(&format!("many/f{i:02}.txt"), "hit\nhit\n");
    }
    let out = call(&fx.tool("grep"), json!({"query": "hit", "limit": 3})).await;
    assert_eq!(
        out,
        "many/f00.txt:1:hit\nmany/f00.txt:2:hit\nmany/f01.txt:1:hit\n(97 more matches not shown: 100 in all; narrow the search or raise `limit`)\n"
    );
    let out = call(&fx.tool("glob"), json!({"pattern": "f4*.txt", "limit": 2})).await;
    assert_eq!(
        out,
        "many/f40.txt\nmany/f41.txt\n(8 more paths not shown: 10 in all; narrow the search or raise `limit`)\n"
    );
    assert_eq!(
        call(&fx.tool("grep"), json!({"query": "absent"})).await,
        "(no matches for `absent` under `.`)\n"
    );
    let long = format!("hit{}\n", "x".repeat(2000));
    fx.put("long.txt", long);
    let out = call(
        &fx.tool("grep"),
        json!({"query": "hit", "path": ".", "glob": "long.txt"}),
    )
    .await;
    assert_eq!(
        out,
        format!(
            "long.txt:1:hit{}[... 1503 more characters]\n",
            "x".repeat(497)
        )
    );
}

#[tokio::test]
async fn searches_never_leave_the_workspace() {
    let fx = tree();
    for (tool, args, expect) in [
        (
            "grep",
            json!({"query": "needle", "path": "out"}),
            "error: refused `out`: the path leads outside the workspace through a symbolic link",
        ),
        (
            "grep",
            json!({"query": "needle", "path": "../outside"}),
            "error: refused `../outside`: the path is outside the workspace",
        ),
        (
            "glob",
            json!({"pattern": "*", "path": "/"}),
            "error: refused `/`: the path is outside the workspace",
        ),
        (
            "glob",
            json!({"pattern": "*.rs", "path": "src/main.rs"}),
            "error: `src/main.rs` is not a directory",
        ),
        (
            "grep",
            json!({"query": "(", "regex": true}),
            "error: invalid regular expression: regex parse error:\n    (\n    ^\nerror: unclosed group",
        ),
        (
            "glob",
            json!({"pattern": "a[", "path": "."}),
            "error: invalid glob `a[`: error parsing glob 'a[': unclosed character class; missing ']'",
        ),
    ] {
        assert_eq!(call(&fx.tool(tool), args).await, expect);
    }
    // The symlinked folder is listed but never entered; its file never appears.
    let all = call(
        &fx.tool("grep"),
        json!({"query": "outside", "include_hidden": true}),
    )
    .await;
    assert_eq!(all, "(no matches for `outside` under `.`)\n");
}

#[tokio::test]
async fn file_info_describes() {
    let fx = tree();
    let info = fx.tool("info");
    let out = call(&info, json!({"path": "src/main.rs"})).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..3],
        ["path: src/main.rs", "type: file", "size: 44 bytes"]
    );
    assert!(
        lines[3].starts_with("modified: 20") && lines[3].ends_with('Z'),
        "{out}"
    );
    assert_eq!(lines[4], "extension: .rs");
    assert_eq!(
        call(&info, json!({"path": "main-link.rs"}))
            .await
            .lines()
            .take(3)
            .collect::<Vec<_>>(),
        ["path: main-link.rs", "type: symlink", "target: src/main.rs"]
    );
    assert!(
        call(&info, json!({"path": "src"}))
            .await
            .contains("type: directory\n")
    );
    assert_eq!(
        call(&info, json!({"path": "nope"})).await,
        "error: `nope` does not exist"
    );
}

#[tokio::test]
async fn str_replace_counts_and_never_writes_on_failure() {
    let fx = tree();
    let rep = fx.tool("replace");
    fx.put("r.txt", "a-b a-b a-b\n");
    std::fs::set_permissions(fx.path("r.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let read = || std::fs::read_to_string(fx.path("r.txt")).unwrap();
    assert_eq!(
        call(
            &rep,
            json!({"path": "r.txt", "old": "a-b", "new": "x", "count": 2})
        )
        .await,
        "Replaced 2 occurrences in r.txt"
    );
    assert_eq!(read(), "x x a-b\n");
    assert_eq!(
        call(
            &rep,
            json!({"path": "r.txt", "old": "a-b", "new": "y", "expected_count": 1})
        )
        .await,
        "Replaced 1 occurrence in r.txt"
    );
    assert_eq!(read(), "x x y\n");
    assert_eq!(
        call(
            &rep,
            json!({"path": "r.txt", "old": "x", "new": "z", "expected_count": 1})
        )
        .await,
        "error: expected 1 match of `x` in `r.txt`, found 2; nothing was written"
    );
    assert_eq!(
        call(&rep, json!({"path": "r.txt", "old": "nope", "new": "z"})).await,
        "error: no match for `nope` in `r.txt`; nothing was written"
    );
    assert_eq!(read(), "x x y\n");
    assert_eq!(
        call(
            &rep,
            json!({"path": "r.txt", "old": r"(\w) (\w)", "new": "$2+$1", "regex": true})
        )
        .await,
        "Replaced 1 occurrence in r.txt"
    );
    assert_eq!(read(), "x+x y\n");
    let mode = std::fs::metadata(fx.path("r.txt"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "permissions kept");
    assert_eq!(
        call(&rep, json!({"path": "r.txt", "old": "", "new": "z"})).await,
        "error: invalid arguments for `str_replace`: at /old: \"\" is shorter than 1 character"
    );
    assert_eq!(
        call(
            &rep,
            json!({"path": "data.bin", "old": "needle", "new": "z"})
        )
        .await,
        "error: `data.bin` is a binary file (it has NUL bytes); nothing was written"
    );
    fx.put("latin1.txt", b"caf\xe9 needle\n");
    assert_eq!(
        call(
            &rep,
            json!({"path": "latin1.txt", "old": "needle", "new": "z"})
        )
        .await,
        "error: `latin1.txt` is not UTF-8 text (invalid byte at offset 3); nothing was written"
    );
    assert_eq!(
        call(
            &rep,
            json!({"path": "out/leak.rs", "old": "needle", "new": "z"})
        )
        .await,
        "error: refused `out/leak.rs`: the path leads outside the workspace through a symbolic link"
    );
    assert_eq!(
        std::fs::read_to_string(fx.top.join("outside/leak.rs")).unwrap(),
        "fn needle() {} // outside\n"
    );
}
