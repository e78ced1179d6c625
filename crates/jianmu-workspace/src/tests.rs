//! Confinement: every way out of the workspace we know of is refused, with a message
//! that names the rule; and writes are atomic.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A parent folder holding the workspace `ws`, a sibling `ws-evil` and an `outside`
/// folder with a secret.
struct Fixture {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    ws: Workspace,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().canonicalize().unwrap();
    for d in ["ws", "ws-evil", "outside"] {
        std::fs::create_dir(top.join(d)).unwrap();
    }
    std::fs::write(top.join("outside/secret.txt"), "SECRET").unwrap();
    std::fs::write(top.join("ws-evil/secret.txt"), "SECRET").unwrap();
    std::fs::write(top.join("ws/inside.txt"), "inside").unwrap();
    let ws = Workspace::open(top.join("ws")).unwrap();
    Fixture { _tmp: tmp, top, ws }
}

fn run(cmd: &str, args: &[&Path]) {
    let status = jianmu_process::std_command(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        status.success(),
        "{cmd} {args:?} failed (these tests run as root in CI)"
    );
}

/// Reads `path` as a model would give it: map, then open.
fn read(ws: &Workspace, path: &str) -> Result<String, String> {
    let rel = ws.relative(path).map_err(|e| e.to_string())?;
    let bytes = ws.read_to_end(&rel, 1 << 20).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(bytes).unwrap())
}

#[test]
fn lexical_mapping() {
    let f = fixture();
    let root = f.ws.root().to_str().unwrap().to_owned();
    let ok = |p: &str| f.ws.relative(p).unwrap();
    assert_eq!(ok("a/./b/../c"), Path::new("a/c"));
    assert_eq!(ok(""), Path::new(""));
    assert_eq!(ok("."), Path::new(""));
    assert_eq!(ok(&format!("{root}/x/y")), Path::new("x/y"));
    assert_eq!(ok(&root), Path::new(""));
    for bad in [
        "../../etc/passwd".to_owned(),
        "a/../../x".to_owned(),
        "/etc/passwd".to_owned(),
        format!("{root}-evil/secret.txt"),
        format!("{root}/../outside/secret.txt"),
    ] {
        let err = f.ws.relative(&bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("refused `{bad}`: the path is outside the workspace")
        );
    }
    assert_eq!(
        f.ws.relative("a\0b").unwrap_err().to_string(),
        "refused the path: it contains a NUL byte"
    );
}

#[test]
fn symlinks_out_are_refused_in_every_position() {
    let f = fixture();
    let ws_path = f.top.join("ws");
    symlink(f.top.join("outside/secret.txt"), ws_path.join("file-link")).unwrap();
    symlink(f.top.join("outside"), ws_path.join("dir-link")).unwrap();
    symlink("../outside", ws_path.join("relative-link")).unwrap();
    symlink("inside.txt", ws_path.join("good-link")).unwrap();
    symlink("loop-b", ws_path.join("loop-a")).unwrap();
    symlink("loop-a", ws_path.join("loop-b")).unwrap();

    for path in [
        "file-link",
        "dir-link/secret.txt",
        "relative-link/secret.txt",
    ] {
        assert_eq!(
            read(&f.ws, path).unwrap_err(),
            format!(
                "refused `{path}`: the path leads outside the workspace through a symbolic link"
            )
        );
    }
    assert_eq!(read(&f.ws, "good-link").unwrap(), "inside");
    assert_eq!(
        read(&f.ws, "loop-a").unwrap_err(),
        "refused `loop-a`: symbolic links loop"
    );

    // Writing through a symlinked parent or file must not create or change anything
    // outside.
    for path in ["dir-link/new.txt", "file-link", "relative-link/secret.txt"] {
        let rel = f.ws.relative(path).unwrap();
        let err =
            f.ws.write_atomic(&rel, b"pwned", &WriteOptions::default())
                .unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Escape { .. }),
            "{path}: {err}"
        );
    }
    assert!(!f.top.join("outside/new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.top.join("outside/secret.txt")).unwrap(),
        "SECRET"
    );
    // Through a good symlink, the target inside is written and the link kept.
    let rel = f.ws.relative("good-link").unwrap();
    f.ws.write_atomic(&rel, b"new", &WriteOptions::default())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws_path.join("inside.txt")).unwrap(),
        "new"
    );
    assert!(
        std::fs::symlink_metadata(ws_path.join("good-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn special_files_and_hard_links_are_refused_without_hanging() {
    let f = fixture();
    let ws_path = f.top.join("ws");
    run("mkfifo", &[&ws_path.join("fifo")]);
    run(
        "mknod",
        &[
            &ws_path.join("null"),
            Path::new("c"),
            Path::new("1"),
            Path::new("3"),
        ],
    );
    std::fs::hard_link(ws_path.join("inside.txt"), ws_path.join("hard.txt")).unwrap();
    assert_eq!(
        read(&f.ws, "fifo").unwrap_err(),
        "refused `fifo`: it is a FIFO, not a regular file"
    );
    assert_eq!(
        read(&f.ws, "null").unwrap_err(),
        "refused `null`: it is a device, not a regular file"
    );
    assert_eq!(
        read(&f.ws, ".").unwrap_err(),
        "refused `.`: it is a directory, not a regular file"
    );
    assert_eq!(
        read(&f.ws, "hard.txt").unwrap_err(),
        "refused `hard.txt`: the file has 2 hard links, and another may be outside the workspace"
    );
    for path in ["fifo", "hard.txt"] {
        let rel = f.ws.relative(path).unwrap();
        assert!(
            f.ws.write_atomic(&rel, b"x", &WriteOptions::default())
                .is_err(),
            "{path}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws_path.join("inside.txt")).unwrap(),
        "inside"
    );
}

#[test]
fn a_component_swapped_for_a_symlink_mid_call_never_escapes() {
    let f = fixture();
    let ws_path = f.top.join("ws");
    std::fs::create_dir(ws_path.join("real")).unwrap();
    std::fs::write(ws_path.join("real/f.txt"), "inside").unwrap();
    std::fs::write(f.top.join("outside/f.txt"), "SECRET").unwrap();
    symlink(f.top.join("outside"), ws_path.join("evil")).unwrap();
    std::fs::rename(ws_path.join("real"), ws_path.join("d")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let ws_path = ws_path.clone();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Swap `d` between the real folder and the symlink out, atomically.
                std::fs::rename(ws_path.join("d"), ws_path.join("real")).unwrap();
                std::fs::rename(ws_path.join("evil"), ws_path.join("d")).unwrap();
                std::fs::rename(ws_path.join("d"), ws_path.join("evil")).unwrap();
                std::fs::rename(ws_path.join("real"), ws_path.join("d")).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let (mut inside, mut refused) = (0, 0);
    for _ in 0..20_000 {
        match read(&f.ws, "d/f.txt") {
            Ok(text) => {
                assert_eq!(text, "inside", "read outside the workspace");
                inside += 1;
            }
            Err(_) => refused += 1,
        }
        let rel = Path::new("d/new.txt");
        let _ =
            f.ws.write_atomic(rel, b"x", &WriteOptions::default().create_dirs(false));
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(
        !f.top.join("outside/new.txt").exists(),
        "wrote outside the workspace"
    );
    assert!(
        flips > 0 && inside > 0,
        "flips {flips}, inside {inside}, refused {refused}"
    );
}

#[test]
fn writes_keep_permissions_append_and_leave_no_temp_files() {
    let f = fixture();
    let ws_path = f.top.join("ws");
    let rel = Path::new("inside.txt");
    std::fs::set_permissions(ws_path.join(rel), std::fs::Permissions::from_mode(0o640)).unwrap();
    let size =
        f.ws.write_atomic(rel, b"one\n", &WriteOptions::default())
            .unwrap();
    assert_eq!(size, 4);
    let size =
        f.ws.write_atomic(rel, b"two\n", &WriteOptions::default().append(true))
            .unwrap();
    assert_eq!(size, 8);
    assert_eq!(
        std::fs::read_to_string(ws_path.join(rel)).unwrap(),
        "one\ntwo\n"
    );
    let mode = std::fs::metadata(ws_path.join(rel))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o640);

    let deep = Path::new("a/b/c.txt");
    let err =
        f.ws.write_atomic(deep, b"x", &WriteOptions::default().create_dirs(false))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`a/b/c.txt (its folder; set create_dirs to make it)` does not exist"
    );
    f.ws.write_atomic(deep, b"x", &WriteOptions::default())
        .unwrap();
    assert_eq!(std::fs::read_to_string(ws_path.join(deep)).unwrap(), "x");
    let err =
        f.ws.write_atomic(Path::new("a"), b"x", &WriteOptions::default())
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "refused `a`: it is a directory, not a regular file"
    );
    assert_no_temp_files(&ws_path);
}

#[test]
fn a_staged_write_changes_nothing_until_committed() {
    let fx = fixture();
    let rel = fx.ws.relative("a.txt").unwrap();
    fx.ws
        .write_atomic(&rel, b"old", &WriteOptions::default())
        .unwrap();
    let staged = fx
        .ws
        .stage_write(&rel, b"new", &WriteOptions::default())
        .unwrap();
    assert_eq!(fx.ws.read_to_end(&rel, 10).unwrap(), b"old");
    drop(staged);
    assert_eq!(fx.ws.read_to_end(&rel, 10).unwrap(), b"old");
    assert_no_temp_files(&fx.top.join("ws"));
    let staged = fx
        .ws
        .stage_write(&rel, b"new", &WriteOptions::default())
        .unwrap();
    assert_eq!(staged.commit().unwrap(), 3);
    assert_eq!(fx.ws.read_to_end(&rel, 10).unwrap(), b"new");
    assert_no_temp_files(&fx.top.join("ws"));
    // Removing: a file or a link itself; never a folder, never through a link out.
    fx.ws.remove_file(&rel).unwrap();
    assert!(matches!(
        fx.ws.remove_file(&rel),
        Err(WorkspaceError::NotFound { .. })
    ));
    std::fs::create_dir(fx.top.join("ws/d")).unwrap();
    let d = fx.ws.relative("d").unwrap();
    assert!(matches!(
        fx.ws.remove_file(&d),
        Err(WorkspaceError::NotAFile { .. })
    ));
    symlink(fx.top.join("outside"), fx.top.join("ws/out")).unwrap();
    let through = fx.ws.relative("out/secret.txt").unwrap();
    assert!(matches!(
        fx.ws.remove_file(&through),
        Err(WorkspaceError::Escape { .. })
    ));
    assert!(fx.top.join("outside/secret.txt").exists());
}

#[test]
fn commit_all_puts_writes_in_place_in_order_and_says_where_it_stopped() {
    for durable in [false, true] {
        commit_all_in_order(WriteOptions::default().durable(durable));
    }
}

fn commit_all_in_order(w: WriteOptions) {
    let fx = fixture();
    let rel = |p: &str| fx.ws.relative(p).unwrap();
    // One write alone, and an append in place, both ways.
    fx.ws.write_atomic(&rel("solo.txt"), b"one\n", &w).unwrap();
    fx.ws
        .write_atomic(&rel("solo.txt"), b"two\n", &w.append(true))
        .unwrap();
    assert_eq!(
        fx.ws.read_to_end(&rel("solo.txt"), 100).unwrap(),
        b"one\ntwo\n"
    );
    let staged = ["a/1.txt", "a/2.txt", "b/3.txt"]
        .iter()
        .map(|p| fx.ws.stage_write(&rel(p), p.as_bytes(), &w).unwrap())
        .collect();
    fx.ws.commit_all(staged).unwrap();
    for p in ["a/1.txt", "a/2.txt", "b/3.txt"] {
        assert_eq!(fx.ws.read_to_end(&rel(p), 100).unwrap(), p.as_bytes());
    }
    // The second folder vanishes after staging (its temporary file has no name, so
    // it is empty): the first write is in place, the second fails, nothing is left.
    let staged = vec![
        fx.ws.stage_write(&rel("c/4.txt"), b"4", &w).unwrap(),
        fx.ws.stage_write(&rel("d/5.txt"), b"5", &w).unwrap(),
    ];
    std::fs::remove_dir(fx.top.join("ws/d")).unwrap();
    let err = fx.ws.commit_all(staged).unwrap_err();
    assert_eq!(err.committed, 1);
    assert_eq!(fx.ws.read_to_end(&rel("c/4.txt"), 10).unwrap(), b"4");
    assert_no_temp_files(&fx.top.join("ws"));
}

fn assert_no_temp_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".jianmu-tmp"),
            "temporary file left: {name}"
        );
        if entry.file_type().unwrap().is_dir() {
            assert_no_temp_files(&entry.path());
        }
    }
}

#[test]
fn concurrent_writes_leave_one_complete_winner() {
    let f = fixture();
    let contents: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a' + i; 256 * 1024]).collect();
    let rel = Path::new("race.bin");
    std::thread::scope(|s| {
        for content in &contents {
            let ws = f.ws.clone();
            s.spawn(move || {
                for _ in 0..20 {
                    ws.write_atomic(rel, content, &WriteOptions::default())
                        .unwrap();
                }
            });
        }
    });
    let got = std::fs::read(f.top.join("ws/race.bin")).unwrap();
    assert!(contents.contains(&got), "the file is a mix of writes");
    assert_no_temp_files(&f.top.join("ws"));
}

#[test]
fn a_full_disk_leaves_the_old_file_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    run(
        "mount",
        &[
            Path::new("-t"),
            Path::new("tmpfs"),
            Path::new("-o"),
            Path::new("size=64k"),
            Path::new("tmpfs"),
            &mnt,
        ],
    );
    let outcome = std::panic::catch_unwind(|| {
        std::fs::write(mnt.join("keep.txt"), "old content").unwrap();
        let ws = Workspace::open(&mnt).unwrap();
        let err = ws
            .write_atomic(
                Path::new("keep.txt"),
                &vec![b'x'; 1 << 20],
                &WriteOptions::default(),
            )
            .unwrap_err();
        let source = std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(source.contains("No space left"), "{err}: {source}");
        assert_eq!(
            std::fs::read_to_string(mnt.join("keep.txt")).unwrap(),
            "old content"
        );
        assert_no_temp_files(&mnt);
    });
    run("umount", &[&mnt]);
    outcome.unwrap();
}

#[test]
fn a_write_cut_short_leaves_nothing_behind() {
    use std::io::Write as _;
    // The content goes to an unnamed file first: until it is complete and linked in,
    // nothing is visible in the folder, so a crash mid-write leaves no trace.
    let f = fixture();
    let ws_path = f.top.join("ws");
    let before: Vec<_> = std::fs::read_dir(&ws_path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let dir = f.ws.open_dir(Path::new("")).unwrap();
    let (mut file, anonymous) =
        crate::write::create_temp(&dir, Path::new(".x.jianmu-tmp"), None).unwrap();
    assert!(
        anonymous,
        "this file system has O_TMPFILE; the test needs it"
    );
    file.write_all(&vec![b'x'; 1 << 20]).unwrap();
    let during: Vec<_> = std::fs::read_dir(&ws_path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(during, before);
    drop(file); // the "crash": the file is never linked
    let after: Vec<_> = std::fs::read_dir(&ws_path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(after, before);
}

/// What a later run reads and what the user's own git runs are never written, removed
/// or reached through a link by a tool; the rest of `.git` and the workspace are.
#[test]
fn protected_paths_are_refused_with_the_reason() {
    let f = fixture();
    let root = f.ws.root().to_owned();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    symlink(".git/hooks", root.join("h")).unwrap();
    symlink(".git/config", root.join("cfg")).unwrap();
    let options = WriteOptions::default().create_dirs(true);
    for (path, why) in [
        ("jianmu.toml", "settings file"),
        (".jianmu/outputs/x", "own folder"),
        (".git/hooks/pre-commit", "hooks"),
        ("h/pre-commit", "hooks"),
        (".git/config", "configuration"),
        ("cfg", "configuration"),
        ("./.git/../.git/config", "configuration"),
    ] {
        let rel = f.ws.relative(path).unwrap();
        let err = f.ws.write_atomic(&rel, b"x", &options).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Protected { .. }) && err.message().contains(why),
            "{path}: {err}"
        );
    }
    let err = f.ws.remove_file(Path::new(".git/config")).unwrap_err();
    assert!(matches!(err, WorkspaceError::Protected { .. }), "{err}");
    assert!(!root.join(".jianmu").exists() && !root.join("jianmu.toml").exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    for path in [".git/HEAD", "src/main.rs", "jianmu.toml.bak"] {
        f.ws.write_atomic(Path::new(path), b"ok", &options).unwrap();
    }
}
