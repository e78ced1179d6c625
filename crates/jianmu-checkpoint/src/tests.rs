//! Checkpoints on real folders: what is included, exact bytes and modes back, the
//! store readable by `git`, pruning, diffs, confinement, and damaged stores.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::*;

/// A temporary folder with a workspace `ws`, a store `store` and an `outside` folder.
struct Fixture {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    ws: PathBuf,
    store_dir: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().canonicalize().unwrap();
    for d in ["ws", "outside"] {
        fs::create_dir(top.join(d)).unwrap();
    }
    fs::write(top.join("outside/secret.txt"), "SECRET").unwrap();
    Fixture {
        ws: top.join("ws"),
        store_dir: top.join("store"),
        top,
        _tmp: tmp,
    }
}

impl Fixture {
    fn open(&self) -> Store {
        self.open_with(Settings::default(), &[])
    }

    fn open_with(&self, settings: Settings, exclude: &[PathBuf]) -> Store {
        Store::open(&self.store_dir, &self.ws, exclude, settings).unwrap()
    }

    fn write(&self, rel: &str, content: &str) {
        let path = self.ws.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn chmod(&self, rel: &str, mode: u32) {
        fs::set_permissions(self.ws.join(rel), fs::Permissions::from_mode(mode)).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.ws.join(rel)).unwrap()
    }

    fn mode(&self, rel: &str) -> u32 {
        fs::symlink_metadata(self.ws.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// Everything under the workspace: kind, mode and content of each path.
    fn state(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let root = fs::symlink_metadata(&self.ws).unwrap().permissions().mode() & 0o7777;
        out.insert(".".to_owned(), format!("dir {root:o}"));
        collect(&self.ws, "", &mut out);
        out
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.store_dir, &self.top, args)
    }
}

fn collect(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let rel = format!("{prefix}{}", name.to_string_lossy());
        let meta = fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        let what = if meta.file_type().is_symlink() {
            format!("link -> {}", fs::read_link(&path).unwrap().display())
        } else if meta.is_dir() {
            collect(&path, &format!("{rel}/"), out);
            format!("dir {mode:o}")
        } else {
            format!("file {mode:o} {:?}", fs::read(&path).unwrap())
        };
        out.insert(rel, what);
    }
}

/// Runs the real `git` on the store, reading no configuration of this machine.
fn git(store: &Path, home: &Path, args: &[&str]) -> String {
    let out = jianmu_process::std_command("git")
        .arg(format!("--git-dir={}", store.display()))
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", home)
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn created(snap: &Snapshot) -> Checkpoint {
    snap.created.clone().expect("a checkpoint was made")
}

/// The paths a checkpoint holds, with their kinds.
fn paths_of(store: &Store, cp: &Checkpoint) -> Vec<String> {
    let (m, _) = manifest::load(&store.objects, &Oid::from_hex(&cp.commit).unwrap()).unwrap();
    m.nodes
        .iter()
        .map(|(p, n)| {
            let kind = match n {
                manifest::Node::File { .. } => "file",
                manifest::Node::Link { .. } => "link",
                manifest::Node::Dir { .. } => "dir",
            };
            format!("{kind} {p}")
        })
        .collect()
}

#[test]
fn what_a_snapshot_includes() {
    let f = fixture();
    f.write("a.txt", "a");
    f.write("src/main.rs", "fn main() {}");
    f.write(".hidden", "h");
    f.write("debug.log", "ignored by the root .gitignore");
    f.write("build/out.o", "ignored folder");
    f.write(".gitignore", "*.log\nbuild/\n");
    f.write("sub/.gitignore", "local.txt\n");
    f.write("sub/local.txt", "ignored by a nested .gitignore");
    f.write("sub/kept.txt", "k");
    f.write("sub/jianmu.toml", "only the root one is left out");
    f.write("jianmu.toml", "settings");
    f.write(".jianmu/out.txt", "jianmu's own");
    f.write(".git/config", "the user's repository");
    f.write(".git/info/exclude", "a.txt\n");
    f.write("vendor/lib/.git", "gitdir: elsewhere");
    f.write("vendor/lib/code.c", "int x;");
    f.write("private/key", "excluded");
    fs::create_dir_all(f.ws.join("empty/inner")).unwrap();
    symlink("a.txt", f.ws.join("link")).unwrap();
    symlink("/etc/passwd", f.ws.join("out-link")).unwrap();
    let store = f.open_with(Settings::default(), &[f.ws.join("private")]);
    let cp = created(&store.snapshot("first").unwrap());
    assert_eq!(
        paths_of(&store, &cp),
        [
            "file .gitignore",
            "file .hidden",
            "file a.txt",
            "dir empty",
            "dir empty/inner",
            "link link",
            "link out-link",
            "dir src",
            "file src/main.rs",
            "dir sub",
            "file sub/.gitignore",
            "file sub/jianmu.toml",
            "file sub/kept.txt",
            "dir vendor",
            "dir vendor/lib",
            "file vendor/lib/code.c",
        ]
    );
    assert_eq!(cp.files, 10);
    assert_eq!(cp.id, cp.commit[..12]);
    assert_eq!(cp.label, "first");
    // A link is stored as its target, never followed.
    assert_eq!(
        f.git(&[
            "cat-file",
            "-p",
            &format!("{}:workspace/out-link", cp.commit)
        ]),
        "/etc/passwd"
    );
    assert_eq!(
        f.git(&["ls-tree", &format!("{}:workspace", cp.commit)])
            .lines()
            .find(|l| l.ends_with("\tout-link"))
            .unwrap()
            .split(' ')
            .next(),
        Some("120000")
    );
}

#[test]
fn git_reads_the_store() {
    let f = fixture();
    f.write("a.txt", "one\n");
    f.write("dir/b.txt", "b\n");
    f.chmod("a.txt", 0o600);
    fs::create_dir(f.ws.join("void")).unwrap();
    let store = f.open();
    let one = created(&store.snapshot("before bash").unwrap());
    f.write("a.txt", "two\n");
    f.write("c.sh", "#!/bin/sh\n");
    f.chmod("c.sh", 0o755);
    let two = created(&store.snapshot("before edit").unwrap());

    f.git(&["fsck", "--strict", "--no-dangling"]);
    let log = f.git(&["log", "--all", "--format=%H %an <%ae> %s"]);
    assert!(log.contains(&format!(
        "{} jianmu <jianmu@localhost> before bash",
        one.commit
    )));
    assert!(log.contains(&format!(
        "{} jianmu <jianmu@localhost> before edit",
        two.commit
    )));
    // HEAD is the newest checkpoint, so a plain `git log` works too.
    assert_eq!(f.git(&["log", "--format=%H"]).trim(), two.commit);
    assert_eq!(
        f.git(&["for-each-ref", "--format=%(refname) %(objectname)"]),
        format!(
            "refs/checkpoints/{} {}\nrefs/checkpoints/{} {}\n",
            one.id, one.commit, two.id, two.commit
        )
        .lines()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
    );
    assert_eq!(
        f.git(&["cat-file", "-p", &format!("{}:workspace/a.txt", one.commit)]),
        "one\n"
    );
    let root = f.git(&["ls-tree", &one.commit]);
    let names: Vec<&str> = root
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap())
        .collect();
    assert_eq!(names, ["meta", "workspace"]);
    let tree = f.git(&["diff-tree", "-r", "--name-status", &one.commit, &two.commit]);
    assert_eq!(tree, "M\tmeta\nM\tworkspace/a.txt\nA\tworkspace/c.sh\n");
    let meta: serde_json::Value =
        serde_json::from_str(&f.git(&["cat-file", "-p", &format!("{}:meta", one.commit)])).unwrap();
    assert_eq!(meta["label"], "before bash");
    assert_eq!(meta["modes"]["a.txt"], "600");
    assert_eq!(meta["empty"], serde_json::json!(["void"]));
    assert_eq!(meta["dirs"]["void"], "755");
    assert!(meta["time"].as_u64().unwrap() > 1_600_000_000);
}

#[test]
fn exact_bytes_modes_links_and_empty_folders_come_back() {
    let f = fixture();
    f.write("secret.txt", "0600");
    f.chmod("secret.txt", 0o600);
    f.write("run.sh", "#!/bin/sh\necho hi\n");
    f.chmod("run.sh", 0o755);
    f.write("readonly.txt", "0444");
    f.chmod("readonly.txt", 0o444);
    f.write("private/inner.txt", "in a 0700 folder");
    f.chmod("private", 0o700);
    fs::create_dir_all(f.ws.join("empty/deeper")).unwrap();
    f.chmod("empty", 0o750);
    f.write("bin.dat", "");
    fs::write(f.ws.join("bin.dat"), [0u8, 159, 146, 150, 255, 0, 1]).unwrap();
    symlink("run.sh", f.ws.join("link")).unwrap();
    symlink("../outside/secret.txt", f.ws.join("escape")).unwrap();
    let before = f.state();
    let store = f.open();
    let cp = created(&store.snapshot("start").unwrap());

    // Break everything.
    f.chmod("secret.txt", 0o644);
    f.chmod("run.sh", 0o644);
    f.chmod("readonly.txt", 0o644);
    f.write("readonly.txt", "changed");
    fs::remove_dir_all(f.ws.join("private")).unwrap();
    fs::remove_dir_all(f.ws.join("empty")).unwrap();
    fs::write(f.ws.join("empty"), "a file where a folder was").unwrap();
    fs::write(f.ws.join("bin.dat"), "text now").unwrap();
    fs::remove_file(f.ws.join("link")).unwrap();
    fs::write(f.ws.join("link"), "a file where a link was").unwrap();
    fs::remove_file(f.ws.join("escape")).unwrap();
    symlink("elsewhere", f.ws.join("escape")).unwrap();
    f.write("new/deep/file.txt", "added");
    symlink("a", f.ws.join("new-link")).unwrap();
    let broken = f.state();

    let restored = store.restore(&cp.id, false).unwrap();
    assert_eq!(f.state(), before);
    assert!(!restored.dry_run);
    assert!(restored.left.is_empty(), "{:?}", restored.left);
    assert!(restored.removed.contains(&"new/deep/file.txt".to_owned()));
    assert!(restored.removed.contains(&"new".to_owned()));
    assert!(restored.written.contains(&"private/inner.txt".to_owned()));
    assert_eq!(f.mode("secret.txt"), 0o600);
    assert_eq!(f.mode("private"), 0o700);
    assert_eq!(f.mode("empty"), 0o750);

    // The restore made a checkpoint first: restoring it brings the broken state back
    // exactly, and restoring that restore again brings the start back.
    let undo = restored.undo.unwrap();
    assert_eq!(
        store.list().unwrap()[0].label,
        format!("before restoring {}", cp.id)
    );
    let again = store.restore(&undo, false).unwrap();
    assert_eq!(f.state(), broken);
    store.restore(&again.undo.unwrap(), false).unwrap();
    assert_eq!(f.state(), before);
}

#[test]
fn unchanged_workspace_makes_no_checkpoint() {
    let f = fixture();
    f.write("a.txt", "a");
    let store = f.open();
    let first = created(&store.snapshot("one").unwrap());
    let again = store.snapshot("two").unwrap();
    assert_eq!(again.created, None);
    assert_eq!(again.unchanged.as_deref(), Some(first.id.as_str()));
    // A mode is a change, though git's tree does not see it.
    f.chmod("a.txt", 0o600);
    let moded = created(&store.snapshot("three").unwrap());
    assert_ne!(moded.id, first.id);
    // The same state as an older checkpoint, in the same second, is a new commit.
    f.chmod("a.txt", 0o644);
    let back = created(&store.snapshot("one").unwrap());
    assert_ne!(back.commit, first.commit);
    assert_eq!(store.list().unwrap().len(), 3);
}

#[test]
fn unchanged_files_are_not_read_again() {
    let f = fixture();
    for i in 0..50 {
        f.write(&format!("d{}/f{i}.txt", i % 5), &format!("file {i}"));
    }
    let store = f.open();
    store.inner.lock().unwrap().racy_ns = 0;
    created(&store.snapshot("all").unwrap());
    assert_eq!(store.inner.lock().unwrap().hashed, 50);
    f.write("d3/f3.txt", "changed, and longer");
    let second = created(&store.snapshot("one changed").unwrap());
    assert_eq!(store.inner.lock().unwrap().hashed, 1);
    assert_eq!(store.snapshot("none").unwrap().unchanged, Some(second.id));
    assert_eq!(store.inner.lock().unwrap().hashed, 0);
    // A second store object reads the cache file back.
    drop(store);
    let store = f.open();
    store.inner.lock().unwrap().racy_ns = 0;
    store.snapshot("reopened").unwrap();
    assert_eq!(store.inner.lock().unwrap().hashed, 0);
}

#[test]
fn a_change_right_after_a_snapshot_is_seen() {
    let f = fixture();
    f.write("a.txt", "aaaa");
    let store = f.open();
    let one = created(&store.snapshot("one").unwrap());
    // Same size, likely the same timestamp tick: the racy check still rereads it.
    f.write("a.txt", "bbbb");
    let two = created(&store.snapshot("two").unwrap());
    let diff = store.diff(&one.id, Some(&two.id), None, 10_000).unwrap();
    assert_eq!(diff.changes.len(), 1);
    assert!(
        diff.text
            .contains("-aaaa\n\\ No newline at end of file\n+bbbb\n")
    );
}

#[test]
fn diff_kinds_and_text() {
    let f = fixture();
    f.write("keep.txt", "same\n");
    f.write("mod.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    f.write("gone.txt", "bye\n");
    f.write("mode.sh", "echo\n");
    f.write("type", "was a file\n");
    fs::write(f.ws.join("bin.dat"), [0u8, 1, 2, 3]).unwrap();
    symlink("old-target", f.ws.join("link")).unwrap();
    fs::create_dir(f.ws.join("empty-gone")).unwrap();
    let store = f.open();
    let cp = created(&store.snapshot("base").unwrap());
    f.write("mod.txt", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n");
    fs::remove_file(f.ws.join("gone.txt")).unwrap();
    f.write("new.txt", "hello\n");
    f.chmod("mode.sh", 0o755);
    fs::remove_file(f.ws.join("type")).unwrap();
    symlink("keep.txt", f.ws.join("type")).unwrap();
    fs::write(f.ws.join("bin.dat"), [0u8, 1, 2, 4]).unwrap();
    fs::remove_file(f.ws.join("link")).unwrap();
    symlink("new-target", f.ws.join("link")).unwrap();
    fs::remove_dir(f.ws.join("empty-gone")).unwrap();
    fs::create_dir(f.ws.join("empty-new")).unwrap();

    let diff = store.diff(&cp.id, None, None, 1 << 20).unwrap();
    let kinds: Vec<(String, ChangeKind)> = diff
        .changes
        .iter()
        .map(|c| (c.path.clone(), c.kind))
        .collect();
    use ChangeKind::*;
    assert_eq!(
        kinds,
        [
            ("bin.dat".to_owned(), Modified),
            ("empty-gone".to_owned(), Deleted),
            ("empty-new".to_owned(), Added),
            ("gone.txt".to_owned(), Deleted),
            ("link".to_owned(), Modified),
            ("mod.txt".to_owned(), Modified),
            ("mode.sh".to_owned(), ModeChanged),
            ("new.txt".to_owned(), Added),
            ("type".to_owned(), TypeChanged),
        ]
    );
    let t = &diff.text;
    assert!(t.contains("diff --git a/bin.dat b/bin.dat\nindex "));
    assert!(t.contains("Binary files a/bin.dat and b/bin.dat differ\n"));
    assert!(t.contains(
        "--- a/mod.txt\n+++ b/mod.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
    ));
    assert!(t.contains("diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n"));
    assert!(t.contains("--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"));
    assert!(t.contains("new file mode 100644\n"));
    assert!(t.contains("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"));
    assert!(t.contains("diff --git a/mode.sh b/mode.sh\nold mode 100644\nnew mode 100755\n"));
    assert!(t.contains("-old-target\n\\ No newline at end of file\n+new-target\n"));
    assert!(t.contains("deleted file mode 100644\n"));
    assert!(t.contains("new file mode 120000\n"));
    assert!(t.contains("diff --git a/empty-new b/empty-new\nnew directory mode 040755\n"));
    assert!(t.contains("deleted directory mode 040755\n"));
    assert!(!t.contains("keep.txt b/keep.txt"));
    assert_eq!(diff.cut, None);

    // Only at or under a path.
    let one = store
        .diff(&cp.id, None, Some("./mod.txt"), 1 << 20)
        .unwrap();
    assert_eq!(one.changes.len(), 1);
    assert!(one.text.starts_with("diff --git a/mod.txt b/mod.txt\n"));
    let abs = f.ws.join("empty-new");
    let by_abs = store
        .diff(&cp.id, None, Some(abs.to_str().unwrap()), 1 << 20)
        .unwrap();
    assert_eq!(by_abs.changes.len(), 1);
    assert!(matches!(
        store.diff(&cp.id, None, Some("../outside"), 100),
        Err(CheckpointError::InvalidPath { .. })
    ));

    // Between two checkpoints, the same as to the workspace.
    let now = created(&store.snapshot("after").unwrap());
    let between = store.diff(&cp.id, Some(&now.id), None, 1 << 20).unwrap();
    assert_eq!(between, diff);
    let reverse = store
        .diff(&now.id, Some(&cp.id), Some("new.txt"), 1 << 20)
        .unwrap();
    assert_eq!(reverse.changes[0].kind, Deleted);
}

#[test]
fn diff_text_is_cut_at_a_boundary_and_says_how_much() {
    let f = fixture();
    f.write("a.txt", "");
    let store = f.open();
    let cp = created(&store.snapshot("empty").unwrap());
    f.write("a.txt", &"ééééé\n".repeat(100));
    f.write("b.txt", &"ü".repeat(1000));
    let full = store.diff(&cp.id, None, None, usize::MAX).unwrap();
    assert_eq!(full.cut, None);
    for max in [0, 1, 50, 101, 1000, full.text.len() - 1] {
        let d = store.diff(&cp.id, None, None, max).unwrap();
        assert!(d.text.len() <= max);
        assert_eq!(d.text.len() + d.cut.unwrap(), full.text.len());
        assert!(full.text.starts_with(&d.text));
        assert_eq!(d.changes, full.changes);
    }
}

#[test]
fn restore_never_writes_through_links_or_outside() {
    let f = fixture();
    f.write("d/f.txt", "inside");
    f.write("g/h.txt", "in g");
    let store = f.open();
    let cp = created(&store.snapshot("start").unwrap());
    // The folder `d` is now a link to a folder outside; `g` a link inside.
    fs::remove_dir_all(f.ws.join("d")).unwrap();
    symlink(f.top.join("outside"), f.ws.join("d")).unwrap();
    fs::remove_dir_all(f.ws.join("g")).unwrap();
    fs::create_dir(f.ws.join("real")).unwrap();
    symlink("real", f.ws.join("g")).unwrap();
    let restored = store.restore(&cp.id, false).unwrap();
    assert!(restored.left.is_empty(), "{:?}", restored.left);
    assert!(!f.top.join("outside/f.txt").exists());
    assert_eq!(
        fs::read_to_string(f.top.join("outside/secret.txt")).unwrap(),
        "SECRET"
    );
    assert!(fs::symlink_metadata(f.ws.join("d")).unwrap().is_dir());
    assert_eq!(f.read("d/f.txt"), "inside");
    assert!(fs::symlink_metadata(f.ws.join("g")).unwrap().is_dir());
    assert!(!f.ws.join("real/h.txt").exists());

    // A link that snapshots leave out (ignored) stays, and what lies under it is left
    // and said, not written through it.
    f.write(".gitignore", "d\n");
    let cp2 = created(&store.snapshot("with ignore").unwrap());
    fs::remove_dir_all(f.ws.join("d")).unwrap();
    symlink(f.top.join("outside"), f.ws.join("d")).unwrap();
    f.write(".gitignore", "d\n");
    let restored = store.restore(&cp.id, false).unwrap();
    assert!(!f.top.join("outside/f.txt").exists());
    assert!(
        fs::symlink_metadata(f.ws.join("d"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let left: Vec<&str> = restored.left.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(left, ["d", "d/f.txt"], "{:?}", restored.left);
    assert!(restored.left[0].why.contains("ignored"));
    drop(cp2);
}

#[test]
fn a_file_swapped_for_a_link_is_not_read() {
    let f = fixture();
    f.write("a.txt", "a");
    symlink(f.top.join("outside/secret.txt"), f.ws.join("swapped")).unwrap();
    let store = f.open();
    let mut inner = store.inner.lock().unwrap();
    let mut buf = Vec::new();
    let mut added = 0;
    // What the walk would do had it seen a regular file at `swapped`.
    let got = scan::read_file(
        &store,
        &mut inner.known,
        "swapped",
        true,
        &mut buf,
        &mut added,
    )
    .unwrap();
    assert_eq!(
        got,
        Err("unreadable: it became a symbolic link while the snapshot ran".to_owned())
    );
    assert_eq!(added, 0);
    let got = scan::read_file(
        &store,
        &mut inner.known,
        "../outside/secret.txt",
        true,
        &mut buf,
        &mut added,
    )
    .unwrap();
    assert!(got.is_err());
    drop(inner);
    let cp = created(&store.snapshot("links").unwrap());
    let blob = f.git(&[
        "cat-file",
        "-p",
        &format!("{}:workspace/swapped", cp.commit),
    ]);
    assert_eq!(blob, f.top.join("outside/secret.txt").to_str().unwrap());
}

#[test]
fn ignored_excluded_and_skipped_paths_are_left_alone() {
    let f = fixture();
    f.write("out.txt", "v1");
    f.write("keep/me.txt", "tracked");
    f.write("private/key", "excluded v1");
    fs::write(f.ws.join("big.bin"), vec![7u8; 2000]).unwrap();
    let settings = Settings {
        max_file_bytes: 1000,
        ..Settings::default()
    };
    let store = f.open_with(settings, &[f.ws.join("private")]);
    let snap = store.snapshot("start").unwrap();
    assert_eq!(
        snap.skipped,
        [Skipped::new("big.bin", "larger than 1000 bytes")]
    );
    let cp = created(&snap);
    f.write("out.txt", "v2");
    f.write(".gitignore", "out.txt\nkeep/scratch.log\n");
    f.write("keep/scratch.log", "ignored inside a folder");
    f.write("private/key", "excluded v2");
    fs::write(f.ws.join("big.bin"), vec![8u8; 3000]).unwrap();
    let restored = store.restore(&cp.id, false).unwrap();
    assert_eq!(f.read("out.txt"), "v2");
    assert_eq!(f.read("private/key"), "excluded v2");
    assert_eq!(fs::read(f.ws.join("big.bin")).unwrap(), vec![8u8; 3000]);
    assert_eq!(f.read("keep/scratch.log"), "ignored inside a folder");
    assert!(!f.ws.join(".gitignore").exists());
    let left: BTreeMap<&str, &str> = restored
        .left
        .iter()
        .map(|s| (s.path.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(
        left,
        BTreeMap::from([
            (
                "out.txt",
                "left as it is: snapshots leave it out now (ignored)"
            ),
            (
                "big.bin",
                "the checkpoint could not store it: larger than 1000 bytes"
            ),
        ])
    );
    // A folder the checkpoint lacks but that holds an ignored file stays, and is said.
    f.write(".gitignore", "*.log\n");
    f.write("extra/a.txt", "a");
    f.write("extra/b.log", "ignored");
    let cp2 = created(&store.snapshot("ignore logs").unwrap());
    let restored = store.restore(&cp.id, false).unwrap();
    assert!(!f.ws.join("extra/a.txt").exists());
    assert_eq!(f.read("extra/b.log"), "ignored");
    assert!(
        restored
            .left
            .iter()
            .any(|s| s.path == "extra" && s.why.contains("leave out")),
        "{:?}",
        restored.left
    );
    drop(cp2);
}

#[test]
fn dry_run_changes_nothing_and_says_what_would_change() {
    let f = fixture();
    f.write("a.txt", "a");
    f.write("file-then-dir", "file");
    let store = f.open();
    let cp = created(&store.snapshot("start").unwrap());
    f.write("a.txt", "changed");
    f.write("b/c.txt", "new");
    fs::remove_file(f.ws.join("file-then-dir")).unwrap();
    f.write("file-then-dir/x", "now a folder");
    let before = f.state();
    let count = store.list().unwrap().len();
    let dry = store.restore(&cp.id, true).unwrap();
    assert_eq!(f.state(), before);
    assert_eq!(store.list().unwrap().len(), count);
    assert!(dry.dry_run);
    assert_eq!(dry.undo, None);
    let real = store.restore(&cp.id, false).unwrap();
    assert_eq!(dry.written, real.written);
    assert_eq!(dry.removed, real.removed);
    assert_eq!(dry.left, real.left);
    assert_eq!(real.written, ["a.txt", "file-then-dir"]);
    assert_eq!(
        real.removed,
        ["file-then-dir/x", "file-then-dir", "b/c.txt", "b"]
    );
}

#[test]
fn sockets_and_fifos_are_skipped_and_said() {
    let f = fixture();
    f.write("a.txt", "a");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.ws.join("pipe").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(f.ws.join("sock")).unwrap();
    let store = f.open();
    let snap = store.snapshot("special").unwrap();
    assert_eq!(
        snap.skipped,
        [
            Skipped::new("pipe", "a fifo"),
            Skipped::new("sock", "a socket")
        ]
    );
    // A restore leaves them where they are.
    let restored = store.restore(&created(&snap).id, false).unwrap();
    assert!(f.ws.join("pipe").exists() && f.ws.join("sock").exists());
    assert_eq!(restored.left.len(), 2);
}

#[test]
fn the_file_limit_skips_the_rest_and_a_restore_keeps_what_it_lacks() {
    let f = fixture();
    for i in 0..10 {
        f.write(&format!("f{i}.txt"), "x");
    }
    let store = f.open_with(
        Settings {
            max_files: 4,
            ..Settings::default()
        },
        &[],
    );
    let snap = store.snapshot("limited").unwrap();
    assert_eq!(snap.skipped.len(), 6);
    assert!(
        snap.skipped
            .iter()
            .all(|s| s.why == "over the 4-file limit")
    );
    let cp = created(&snap);
    assert_eq!(cp.files, 4);
    let restored = store.restore(&cp.id, false).unwrap();
    assert!(restored.removed.is_empty());
    assert!(f.ws.join("f9.txt").exists());
    assert!(restored.left.iter().any(|s| s.why.contains("partial")));
}

#[test]
fn big_files_are_streamed_and_come_back() {
    let f = fixture();
    let big: Vec<u8> = (0..3_000_000u64).map(|i| (i * 7919 % 251) as u8).collect();
    fs::write(f.ws.join("big.bin"), &big).unwrap();
    let sparse = fs::File::create(f.ws.join("huge.bin")).unwrap();
    sparse.set_len(9 << 20).unwrap();
    let store = f.open();
    let snap = store.snapshot("big").unwrap();
    assert_eq!(
        snap.skipped,
        [Skipped::new("huge.bin", "larger than 8 MiB")]
    );
    let cp = created(&snap);
    assert_eq!(cp.bytes, 3_000_000);
    fs::write(f.ws.join("big.bin"), "small now").unwrap();
    store.restore(&cp.id, false).unwrap();
    assert_eq!(fs::read(f.ws.join("big.bin")).unwrap(), big);
    f.git(&["fsck", "--strict", "--no-dangling"]);
}

#[test]
fn prune_keeps_the_newest_within_the_count() {
    let f = fixture();
    let store = f.open_with(
        Settings {
            max_checkpoints: 3,
            ..Settings::default()
        },
        &[],
    );
    let mut made = Vec::new();
    let mut pruned = Vec::new();
    for i in 0..6 {
        f.write("a.txt", &format!("version {i}"));
        let snap = store.snapshot(&format!("v{i}")).unwrap();
        pruned.extend(snap.pruned.clone());
        made.push(created(&snap));
    }
    let ids: Vec<String> = store.list().unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, [made[5].id.as_str(), &made[4].id, &made[3].id]);
    assert_eq!(pruned, [made[0].id.as_str(), &made[1].id, &made[2].id]);
    // Their objects are gone, the rest intact.
    let exists = |what: &str| {
        jianmu_process::std_command("git")
            .arg(format!("--git-dir={}", f.store_dir.display()))
            .args(["cat-file", "-e", what])
            .status()
            .unwrap()
            .success()
    };
    assert!(!exists(&made[0].commit));
    assert!(exists(&made[3].commit));
    let blob = object::hash(object::Kind::Blob, b"version 0");
    assert!(!store.objects.exists(&blob));
    f.git(&["fsck", "--strict", "--no-dangling"]);
    assert_eq!(
        f.git(&["for-each-ref", "--format=%(refname)"])
            .lines()
            .count(),
        3
    );
    assert!(matches!(
        store.diff(&made[0].id, None, None, 100),
        Err(CheckpointError::UnknownCheckpoint { .. })
    ));
}

#[test]
fn prune_by_size_never_removes_the_newest() {
    let f = fixture();
    let store = f.open_with(
        Settings {
            max_store_bytes: 1,
            ..Settings::default()
        },
        &[],
    );
    f.write("a.txt", "one");
    let one = created(&store.snapshot("one").unwrap());
    f.write("a.txt", "two");
    let snap = store.snapshot("two").unwrap();
    assert_eq!(snap.pruned, [one.id]);
    let two = created(&snap);
    assert_eq!(store.list().unwrap(), std::slice::from_ref(&two));
    let index = index::Index::load(&store).unwrap();
    let mut on_disk = 0;
    for sub in fs::read_dir(f.store_dir.join("objects")).unwrap() {
        let sub = sub.unwrap();
        if sub.file_name().len() == 2 {
            for o in fs::read_dir(sub.path()).unwrap() {
                on_disk += o.unwrap().metadata().unwrap().len();
            }
        }
    }
    assert_eq!(index.header.store_bytes, on_disk);
    f.git(&["fsck", "--strict", "--no-dangling"]);
    // Restoring the one left keeps it.
    let restored = store.restore(&two.id, true).unwrap();
    assert!(restored.written.is_empty());
}

#[test]
fn unknown_and_ambiguous_ids() {
    let f = fixture();
    let store = f.open();
    let err = store.diff("abcd", None, None, 10).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no checkpoint `abcd` (there are none yet); `checkpoint_list` shows them"
    );
    f.write("a.txt", "a");
    let cp = created(&store.snapshot("one").unwrap());
    let err = store.restore("zz", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no checkpoint `zz` (the newest: {}); `checkpoint_list` shows them",
            cp.id
        )
    );
    // Full commit ids, short ids and prefixes all work; case does not matter.
    for id in [
        &cp.commit[..],
        &cp.id[..],
        &cp.id[..4],
        &cp.id.to_uppercase()[..],
    ] {
        assert!(store.diff(id, None, None, 10).is_ok(), "{id}");
    }
    let record = |commit: &str| index::Record {
        id: commit[..12].to_owned(),
        commit: commit.to_owned(),
        time: 0,
        label: String::new(),
        files: 0,
        bytes: 0,
        tree: String::new(),
        state: String::new(),
        seq: 0,
    };
    let fake = index::Index {
        header: index::Header::default(),
        records: vec![
            record("abcd111111111111111111111111111111111111"),
            record("abcd222222222222222222222222222222222222"),
        ],
    };
    let err = store.resolve(&fake, "abcd").unwrap_err();
    assert_eq!(
        err.to_string(),
        "checkpoint id `abcd` is ambiguous: abcd22222222, abcd11111111; give more characters"
    );
    assert_eq!(store.resolve(&fake, "abcd1").unwrap().id, "abcd11111111");
}

#[test]
fn a_damaged_store_gives_errors_not_panics() {
    let f = fixture();
    f.write("a.txt", "a\n");
    f.write("d/b.txt", "b\n");
    symlink("a.txt", f.ws.join("l")).unwrap();
    let store = f.open();
    let cp = created(&store.snapshot("one").unwrap());
    let mut objects = Vec::new();
    for sub in fs::read_dir(f.store_dir.join("objects")).unwrap() {
        let sub = sub.unwrap();
        if sub.file_name().len() == 2 {
            for o in fs::read_dir(sub.path()).unwrap() {
                objects.push(o.unwrap().path());
            }
        }
    }
    assert!(objects.len() >= 7);
    let garbage: [&[u8]; 4] = [
        b"",
        b"not zlib at all",
        &[0x78, 0x9c, 0xff, 0x00],
        &[0x78, 0x01],
    ];
    for path in &objects {
        let good = fs::read(path).unwrap();
        let mut perms = fs::metadata(path).unwrap().permissions();
        perms.set_mode(0o644);
        fs::set_permissions(path, perms).unwrap();
        let mut variants: Vec<Vec<u8>> = garbage.iter().map(|g| g.to_vec()).collect();
        variants.push(good[..good.len() / 2].to_vec());
        // A valid object of another content under this name.
        variants.push(compress(b"blob 3\0xyz"));
        variants.push(compress(b"tree 5\0junk!"));
        variants.push(compress(b"commit 99999999999999\0"));
        for bad in variants {
            fs::write(path, &bad).unwrap();
            let _ = store.diff(&cp.id, None, None, 1000);
            let restored = store.restore(&cp.id, true);
            if let Err(e) = &restored {
                let text = e.to_string();
                assert!(!text.is_empty() && !text.ends_with('.'), "{text}");
            }
        }
        fs::write(path, &good).unwrap();
    }
    assert!(store.diff(&cp.id, None, None, 1000).is_ok());
    // A corrupt tree names the object.
    let tree = f.git(&["rev-parse", &format!("{}:workspace", cp.commit)]);
    let tree_path = f
        .store_dir
        .join("objects")
        .join(&tree[..2])
        .join(tree[2..].trim());
    fs::write(&tree_path, b"junk").unwrap();
    let err = store.diff(&cp.id, None, None, 1000).unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt { .. }));
    assert!(err.to_string().contains(tree.trim()), "{err}");
    // A list file that is too large or malformed is refused.
    let list = f.store_dir.join(index::FILE);
    let keep = fs::read(&list).unwrap();
    fs::write(&list, "{\"format\":1}\nnot json\n").unwrap();
    assert!(matches!(store.list(), Err(CheckpointError::Corrupt { .. })));
    let file = fs::File::create(&list).unwrap();
    file.set_len(index::MAX_BYTES + 1).unwrap();
    assert!(matches!(
        store.list(),
        Err(CheckpointError::TooLarge { .. })
    ));
    assert!(matches!(
        store.snapshot("x"),
        Err(CheckpointError::TooLarge { .. })
    ));
    fs::write(&list, keep).unwrap();
    // A damaged stat cache is only a cache.
    fs::write(
        f.store_dir.join(cache::FILE),
        b"JIANMU-STAT-CACHE-1\n\xff\xff",
    )
    .unwrap();
    let again = f.open();
    assert!(again.snapshot("after").is_ok());
}

fn compress(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

#[test]
fn two_stores_on_one_folder_take_turns() {
    let f = fixture();
    let stores: Vec<std::sync::Arc<Store>> =
        (0..2).map(|_| std::sync::Arc::new(f.open())).collect();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = std::sync::Arc::clone(&stores[t % 2]);
            let ws = f.ws.clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    fs::write(ws.join(format!("t{t}.txt")), format!("{i}")).unwrap();
                    store.snapshot(&format!("t{t} {i}")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let list = stores[0].list().unwrap();
    assert!(!list.is_empty() && list.len() <= 20);
    f.git(&["fsck", "--strict", "--no-dangling"]);
    assert_eq!(
        f.git(&["for-each-ref", "--format=%(refname)"])
            .lines()
            .count(),
        list.len()
    );
}

#[test]
fn where_the_store_may_be() {
    let f = fixture();
    f.write("a.txt", "a");
    let refused = |dir: PathBuf| Store::open(&dir, &f.ws, &[], Settings::default()).unwrap_err();
    assert!(matches!(
        refused(f.ws.clone()),
        CheckpointError::InvalidStore { .. }
    ));
    assert!(matches!(
        refused(f.top.clone()),
        CheckpointError::InvalidStore { .. }
    ));
    let err = refused(f.ws.join(".git/checkpoints"));
    assert_eq!(
        err.to_string(),
        format!(
            "refused the checkpoint store `{}`: it lies inside a `.git` folder of the workspace",
            f.ws.join(".git/checkpoints").display()
        )
    );
    // Inside the workspace elsewhere, it leaves itself out.
    let store = Store::open(&f.ws.join("cache/store"), &f.ws, &[], Settings::default()).unwrap();
    let cp = created(&store.snapshot("inside").unwrap());
    assert_eq!(paths_of(&store, &cp), ["file a.txt", "dir cache"]);
    assert_eq!(store.workspace(), f.ws);
    assert_eq!(store.store_dir(), f.ws.join("cache/store"));
    assert!(matches!(
        Store::open(
            &f.store_dir,
            &f.top.join("missing"),
            &[],
            Settings::default()
        ),
        Err(CheckpointError::Workspace { .. })
    ));
}

#[test]
fn labels_are_one_clean_line() {
    assert_eq!(snapshot::clean_label("before\nbash\0!"), "before bash !");
    assert_eq!(snapshot::clean_label("  "), "checkpoint");
    assert_eq!(snapshot::clean_label(&"x".repeat(900)).len(), 500);
    let f = fixture();
    f.write("a.txt", "a");
    let store = f.open();
    let cp = created(&store.snapshot("run\ttests\n").unwrap());
    assert_eq!(cp.label, "run tests");
    assert_eq!(
        f.git(&["log", "-1", "--format=%B", &cp.commit]),
        "run tests\n\n"
    );
}

#[test]
fn default_dir_is_per_workspace() {
    let f = fixture();
    let Some(dir) = Store::default_dir(&f.ws) else {
        return; // Neither XDG_STATE_HOME nor HOME is set here.
    };
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert_eq!(name.len(), 16);
    assert!(name.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(dir.parent().unwrap().ends_with("jianmu/checkpoints"));
    assert_eq!(Store::default_dir(&f.ws), Some(dir.clone()));
    assert_ne!(Store::default_dir(&f.top), Some(dir));
}

#[test]
fn settings_and_outputs_serialize() {
    let s: Settings = serde_json::from_str(r#"{"max_files": 10}"#).unwrap();
    assert_eq!(s.max_files, 10);
    assert_eq!(s.max_file_bytes, 8 << 20);
    assert!(serde_json::from_str::<Settings>(r#"{"max_filez": 10}"#).is_err());
    assert_eq!(
        serde_json::to_value(ChangeKind::ModeChanged).unwrap(),
        "mode_changed"
    );
    assert_eq!(
        serde_json::to_value(ChangeKind::TypeChanged).unwrap(),
        "type_changed"
    );
    let schema = serde_json::to_value(schemars::schema_for!(Diff)).unwrap();
    assert!(schema.to_string().contains("mode_changed"));
    let _ = schemars::schema_for!(Restored);
    let _ = schemars::schema_for!(Snapshot);
    let _ = schemars::schema_for!(Checkpoint);
}

#[test]
fn sizes_and_lists_in_words() {
    assert_eq!(size_words(8 << 20), "8 MiB");
    assert_eq!(size_words(512 << 10), "512 KiB");
    assert_eq!(size_words(1000), "1000 bytes");
    let many: Vec<Skipped> = (0..150)
        .map(|i| Skipped::new(format!("f{i}"), "x"))
        .collect();
    let cut = bounded(&many, 100);
    assert_eq!(cut.len(), 101);
    assert_eq!(cut[100], Skipped::new("...", "and 50 more not listed"));
    assert_eq!(bounded(&many[..101], 100).len(), 101);
}

#[test]
fn tree_entries_are_in_git_order() {
    let f = fixture();
    // "a-b" sorts before the folder "a" in git's order ("a/"), "a0" after it.
    f.write("a-b", "1");
    f.write("a/x", "2");
    f.write("a0", "3");
    f.write("a.b/y", "4");
    let store = f.open();
    created(&store.snapshot("order").unwrap());
    f.git(&["fsck", "--strict", "--no-dangling"]);
}

#[test]
fn a_store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
    check::<CheckpointError>();
}

#[test]
fn what_is_in_the_way_of_a_restore_is_left_and_said() {
    let f = fixture();
    f.write(".gitignore", "*.log\n");
    f.write("x", "a file");
    f.write("notes/keep.txt", "k");
    let store = f.open_with(Settings::default(), &[PathBuf::from("notes/keep.txt")]);
    let cp = created(&store.snapshot("x is a file").unwrap());
    assert_eq!(
        paths_of(&store, &cp),
        ["file .gitignore", "dir notes", "file x"]
    );
    // `x` is now a folder holding an ignored file: it cannot be removed, so the
    // file `x` cannot come back.
    fs::remove_file(f.ws.join("x")).unwrap();
    f.write("x/tracked.txt", "t");
    f.write("x/debug.log", "ignored");
    f.write("notes/keep.txt", "excluded, changed");
    let restored = store.restore(&cp.id, false).unwrap();
    assert_eq!(restored.removed, ["x/tracked.txt"]);
    assert_eq!(f.read("x/debug.log"), "ignored");
    assert_eq!(f.read("notes/keep.txt"), "excluded, changed");
    let left: Vec<(&str, &str)> = restored
        .left
        .iter()
        .map(|s| (s.path.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(
        left,
        [
            ("x", "not removed: it holds files that snapshots leave out"),
            ("x", "not written: what is there now could not be removed"),
        ]
    );
    // The diff to the workspace says what differs.
    let diff = store.diff(&cp.id, None, Some("x"), 10_000).unwrap();
    assert_eq!(diff.changes.len(), 1);
    assert_eq!(diff.changes[0].kind, ChangeKind::TypeChanged);
}

#[test]
fn hostile_ignore_files_neither_hang_nor_exhaust_a_snapshot() {
    let f = fixture();
    f.write("a/keep.txt", "kept");
    f.write("b/x.log", "ignored only by a link's rules");
    f.write("c/x.log", "ignored");
    f.write("c/y.log", "whitelisted");
    f.write("c/.gitignore", "*.log\n!y.log\n");
    f.write("outside-rules", "*.log\n");
    // A FIFO would block a reader forever; a link to /dev/zero would never end.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.ws.join("a/.gitignore"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", f.ws.join(".gitignore")).unwrap();
    std::os::unix::fs::symlink(f.ws.join("outside-rules"), f.ws.join("b/.gitignore")).unwrap();
    let store = f.open();
    let cp = created(&store.snapshot("hostile").unwrap());
    let paths = paths_of(&store, &cp);
    for kept in ["a/keep.txt", "b/x.log", "c/y.log", "c/.gitignore"] {
        assert!(paths.iter().any(|p| p.ends_with(kept)), "{kept}: {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.ends_with("c/x.log")), "{paths:?}");
}

/// A restore that fails past its undo checkpoint (a damaged object in the store)
/// names that checkpoint, and restoring it brings the workspace back as it was.
#[test]
fn a_restore_that_stops_partway_names_its_undo() {
    use std::io::Read as _;
    let f = fixture();
    f.write("a.txt", "first version\n");
    let store = f.open();
    let cp = created(&store.snapshot("one").unwrap());
    f.write("a.txt", "second version\n");
    f.write("new.txt", "made later\n");
    let mut damaged = false;
    for sub in fs::read_dir(f.store_dir.join("objects")).unwrap() {
        let sub = sub.unwrap();
        if sub.file_name().len() != 2 {
            continue;
        }
        for o in fs::read_dir(sub.path()).unwrap() {
            let path = o.unwrap().path();
            let mut text = Vec::new();
            flate2::read::ZlibDecoder::new(fs::File::open(&path).unwrap())
                .read_to_end(&mut text)
                .unwrap();
            if text.ends_with(b"\0first version\n") {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
                fs::write(&path, b"not zlib at all").unwrap();
                damaged = true;
            }
        }
    }
    assert!(damaged);
    let err = store.restore(&cp.id, false).unwrap_err();
    let CheckpointError::Interrupted { undo, .. } = &err else {
        panic!("{err}");
    };
    assert!(
        err.to_string().contains(&format!(
            "checkpoint {undo} is the workspace as it was before it"
        )),
        "{err}"
    );
    store.restore(undo, false).unwrap();
    assert_eq!(f.read("a.txt"), "second version\n");
    assert_eq!(f.read("new.txt"), "made later\n");
}

/// A restore writing as root never makes a set-id program: the bits are dropped.
#[test]
fn a_restore_as_root_makes_no_set_id_program() {
    use std::os::unix::fs::MetadataExt as _;
    let f = fixture();
    f.write("tool", "#!/bin/sh\n");
    fs::set_permissions(f.ws.join("tool"), fs::Permissions::from_mode(0o6755)).unwrap();
    let store = f.open();
    let cp = created(&store.snapshot("one").unwrap());
    fs::remove_file(f.ws.join("tool")).unwrap();
    store.restore(&cp.id, false).unwrap();
    let meta = fs::metadata(f.ws.join("tool")).unwrap();
    let expected = if meta.uid() == 0 { 0o755 } else { 0o6755 };
    assert_eq!(meta.mode() & 0o7777, expected);
}
