//! A session's view of the file system, end to end with the real binary: secrets
//! planted under a temporary home, the settings file, Unix socket servers outside the
//! workspace and links to each of them from the workspace are absent from every way a
//! call runs code (bash, a shell session, a background job, python_repl) and from the
//! file tools; over HTTP, neither principal sees the token file or the other's folder.

use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_lines::Server;

/// A temporary home and workspace with secrets planted around the workspace.
struct Planted {
    dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    /// Files holding `SECRET`, and links to them from the workspace.
    files: Vec<PathBuf>,
    /// Sockets whose servers answer `SECRET`, and links to them.
    sockets: Vec<PathBuf>,
}

/// A Unix socket server at `path` answering every connection with a secret.
fn serve_secret(path: &Path) {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.write_all(b"SECRET-from-socket\n");
        }
    });
}

fn plant() -> Planted {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut files = Vec::new();
    for (rel, text) in [
        ("home/.ssh/id_ed25519", "SECRET-ssh-key"),
        ("home/.aws/credentials", "SECRET-aws"),
        ("home/.docker/config.json", "SECRET-docker"),
        ("home/.netrc", "SECRET-netrc"),
        ("home/.bash_history", "SECRET-history"),
        ("home/.cargo/credentials.toml", "SECRET-cargo"),
        ("home/jianmu.toml", "# SECRET-settings\n"),
        ("elsewhere/notes.txt", "SECRET-elsewhere"),
    ] {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    // What the view shows, so that the probes are not vacuous.
    std::fs::write(home.join("notes.txt"), "visible-note").unwrap();
    let mut sockets = vec![home.join("agent.sock"), dir.path().join("outside.sock")];
    for socket in &sockets {
        serve_secret(socket);
    }
    let targets: Vec<PathBuf> = files.iter().chain(&sockets).cloned().collect();
    for (i, target) in targets.iter().enumerate() {
        let link = ws.join(format!("link-{i}"));
        std::os::unix::fs::symlink(target, &link).unwrap();
        if i < files.len() {
            files.push(link);
        } else {
            sockets.push(link);
        }
    }
    if Path::new("/var/run/docker.sock").exists() {
        sockets.push(PathBuf::from("/var/run/docker.sock"));
    }
    Planted {
        dir,
        home,
        ws,
        files,
        sockets,
    }
}

/// A Python program that reads each file and connects to each socket, one line each:
/// `missing PATH ERRNO` or `LEAK PATH: what it got`.
fn python_probe(p: &Planted) -> String {
    let list = |paths: &[PathBuf]| {
        serde_json::to_string(
            &paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap()
    };
    format!(
        "import socket\n\
         for p in {files}:\n\
         \x20   try:\n\
         \x20       print('LEAK', p, open(p).read())\n\
         \x20   except OSError as e:\n\
         \x20       print('missing', p, e.errno)\n\
         for p in {sockets}:\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   s.settimeout(5)\n\
         \x20   try:\n\
         \x20       s.connect(p)\n\
         \x20       print('LEAK', p, s.recv(100))\n\
         \x20   except OSError as e:\n\
         \x20       print('missing', p, e.errno)\n\
         print('shown', open({note:?}).read())\n",
        files = list(&p.files),
        sockets = list(&p.sockets),
        note = p.home.join("notes.txt").display().to_string(),
    )
}

/// The same probe as a shell command (the probe in a file of the workspace, run by
/// the interpreter), with `cat` for the files as well.
fn bash_probe(p: &Planted, out: Option<&str>) -> String {
    std::fs::write(p.ws.join("probe.py"), python_probe(p)).unwrap();
    let cats: String = p
        .files
        .iter()
        .map(|f| format!("cat {} 2>&1; ", f.display()))
        .collect();
    let redirect = out.map(|o| format!(" > {o} 2>&1")).unwrap_or_default();
    format!("{{ {cats} python3 probe.py; echo probe-done; }}{redirect}; true")
}

/// Every file and socket answered as missing (`ENOENT`), and the shown note was read.
#[track_caller]
fn all_missing(p: &Planted, answer: &str, way: &str) {
    assert!(!answer.contains("SECRET"), "{way} read a secret:\n{answer}");
    assert!(
        !answer.contains("LEAK"),
        "{way} reached something:\n{answer}"
    );
    assert!(answer.contains("shown visible-note"), "{way}:\n{answer}");
    for path in p.files.iter().chain(&p.sockets) {
        let line = format!("missing {} 2", path.display());
        assert!(answer.contains(&line), "{way}: no `{line}` in\n{answer}");
    }
}

/// Under the default settings, a temporary home's credentials, the settings file, a
/// folder beside the workspace, socket servers outside it (in the home and beside it)
/// and the host's Docker socket are missing to bash, a shell session, a background
/// job and python_repl, through links from the workspace too; the file tools refuse
/// them; the workspace stays writable and the rest read-only.
#[test]
fn secrets_sockets_and_other_folders_are_missing_to_every_way_a_call_runs_code() {
    if !jianmu_process::Isolation::probe().namespaces {
        return; // no view on this kernel: Landlock's narrower rules are tested below
    }
    let p = plant();
    let config = p.home.join("jianmu.toml");
    let mut server = Server::start_in(
        &p.ws,
        &[("HOME", &p.home), ("TMPDIR", p.dir.path())],
        &["--config", config.to_str().unwrap()],
    );
    let foreground = server.call(1, "bash", json!({"command": bash_probe(&p, None)}));
    all_missing(&p, &foreground, "bash");
    let session = server.call(
        2,
        "bash",
        json!({"command": bash_probe(&p, None), "session": "s"}),
    );
    all_missing(&p, &session, "a shell session");
    server.call(
        3,
        "bash",
        json!({"command": bash_probe(&p, Some("job.out")), "background": true}),
    );
    let job_out = p.ws.join("job.out");
    let deadline = Instant::now() + Duration::from_secs(60);
    let job = loop {
        let text = std::fs::read_to_string(&job_out).unwrap_or_default();
        if text.contains("probe-done") {
            break text;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    all_missing(&p, &job, "a background job");
    let python = server.call(4, "python_repl", json!({"code": python_probe(&p)}));
    all_missing(&p, &python, "python_repl");
    for (i, path) in p.files.iter().enumerate() {
        let id = 10 + i as u64;
        let read = server.call(id, "read_file", json!({"path": path}));
        assert!(
            !read.contains("SECRET"),
            "read_file {}: {read}",
            path.display()
        );
    }
    // Writes: the workspace yes, the home and the system no.
    let writes = server.call(
        50,
        "bash",
        json!({"command": format!(
            "touch made-here && echo ws-ok; touch {home}/x 2>&1; touch /usr/x 2>&1; true",
            home = p.home.display()
        )}),
    );
    assert!(writes.contains("ws-ok"), "{writes}");
    assert!(p.ws.join("made-here").exists());
    assert!(
        !p.home.join("x").exists() && !Path::new("/usr/x").exists(),
        "{writes}"
    );
    assert_eq!(
        writes.matches("Read-only file system").count(),
        2,
        "{writes}"
    );
    server.close();
}

/// `[isolation]` in the settings file: `read_deny` hides a path of the home, and
/// `sockets` lets a named socket in; a tool's own `isolation` table wins over it.
#[test]
fn isolation_settings_hide_more_and_let_named_sockets_in() {
    if !jianmu_process::Isolation::probe().namespaces {
        return;
    }
    let p = plant();
    let db = p.home.join("db.sock");
    serve_secret(&db);
    std::fs::create_dir_all(p.home.join("project-notes")).unwrap();
    std::fs::write(p.home.join("project-notes/plan.txt"), "hidden-plan").unwrap();
    let config = p.dir.path().join("settings.toml");
    std::fs::write(
        &config,
        format!(
            "[isolation]\nread_deny = [{notes:?}]\nsockets = [{db:?}]\n",
            notes = p.home.join("project-notes").display().to_string(),
            db = db.display().to_string()
        ),
    )
    .unwrap();
    let mut server = Server::start_in(
        &p.ws,
        &[("HOME", &p.home), ("TMPDIR", p.dir.path())],
        &["--config", config.to_str().unwrap()],
    );
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect({db:?})\n\
         print('db', s.recv(100))\n\
         try:\n\
         \x20   open({plan:?}).read()\n\
         except OSError as e:\n\
         \x20   print('plan missing', e.errno)\n",
        db = db.display().to_string(),
        plan = p.home.join("project-notes/plan.txt").display().to_string(),
    );
    let answer = server.call(1, "python_repl", json!({"code": script}));
    assert!(answer.contains("db b'SECRET-from-socket"), "{answer}");
    assert!(answer.contains("plan missing 2"), "{answer}");
    server.close();
}

/// A project's ordinary work runs under the defaults with the user's own toolchains:
/// `cargo build --offline` of a crate whose dependency is in `~/.cargo/registry`, a
/// virtual environment with a wheel installed from the workspace, and the git tools
/// on a repository in the workspace.
#[test]
fn builds_venvs_and_git_run_under_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("demo/src")).unwrap();
    std::fs::write(
        ws.join("demo/Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nmemchr = \"2\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("demo/src/main.rs"),
        "fn main() { println!(\"found at {:?}\", memchr::memchr(b'z', b\"xyz\")); }\n",
    )
    .unwrap();
    let out = crate::jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "cd demo && cargo build --offline --quiet 2>&1 && ./target/debug/demo", "timeout": 600}"#,
        ],
        ws,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("found at Some(2)"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A wheel made here, installed into a venv of the workspace without an index.
    let wheel = "import zipfile\n\
        with zipfile.ZipFile('greet-0.1-py3-none-any.whl', 'w') as z:\n\
        \x20   z.writestr('greet/__init__.py', 'def hi():\\n    return \"hi from greet\"\\n')\n\
        \x20   z.writestr('greet-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: greet\\nVersion: 0.1\\n')\n\
        \x20   z.writestr('greet-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
        \x20   z.writestr('greet-0.1.dist-info/RECORD', '')\n";
    std::fs::write(ws.join("make_wheel.py"), wheel).unwrap();
    let out = crate::jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "python3 make_wheel.py && python3 -m venv venv && venv/bin/python -m pip install --quiet --no-index --disable-pip-version-check greet-0.1-py3-none-any.whl 2>&1 && venv/bin/python -c 'import greet; print(greet.hi())'", "timeout": 600}"#,
        ],
        ws,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("hi from greet"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = crate::jianmu(
        &[
            "call",
            "bash",
            r#"{"command": "git init -q repo && cd repo && echo one > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first && echo two >> a.txt"}"#,
        ],
        ws,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = crate::jianmu(&["call", "git_diff", "{}", "--workspace", "repo"], ws);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("+two"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Filters defined in the user's own configuration (`~/.gitconfig` and
/// `$XDG_CONFIG_HOME/git/config`) are turned off by name like the repository's: the git
/// tools read files through no program of any configuration git reads.
#[test]
fn the_git_tools_run_no_filter_of_the_users_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let xdg = home.join(".xdg");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let marker = ws.join("MARKER");
    let m = marker.display();
    std::fs::write(
        home.join(".gitconfig"),
        format!("[filter \"home\"]\n\tclean = \"sh -c 'echo home >> {m}; cat'\"\n"),
    )
    .unwrap();
    std::fs::write(
        xdg.join("git/config"),
        format!("[filter \"xdg\"]\n\tclean = \"sh -c 'echo xdg >> {m}; cat'\"\n"),
    )
    .unwrap();
    let git = |script: &str| {
        let out = jianmu_process::std_command("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&ws)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &xdg)
            .env_remove("GIT_CONFIG_GLOBAL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
    };
    git(
        "git init -q -b main && printf 'a.txt filter=home\\nb.txt filter=xdg\\n' > .gitattributes \
         && echo a > a.txt && echo b > b.txt && git add -A 2>/dev/null \
         && git -c user.name=a -c user.email=a@b commit -qm one && echo a2 > a.txt && echo b2 > b.txt \
         && touch -d 2020-01-01 .git/index",
    );
    std::fs::remove_file(&marker).ok();
    for (name, args) in [
        ("git_status", "{}"),
        ("git_diff", "{}"),
        ("git_add", r#"{"all": true}"#),
    ] {
        let out = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"))
            .args(["call", name, args])
            .current_dir(&ws)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &xdg)
            .env("TMPDIR", dir.path())
            .env_remove("JIANMU_LOG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(
            !marker.exists(),
            "{name} ran: {}",
            std::fs::read_to_string(&marker).unwrap()
        );
    }
    // Both filters are live: git itself runs them.
    git("git add --renormalize . 2>/dev/null; true");
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(ran.contains("home") && ran.contains("xdg"), "{ran:?}");
}
