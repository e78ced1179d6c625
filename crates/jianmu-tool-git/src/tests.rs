//! The git tools on repositories made here with real history, and each hostile case:
//! hooks, configured programs and filters that would leave a marker, option-like
//! revisions, paths out of the workspace or through a symlink, big diffs paged.

use std::path::Path;

use jianmu_test_support::call;
use jianmu_tool_core::{ToolConfig, ToolHandle};
use serde_json::{Value, json};

use super::*;

fn sh(dir: &Path, script: &str) {
    let out = jianmu_process::std_command("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05Z")
        .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05Z")
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository with three commits on `main`.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sh(
        dir.path(),
        "git init -q -b main && git config user.name Ann && git config user.email ann@example.com \
         && printf 'one\\ntwo\\n' > a.txt && git add a.txt && git commit -qm 'first: add a' \
         && printf 'one\\n2\\n' > a.txt && mkdir src && echo 'fn main() {}' > src/main.rs \
         && git add -A && git commit -qm 'second: main.rs' \
         && echo three >> a.txt && git commit -qam 'third: three'",
    );
    dir
}

fn tool(dir: &Path, name: &str) -> ToolHandle {
    tool_with(dir, name, json!({}))
}

fn tool_with(dir: &Path, name: &str, settings: Value) -> ToolHandle {
    let config = ToolConfig::new(dir).with_settings(SETTINGS, settings);
    let registration = jianmu_tool_core::registrations()
        .find(|r| r.name == name)
        .expect("registered");
    (registration.build)(&config).expect("builds")
}

async fn run(dir: &Path, name: &str, args: Value) -> String {
    call(&tool(dir, name), args).await
}

#[tokio::test]
async fn reading_tools_answer_from_real_history() {
    let dir = repo();
    let d = dir.path();
    let log = run(d, "git_log", json!({})).await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(
        lines[0].contains("2024-01-02 Ann: third: three (HEAD -> main)"),
        "{log}"
    );
    assert!(lines[2].ends_with("Ann: first: add a"), "{log}");
    let two = run(d, "git_log", json!({"max_count": 2})).await;
    assert!(two.contains("more with skip=2"), "{two}");
    let rest = run(d, "git_log", json!({"max_count": 2, "skip": 2})).await;
    assert!(
        rest.contains("first: add a") && !rest.contains("third"),
        "{rest}"
    );
    let touched = run(d, "git_log", json!({"paths": ["src"]})).await;
    assert_eq!(touched.lines().count(), 1, "{touched}");
    let range = run(d, "git_log", json!({"revision": "HEAD~2..HEAD~1"})).await;
    assert!(
        range.contains("second") && range.lines().count() == 1,
        "{range}"
    );

    assert!(
        run(d, "git_status", json!({}))
            .await
            .contains("(no changes")
    );
    std::fs::write(d.join("a.txt"), "changed\n").unwrap();
    std::fs::write(d.join("new.txt"), "n\n").unwrap();
    let status = run(d, "git_status", json!({})).await;
    assert!(status.starts_with("## main\n"), "{status}");
    assert!(
        status.contains(" M a.txt") && status.contains("?? new.txt"),
        "{status}"
    );

    let diff = run(d, "git_diff", json!({})).await;
    assert!(
        diff.contains("-three\n") && diff.contains("+changed\n"),
        "{diff}"
    );
    let stat = run(d, "git_diff", json!({"stat": true})).await;
    assert!(stat.contains("a.txt | 4"), "{stat}");
    let between = run(
        d,
        "git_diff",
        json!({"from": "HEAD~2", "to": "HEAD", "paths": ["src"]}),
    )
    .await;
    assert!(
        between.contains("+fn main() {}") && !between.contains("a.txt"),
        "{between}"
    );
    assert_eq!(
        run(d, "git_diff", json!({"staged": true})).await,
        "(no differences)"
    );

    let show = run(d, "git_show", json!({"revision": "HEAD~1"})).await;
    assert!(
        show.contains("second: main.rs") && show.contains("+fn main() {}"),
        "{show}"
    );
    let file = run(d, "git_show", json!({"revision": "HEAD~2:a.txt"})).await;
    assert_eq!(file, "one\ntwo\n");
    std::fs::write(d.join("bin.dat"), b"\x89PNG\0\x1b[31m\0").unwrap();
    sh(d, "git add bin.dat && git commit -qm bin");
    let bin = run(d, "git_show", json!({"revision": "HEAD:bin.dat"})).await;
    assert_eq!(
        bin,
        "(`HEAD:bin.dat` is a binary file of 11 bytes; not shown)"
    );
    sh(
        d,
        "git reset -q --soft HEAD~1 && git rm -q --cached bin.dat && rm bin.dat",
    );

    let blame = run(
        d,
        "git_blame",
        json!({"path": "a.txt", "start_line": 2, "end_line": 3, "revision": "HEAD"}),
    )
    .await;
    let lines: Vec<&str> = blame.lines().collect();
    assert_eq!(lines.len(), 2, "{blame}");
    assert!(
        lines[0].contains("Ann 2024-01-02") && lines[0].ends_with(") 2"),
        "{blame}"
    );
    assert!(lines[1].ends_with(") three"), "{blame}");
}

#[tokio::test]
async fn writing_tools_stage_commit_branch_and_switch() {
    let dir = repo();
    let d = dir.path();
    std::fs::write(d.join("b.txt"), "b\n").unwrap();
    let added = run(d, "git_add", json!({"paths": ["b.txt"]})).await;
    assert!(added.contains("A  b.txt"), "{added}");
    let committed = run(
        d,
        "git_commit",
        json!({"message": "-add b, a message like an option"}),
    )
    .await;
    assert!(
        committed.contains("-add b, a message like an option"),
        "{committed}"
    );
    assert!(
        run(d, "git_log", json!({"max_count": 1}))
            .await
            .contains(": -add b")
    );

    assert!(
        run(
            d,
            "git_branch",
            json!({"create": "topic", "start_point": "HEAD~1"})
        )
        .await
        .contains("created branch `topic`")
    );
    let branches = run(d, "git_branch", json!({})).await;
    assert!(
        branches.contains("* main") && branches.contains("  topic"),
        "{branches}"
    );
    let switched = run(d, "git_checkout", json!({"target": "topic"})).await;
    assert!(switched.starts_with("## topic"), "{switched}");
    assert!(!d.join("b.txt").exists());

    std::fs::write(d.join("a.txt"), "scratch\n").unwrap();
    let restored = run(
        d,
        "git_checkout",
        json!({"target": "HEAD", "paths": ["a.txt"]}),
    )
    .await;
    assert!(!restored.contains("a.txt"), "{restored}");
    assert_eq!(
        std::fs::read_to_string(d.join("a.txt")).unwrap(),
        "one\n2\nthree\n"
    );

    std::fs::write(d.join("a.txt"), "again\n").unwrap();
    let all = run(
        d,
        "git_commit",
        json!({"message": "all of it", "all": true}),
    )
    .await;
    assert!(all.contains("all of it"), "{all}");
    assert!(
        run(d, "git_status", json!({}))
            .await
            .contains("(no changes")
    );
    let nothing = run(d, "git_commit", json!({"message": "empty"})).await;
    assert!(
        nothing.starts_with("error: ") && nothing.contains("nothing to commit"),
        "{nothing}"
    );
}

#[tokio::test]
async fn no_hook_config_program_or_filter_runs() {
    let dir = repo();
    let d = dir.path();
    let marker = d.join("MARKER");
    let m = marker.display();
    // A hook for every command that has one, and each program-running setting.
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "post-checkout",
        "prepare-commit-msg",
        "reference-transaction",
        "post-index-change",
    ] {
        let path = d.join(".git/hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\necho {hook} >> {m}\n")).unwrap();
        sh(d, &format!("chmod +x {}", path.display()));
    }
    sh(
        d,
        &format!(
            "git config core.fsmonitor 'echo fsmonitor >> {m}; false' \
             && git config core.pager 'echo pager >> {m}; cat' \
             && git config diff.external 'sh -c \"echo external >> {m}\"' \
             && git config diff.evil.textconv 'sh -c \"echo textconv >> {m}; cat $0\"' \
             && git config filter.evil.clean 'sh -c \"echo clean >> {m}; cat\"' \
             && git config filter.evil.smudge 'sh -c \"echo smudge >> {m}; cat\"' \
             && git config filter.evil.required true \
             && git config core.sshCommand 'echo ssh >> {m}' \
             && git config commit.gpgSign true && git config gpg.program 'sh -c \"echo gpg >> {m}\"' \
             && echo '*.txt filter=evil diff=evil' > .gitattributes"
        ),
    );
    // The index is older than the files, so status reads them (through a filter, if
    // one could run).
    std::fs::write(d.join("a.txt"), "edited\n").unwrap();
    sh(d, "touch -d 2020-01-01 .git/index");
    for (name, args) in [
        ("git_status", json!({})),
        ("git_diff", json!({})),
        ("git_diff", json!({"from": "HEAD~1"})),
        ("git_log", json!({"stat": true})),
        ("git_show", json!({})),
        ("git_blame", json!({"path": "a.txt"})),
        ("git_add", json!({"all": true})),
        ("git_commit", json!({"message": "m"})),
        ("git_branch", json!({"create": "b2"})),
        ("git_checkout", json!({"target": "b2"})),
        (
            "git_checkout",
            json!({"target": "HEAD~1", "paths": ["a.txt"]}),
        ),
    ] {
        let out = run(d, name, args.clone()).await;
        assert!(!out.starts_with("error: "), "{name} {args}: {out}");
        assert!(
            !marker.exists(),
            "{name} {args} ran: {}",
            std::fs::read_to_string(&marker).unwrap()
        );
    }
    // The filter really is configured: git itself runs it.
    sh(
        d,
        "git status --short >/dev/null; touch -d 2020-01-01 .git/index; echo x >> a.txt; git diff >/dev/null",
    );
    assert!(marker.exists(), "the hostile config is live");
}

#[tokio::test]
async fn option_like_values_and_paths_outside_are_refused() {
    let dir = repo();
    let d = dir.path();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), d.join("link")).unwrap();
    std::fs::write(outside.path().join("x.txt"), "x\n").unwrap();
    let target = d.join("OUT");
    for (name, args, expect) in [
        (
            "git_log",
            json!({"revision": format!("--output={}", target.display())}),
            "may not start with `-`",
        ),
        (
            "git_diff",
            json!({"from": "--output=OUT"}),
            "may not start with `-`",
        ),
        (
            "git_show",
            json!({"revision": "--output=OUT"}),
            "may not start with `-`",
        ),
        (
            "git_blame",
            json!({"path": "a.txt", "revision": "-L1,1"}),
            "may not start with `-`",
        ),
        (
            "git_checkout",
            json!({"target": "--orphan=x"}),
            "may not start with `-`",
        ),
        (
            "git_branch",
            json!({"create": "-D"}),
            "may not start with `-`",
        ),
        (
            "git_add",
            json!({"paths": ["--all"]}),
            "may not start with `-`",
        ),
        ("git_add", json!({"paths": ["../x"]}), "outside"),
        ("git_add", json!({"paths": ["/etc/passwd"]}), "outside"),
        (
            "git_add",
            json!({"paths": ["link/x.txt"]}),
            "goes through the symlink `link`",
        ),
        (
            "git_log",
            json!({"paths": ["link/x.txt"]}),
            "goes through the symlink",
        ),
        ("git_diff", json!({"paths": [":(top)a.txt"]}), ""),
    ] {
        let out = run(d, name, args.clone()).await;
        assert!(out.contains(expect), "{name} {args}: {out}");
        if !expect.is_empty() {
            assert!(out.starts_with("error: "), "{name} {args}: {out}");
        }
    }
    assert!(!target.exists() && !d.join("OUT").exists());
    // Pathspec magic is off: `:(top)a.txt` is a file name that does not exist.
    assert!(run(d, "git_status", json!({})).await.contains("?? link"));
    let add = run(d, "git_add", json!({"paths": [":(top)a.txt"]})).await;
    assert!(add.contains("did not match any files"), "{add}");

    // A configuration that is a device, not a file, neither hangs nor fills memory.
    let real = d.join(".git/config");
    std::fs::rename(&real, d.join(".git/config.real")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &real).unwrap();
    let out = tool_with(d, "git_status", json!({"timeout_secs": 2}));
    let out = call(&out, json!({})).await;
    assert!(out.starts_with("error: "), "{out}");
    std::fs::remove_file(&real).unwrap();
    std::fs::rename(d.join(".git/config.real"), &real).unwrap();

    // A `.git` that is a file (`gitdir:` anywhere) or missing is refused.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join(".git"),
        format!("gitdir: {}/.git\n", d.display()),
    )
    .unwrap();
    let out = run(other.path(), "git_log", json!({})).await;
    assert!(out.contains("is not a folder"), "{out}");
    let none = tempfile::tempdir().unwrap();
    let out = run(none.path(), "git_status", json!({})).await;
    assert!(out.contains("not a git repository"), "{out}");
}

#[tokio::test]
async fn big_diffs_come_a_page_at_a_time_and_reads_are_bounded() {
    let dir = repo();
    let d = dir.path();
    let body: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(d.join("a.txt"), &body).unwrap();
    let diff = tool(d, "git_diff");
    let first = call(&diff, json!({})).await;
    assert!(
        first.contains("(lines 1-2000 of 5008; read on with offset=2001)"),
        "{}",
        &first[first.len() - 200..]
    );
    let next = call(&diff, json!({"offset": 2001, "limit": 10})).await;
    assert_eq!(next.lines().count(), 11, "{next}");
    assert!(
        next.ends_with("(lines 2001-2010 of 5008; read on with offset=2011)\n"),
        "{next}"
    );
    let end = call(&diff, json!({"offset": 5000})).await;
    assert!(
        end.ends_with("(lines 5000-5008 of 5008)\n") && end.contains("+line 4999"),
        "{end}"
    );

    let small = tool_with(d, "git_diff", json!({"max_read": 1000}));
    let cut = call(&small, json!({})).await;
    assert!(cut.contains("over 1000 bytes and was cut there"), "{cut}");
    assert!(cut.len() < 1400, "{cut}");
    assert!(jianmu_test_support::running_in(d).is_empty());
}

#[tokio::test]
async fn commits_take_their_identity_from_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sh(d, "git init -q -b main && echo x > x.txt && git add x.txt");
    let named = tool_with(
        d,
        "git_commit",
        json!({"author_name": "Bot", "author_email": "bot@example.com"}),
    );
    let out = call(&named, json!({"message": "by settings"})).await;
    assert!(out.contains("by settings"), "{out}");
    let log = run(d, "git_log", json!({})).await;
    assert!(log.contains("Bot: by settings"), "{log}");
}

/// A git command stopped at its time limit while it holds the index lock leaves no
/// lock behind: it is asked to end and removes it itself, and the next add works.
#[tokio::test]
async fn a_timeout_leaves_no_index_lock() {
    let dir = repo();
    let d = dir.path();
    std::fs::create_dir(d.join("many")).unwrap();
    for i in 0..20_000 {
        std::fs::write(d.join(format!("many/f{i}")), format!("{i}\n")).unwrap();
    }
    let hurried = tool_with(d, "git_add", json!({"timeout_secs": 0.05}));
    let out = call(&hurried, json!({"all": true})).await;
    assert!(out.contains("did not finish within"), "{out}");
    assert!(
        !d.join(".git/index.lock").exists(),
        "the lock was left behind"
    );
    let out = run(d, "git_add", json!({"paths": ["a.txt"]})).await;
    assert!(!out.starts_with("error: "), "{out}");
}

/// Git reads nothing outside the workspace: a `commondir` or `alternates` naming
/// another folder and a linked `shallow` file are refused, naming the file, and a
/// configured `blame.ignoreRevsFile` is not read.
#[tokio::test]
async fn paths_git_would_follow_out_of_the_workspace_are_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = elsewhere.path().join("secret.txt");
    std::fs::write(&secret, "SECRET-line\n").unwrap();
    for (file, content) in [
        ("commondir", elsewhere.path().display().to_string()),
        (
            "objects/info/alternates",
            elsewhere.path().display().to_string(),
        ),
    ] {
        let dir = repo();
        std::fs::write(dir.path().join(".git").join(file), content).unwrap();
        let out = run(dir.path(), "git_log", json!({})).await;
        assert!(
            out.starts_with("error: ") && out.contains(file),
            "{file}: {out}"
        );
    }
    let dir = repo();
    std::os::unix::fs::symlink(&secret, dir.path().join(".git/shallow")).unwrap();
    let out = run(dir.path(), "git_log", json!({})).await;
    assert!(
        out.contains(".git/shallow") && !out.contains("SECRET"),
        "{out}"
    );

    let dir = repo();
    sh(
        dir.path(),
        &format!("git config blame.ignoreRevsFile {}", secret.display()),
    );
    let out = run(dir.path(), "git_blame", json!({"path": "a.txt"})).await;
    assert!(
        !out.contains("SECRET") && out.contains("blame.ignoreRevsFile"),
        "{out}"
    );
    // One inside the workspace is read as usual.
    sh(
        dir.path(),
        "git config --unset-all blame.ignoreRevsFile && : > .revs && git config blame.ignoreRevsFile .revs",
    );
    let out = run(dir.path(), "git_blame", json!({"path": "a.txt"})).await;
    assert!(out.contains("first: add a") || out.contains("Ann"), "{out}");
}

/// A page's hint names an argument the tool has: `offset` for diff and show,
/// `start_line` for blame (from where the page began), none that does not exist.
#[tokio::test]
async fn hints_name_arguments_the_tool_has() {
    let dir = repo();
    let d = dir.path();
    let blame = tool_with(d, "git_blame", json!({"max_lines": 1}));
    let out = call(&blame, json!({"path": "a.txt"})).await;
    assert!(
        out.contains("read on with start_line=2") && !out.contains("offset"),
        "{out}"
    );
    let out = call(&blame, json!({"path": "a.txt", "start_line": 2})).await;
    assert!(out.contains("read on with start_line=3"), "{out}");
    let log = tool_with(d, "git_log", json!({"max_lines": 1}));
    let out = call(&log, json!({})).await;
    assert!(!out.contains("offset="), "{out}");
    let show = tool_with(d, "git_show", json!({"max_lines": 1}));
    let out = call(&show, json!({})).await;
    assert!(out.contains("read on with offset=2"), "{out}");
}

#[tokio::test]
async fn no_nested_repository_filter_runs() {
    let dir = repo();
    let d = dir.path();
    let marker = d.join("MARKER");
    let m = marker.display();
    // A vendored repository with a filter of its own, in a file its configuration
    // includes only when it is the repository read (a listing from outside misses
    // it), recorded in the outer index as a gitlink, and a nested one inside it.
    sh(
        d,
        &format!(
            "mkdir -p vendor/inner && cd vendor/inner && git init -q && echo x > i.txt \
             && git config filter.deep.clean 'sh -c \"echo deep >> {m}; cat\"' \
             && echo '*.txt filter=deep' > .gitattributes && git add -A \
             && git -c user.name=a -c user.email=a@b commit -qm i && cd .. && git init -q \
             && git config -f .git/evil.inc filter.evil.clean 'sh -c \"echo clean >> {m}; cat\"' \
             && git config 'includeIf.gitdir:**/vendor/.git.path' evil.inc \
             && echo '*.txt filter=evil' > .gitattributes && echo v > v.txt \
             && git add -A 2>/dev/null && git -c user.name=a -c user.email=a@b commit -qm v \
             && cd .. && git add vendor 2>/dev/null && git commit -qm vendored \
             && touch -d 2020-01-01 vendor/.git/index vendor/inner/.git/index"
        ),
    );
    std::fs::remove_file(&marker).ok();
    for (name, args) in [
        ("git_status", json!({})),
        ("git_diff", json!({})),
        ("git_add", json!({"all": true})),
        ("git_commit", json!({"message": "m", "all": true})),
        ("git_checkout", json!({"target": "HEAD~1"})),
    ] {
        let out = run(d, name, args.clone()).await;
        assert!(
            !marker.exists(),
            "{name} {args} ran: {} ({out})",
            std::fs::read_to_string(&marker).unwrap()
        );
    }
    // Both filters really are live: git itself runs them when it reads the files.
    // (Renormalizing reads every file whatever the index's timestamps say; a plain
    // `git add -A` from the outside depends on racy-clean checks and may skip one.)
    sh(
        d,
        "git checkout -q main; git -C vendor add --renormalize . 2>/dev/null; \
         git -C vendor/inner add --renormalize . 2>/dev/null; true",
    );
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(ran.contains("clean") && ran.contains("deep"), "{ran:?}");
}

#[tokio::test]
async fn an_include_without_filters_and_a_nested_link_out() {
    let dir = repo();
    let d = dir.path();
    sh(
        d,
        "echo '[core]' > .git/extra.inc && git config include.path extra.inc",
    );
    let out = run(d, "git_status", json!({})).await;
    assert!(!out.starts_with("error: "), "{out}");
    // A gitlink whose folder is a link to a repository outside.
    let outside = tempfile::tempdir().unwrap();
    sh(
        outside.path(),
        "git init -q && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m o",
    );
    sh(
        d,
        &format!(
            "mkdir sub && cd sub && git init -q && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m s \
             && cd .. && git add sub 2>/dev/null && git commit -qm sub && rm -rf sub && ln -s {} sub",
            outside.path().display()
        ),
    );
    let out = run(d, "git_add", json!({"all": true})).await;
    assert!(
        out.contains("refused: the nested repository `sub` leads out of the workspace"),
        "{out}"
    );
}

#[test]
fn gitlinks_are_found_in_every_index_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sh(
        d,
        "git init -q && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m i \
         && mkdir -p vendor deep/er/lib && for p in vendor deep/er/lib; do \
         git -C $p init -q && git -C $p -c user.name=a -c user.email=a@b commit -q --allow-empty -m v; done \
         && for i in $(seq 1 40); do echo $i > f$i.txt; done && git add -A 2>/dev/null",
    );
    for version in [2, 3, 4] {
        sh(d, &format!("git update-index --index-version {version}"));
        if version == 3 {
            // An extended flag, so that version 3's longer entries are read.
            sh(d, "git update-index --skip-worktree f7.txt");
        }
        let mut found = crate::nested::gitlinks(&d.join(".git/index"), 20).unwrap();
        found.sort();
        assert_eq!(
            found,
            [
                std::path::PathBuf::from("deep/er/lib"),
                std::path::PathBuf::from("vendor")
            ],
            "version {version}"
        );
    }
    assert_eq!(crate::nested::gitlinks(&d.join("none"), 20), Ok(Vec::new()));
    std::fs::write(d.join("bad"), b"DIRC\0\0\0\x02\0\0\0\x05short").unwrap();
    assert_eq!(
        crate::nested::gitlinks(&d.join("bad"), 20),
        Err(crate::nested::Unreadable::Format)
    );
}
