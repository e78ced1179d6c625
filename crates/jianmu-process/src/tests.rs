//! The defaults every spawn gets.

#[tokio::test]
async fn commands_close_stdin() {
    // `cat` would wait forever on an inherited terminal or pipe.
    let out = crate::command("cat").output().await.unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let out = crate::std_command("cat").output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn dropping_an_async_child_kills_it() {
    let child = crate::command("sleep").arg("1000").spawn().unwrap();
    let pid = child.id().unwrap();
    drop(child);
    // kill_on_drop sends SIGKILL at once; the zombie is reaped by tokio's orphan queue,
    // so wait until the process is no longer running (state Z or gone).
    for _ in 0..200 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        if !running {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the dropped child {pid} is still running");
}

use jianmu_test_support::running_with;

/// A sleep duration nobody else uses, to find the test's processes by.
fn unique_sleep() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "1000.{}{:04}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn jail(mode: crate::IsolationMode, ws: &std::path::Path) -> crate::Jail {
    crate::Jail::new(
        &crate::IsolationSettings {
            mode,
            ..Default::default()
        },
        ws,
    )
    .unwrap()
}

fn bash(jail: &crate::Jail, script: &str, ws: &std::path::Path) -> crate::Spec {
    let mut spec = crate::Spec::new("bash");
    spec.arg("-c")
        .arg(script)
        .current_dir(ws)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Some(tmp) = jail.tmp() {
        spec.env("TMPDIR", tmp);
    }
    spec
}

async fn run(jail: &crate::Jail, script: &str, ws: &std::path::Path) -> (i32, String) {
    let mut spec = bash(jail, script, ws);
    spec.stdout(crate::Stream::Piped)
        .stderr(crate::Stream::Piped);
    let mut child = jail.spawn(&spec).unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the supervised command did not end")
        .unwrap();
    let mut text = String::new();
    use tokio::io::AsyncReadExt;
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut text).await.unwrap();
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut text).await.unwrap();
    }
    (out.code().unwrap_or(-1), text)
}

/// Every way commands can be supervised here: the modes, and the subreaper
/// supervisor that stands in where user namespaces do not work.
fn every_jail(ws: &std::path::Path) -> Vec<(String, crate::Jail)> {
    let offered = crate::Isolation::probe();
    let mut jails = Vec::new();
    for mode in [crate::IsolationMode::Off, crate::IsolationMode::Auto] {
        let settings = crate::IsolationSettings {
            mode,
            ..Default::default()
        };
        let no_namespaces = crate::Isolation {
            namespaces: false,
            ..offered
        };
        for kernel in [offered, no_namespaces] {
            let jail = crate::Jail::with_kernel(&settings, ws, kernel).unwrap();
            jails.push((format!("{mode:?}: {}", jail.describe()), jail));
        }
    }
    jails
}

/// A shell kept across calls: `stop_others` ends what a call started (past `setsid`
/// and double forks) and keeps the shell, on every kind of jail.
#[tokio::test]
async fn stop_others_keeps_the_command_and_ends_the_rest() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let ws = tempfile::tempdir().unwrap();
    for (mode, jail) in every_jail(ws.path()) {
        let (a, b, c) = (unique_sleep(), unique_sleep(), unique_sleep());
        let mut spec = bash(&jail, "", ws.path());
        spec.args.clear();
        spec.arg("-s")
            .stdin(crate::Stream::Piped)
            .stdout(crate::Stream::Piped);
        let mut shell = jail.spawn(&spec).unwrap();
        let mut stdin = shell.stdin.take().unwrap();
        let mut stdout = shell.stdout.take().unwrap();
        let script = format!(
            "sleep {a} & setsid sleep {b} >/dev/null & ( ( sleep {c} ) & ) ; echo started\n"
        );
        stdin.write_all(script.as_bytes()).await.unwrap();
        let mut buf = [0u8; 8];
        stdout.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"started\n", "{mode}");
        assert!(shell.stop_others().await >= 3, "{mode}");
        for needle in [&a, &b, &c] {
            assert!(
                running_with(needle).is_empty(),
                "{mode}: `sleep {needle}` lives on"
            );
        }
        assert!(
            shell.try_wait().unwrap().is_none(),
            "{mode}: the shell was ended"
        );
        assert_eq!(shell.stop_others().await, 0, "{mode}");
        stdin.write_all(b"echo again\n").await.unwrap();
        let mut buf = [0u8; 6];
        stdout.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"again\n", "{mode}");
    }
}

#[tokio::test]
async fn nothing_started_by_a_command_outlives_it() {
    let ws = tempfile::tempdir().unwrap();
    for (mode, jail) in every_jail(ws.path()) {
        let (a, b, c) = (unique_sleep(), unique_sleep(), unique_sleep());
        let script = format!(
            "setsid nohup sleep {a} >/dev/null 2>&1 & \
             env -i setsid sleep {b} & \
             ( ( exec -a x sleep {c} ) & ) ; sleep 0.3; echo started"
        );
        let (code, out) = run(&jail, &script, ws.path()).await;
        assert_eq!((code, out.trim()), (0, "started"), "{mode}");
        for needle in [&a, &b, &c] {
            assert!(
                running_with(needle).is_empty(),
                "{mode}: `sleep {needle}` outlived its command"
            );
        }
    }
}

#[tokio::test]
async fn stopping_a_supervised_command_ends_its_whole_tree() {
    let ws = tempfile::tempdir().unwrap();
    for (_, jail) in every_jail(ws.path()) {
        stop_and_drop(&jail, ws.path()).await;
    }
}

async fn stop_and_drop(jail: &crate::Jail, ws: &std::path::Path) {
    let a = unique_sleep();
    // A fork-and-setsid loop that keeps starting escapees until stopped.
    let script = format!("while true; do env -i setsid sleep {a} & sleep 0.05; done");
    let mut child = jail.spawn(&bash(jail, &script, ws)).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert!(!running_with(&a).is_empty(), "the loop did not start");
    tokio::time::timeout(std::time::Duration::from_secs(20), child.stop_and_wait())
        .await
        .expect("stopping took too long");
    assert!(running_with(&a).is_empty(), "escapees outlived the stop");
    // Dropping a running one does the same.
    let b = unique_sleep();
    let child = jail
        .spawn(&bash(jail, &format!("setsid sleep {b} & wait"), ws))
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!running_with(&b).is_empty());
    drop(child);
    for _ in 0..200 {
        if running_with(&b).is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("dropping the command left `sleep {b}` running");
}

#[tokio::test]
async fn isolation_hides_the_caller_and_confines_writes_and_network() {
    let offered = crate::Isolation::probe();
    if offered.landlock_abi == 0 && !offered.namespaces {
        // Nothing to test on this kernel; `describe` says so.
        assert_eq!(
            jail(crate::IsolationMode::Auto, std::path::Path::new("/")).describe(),
            "supervised (subreaper)"
        );
        return;
    }
    let no_namespaces = crate::Isolation {
        namespaces: false,
        ..offered
    };
    // A kernel (or policy) that makes user namespaces but no network namespaces.
    let no_private_network = crate::Isolation {
        private_network: false,
        ..offered
    };
    for kernel in [offered, no_namespaces, no_private_network] {
        isolated_on(kernel).await;
    }
}

#[test]
fn the_description_says_what_network_commands_have() {
    let kernel = crate::Isolation {
        landlock_abi: 7,
        seccomp: true,
        namespaces: true,
        private_network: true,
    };
    let closed = crate::IsolationSettings::default();
    let private = closed.network_sentence_on(kernel, "bash").unwrap();
    assert!(
        private.contains("local servers and sockets work"),
        "{private}"
    );
    assert!(
        private.contains("outside hosts cannot be reached"),
        "{private}"
    );
    assert!(
        private.contains("`[tools.bash.isolation] network = true`"),
        "{private}"
    );
    let none = crate::Isolation {
        private_network: false,
        ..kernel
    };
    let fallback = closed.network_sentence_on(none, "python_repl").unwrap();
    assert!(
        fallback.starts_with("Network: none on this host: only Unix sockets work"),
        "{fallback}"
    );
    assert!(
        fallback.contains("`[tools.python_repl.isolation] network = true`"),
        "{fallback}"
    );
    let open = crate::IsolationSettings {
        network: true,
        ..Default::default()
    };
    assert_eq!(open.network_sentence_on(kernel, "bash"), None);
}

/// The isolation's guarantees on a kernel that offers `kernel`.
async fn isolated_on(kernel: crate::Isolation) {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let jail =
        crate::Jail::with_kernel(&crate::IsolationSettings::default(), ws.path(), kernel).unwrap();
    let me = std::process::id();
    let (code, out) = run(&jail, &format!("cat /proc/{me}/environ"), ws.path()).await;
    if kernel.namespaces {
        // Its own /proc has no caller in it. (Without namespaces Landlock's ptrace
        // scoping is all there is, and it does not stop a root caller's environment
        // from being read: the isolation table in docs/isolation.md says so.)
        assert_ne!(code, 0, "the caller's environment was readable: {out}");
    }
    let script = format!(
        "echo a > in-workspace && echo b > \"$TMPDIR/t\" && echo c > /dev/null && cat in-workspace \"$TMPDIR/t\"; \
         {{ echo d > {}/outside; }} 2>/dev/null && echo WROTE-OUTSIDE; true",
        outside.path().display()
    );
    let (code, out) = run(&jail, &script, ws.path()).await;
    assert_eq!((code, out.as_str()), (0, "a\nb\n"));
    assert!(!outside.path().join("outside").exists());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (code, out) = run(
        &jail,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        ws.path(),
    )
    .await;
    assert!(code != 0 && !out.contains("CONNECTED"), "{out}");
    let network = if kernel.namespaces && kernel.private_network {
        "private network (loopback only)"
    } else {
        "no network"
    };
    assert!(jail.describe().contains(network), "{}", jail.describe());
    // With `network = true`, the same connection works.
    let open = crate::Jail::with_kernel(
        &crate::IsolationSettings {
            network: true,
            ..Default::default()
        },
        ws.path(),
        kernel,
    )
    .unwrap();
    let (code, out) = run(
        &open,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        ws.path(),
    )
    .await;
    assert_eq!((code, out.trim()), (0, "CONNECTED"));
}

#[tokio::test]
async fn refused_namespaces_fall_back_to_the_supervisor() {
    if !crate::Isolation::probe().namespaces {
        return; // the fallback is every jail's path here, tested above
    }
    let ws = tempfile::tempdir().unwrap();
    let jail =
        crate::Jail::with_refused_namespaces(&crate::IsolationSettings::default(), ws.path());
    let a = unique_sleep();
    let (code, out) = run(
        &jail,
        &format!("setsid sleep {a} & echo $$ > pid; echo ok"),
        ws.path(),
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "ok\n"));
    // Not the init of a namespace: the supervisor ran it, and still ended the sleeper.
    let pid: u32 = std::fs::read_to_string(ws.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(pid, 1);
    assert!(running_with(&a).is_empty());
    // A missing program is still an error, not a fallback.
    let err = jail
        .spawn(&crate::Spec::new("/nonexistent/program"))
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

/// A command's output and status, started with `spawn` and read to the end.
async fn output(mut child: crate::Supervised) -> (i32, String) {
    use tokio::io::AsyncReadExt;
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut text).await.unwrap();
    }
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut text).await.unwrap();
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the command did not end")
        .unwrap();
    (status.code().unwrap_or(-1), text)
}

/// A server one command starts (TCP, a Unix socket by path, an abstract Unix socket)
/// is reached by a later command of the same jail, and not by another jail's commands
/// nor from the host; only loopback exists, nothing has a route outside, and families
/// that reach past the namespace are refused.
#[tokio::test]
async fn a_private_network_serves_its_own_commands_only() {
    let offered = crate::Isolation::probe();
    if !(offered.namespaces && offered.private_network) {
        return; // the fallback is `isolated_on`'s "no network"
    }
    let ws = tempfile::tempdir().unwrap();
    let jail = jail(crate::IsolationMode::Auto, ws.path());
    let other = crate::Jail::new(&crate::IsolationSettings::default(), ws.path()).unwrap();
    assert!(jail.private_network().is_some());
    let server = r#"exec python3 -c '
import os, socket
tcp = socket.create_server(("127.0.0.1", 0))
unix = socket.socket(socket.AF_UNIX); unix.bind(os.environ["TMPDIR"] + "/s.sock"); unix.listen()
abstract = socket.socket(socket.AF_UNIX); abstract.bind("\0jianmu-test"); abstract.listen()
print(tcp.getsockname()[1], flush=True)
for s in (tcp, unix, abstract):
    c, _ = s.accept(); c.sendall(b"hello"); c.close()
'"#;
    let mut spec = bash(&jail, server, ws.path());
    spec.stdout(crate::Stream::Piped);
    let mut server = jail.spawn(&spec).unwrap();
    let mut port = String::new();
    {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap());
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            lines.read_line(&mut port),
        )
        .await
        .expect("the server did not start")
        .unwrap();
    }
    let port = port.trim().to_owned();
    assert!(port.parse::<u16>().is_ok(), "{port:?}");
    let client = |jail: &crate::Jail, script: &str| {
        let mut spec = bash(jail, script, ws.path());
        spec.stdout(crate::Stream::Piped)
            .stderr(crate::Stream::Piped);
        jail.spawn(&spec).unwrap()
    };
    let connect = |target: &str| {
        format!(
            "exec python3 -c 'import socket, sys\n\
             fam = socket.AF_INET if \"{target}\".isdigit() else socket.AF_UNIX\n\
             s = socket.socket(fam)\n\
             s.settimeout(5)\n\
             s.connect((\"127.0.0.1\", int(\"{target}\")) if fam == socket.AF_INET else \"{target}\".replace(\"@\", \"\\0\").replace(\"TMP\", __import__(\"os\").environ[\"TMPDIR\"]))\n\
             print(s.recv(5).decode())'"
        )
    };
    // Another jail (another session) does not reach it.
    let (code, out) = output(client(&other, &connect(&port))).await;
    assert!(code != 0 && !out.contains("hello"), "{out}");
    let (code, out) = output(client(&other, &connect("@jianmu-test"))).await;
    assert!(code != 0 && !out.contains("hello"), "{out}");
    // Nor does the host.
    assert!(
        std::net::TcpStream::connect(format!("127.0.0.1:{port}"))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
            || {
                // Something of the host's own listens on that number: it is not our server.
                let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_millis(200)))
                    .unwrap();
                let mut buf = [0u8; 5];
                !matches!(std::io::Read::read(&mut s, &mut buf), Ok(5) if &buf == b"hello")
            }
    );
    // Its own later commands do.
    for target in [port.as_str(), "TMP/s.sock", "@jianmu-test"] {
        let (code, out) = output(client(&jail, &connect(target))).await;
        assert_eq!((code, out.as_str()), (0, "hello\n"), "{target}");
    }
    assert_eq!(output(server).await.0, 0);
    // Only loopback, no route outside (a UDP connect asks for a route and sends
    // nothing), and no vsock to a virtual machine's host.
    let (code, out) = output(client(
        &jail,
        "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; exec python3 -c '
import errno, socket
for fam, addr in ((socket.AF_INET, (\"192.0.2.1\", 9)), (socket.AF_INET6, (\"2001:db8::1\", 9))):
    try:
        socket.socket(fam, socket.SOCK_DGRAM).connect(addr); print(\"ROUTED\")
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print(\"VSOCK\")
except OSError as e:
    print(errno.errorcode[e.errno])
'",
    ))
    .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "lo\nENETUNREACH\nENETUNREACH\nEACCES\n")
    );
}

/// Where namespaces are refused at spawn time (after the probe passed), the supervisor
/// runs the commands: still in the private network, never in the host's.
#[tokio::test]
async fn the_supervisor_keeps_commands_in_the_private_network() {
    let offered = crate::Isolation::probe();
    if !(offered.namespaces && offered.private_network) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let jail =
        crate::Jail::with_supervisor_after_refusal(&crate::IsolationSettings::default(), ws.path());
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "echo $$; readlink /proc/self/ns/net; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-REACHED; \
         cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '"
    );
    let (code, out) = run(&jail, &script, ws.path()).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(code, 0, "{out}");
    assert_ne!(lines[0], "1", "not run by the supervisor: {out}");
    assert!(lines[1].starts_with("net:["), "{out}");
    assert_ne!(std::path::Path::new(lines[1]), host, "{out}");
    assert_eq!(&lines[2..], ["lo"], "{out}");
    // The same network as the jail's other commands.
    let (_, again) = run(&jail, "readlink /proc/self/ns/net", ws.path()).await;
    assert_eq!(again.trim(), lines[1]);
}

/// `max_memory_mb` caps what each process allocates, on every kind of jail; a
/// command within it runs as before.
#[tokio::test]
async fn a_memory_limit_fails_allocations_past_it_on_every_jail() {
    let ws = tempfile::tempdir().unwrap();
    let offered = crate::Isolation::probe();
    for mode in [crate::IsolationMode::Off, crate::IsolationMode::Auto] {
        let settings = crate::IsolationSettings {
            mode,
            max_memory_mb: Some(200),
            ..Default::default()
        };
        let no_namespaces = crate::Isolation {
            namespaces: false,
            ..offered
        };
        for kernel in [offered, no_namespaces] {
            let jail = crate::Jail::with_kernel(&settings, ws.path(), kernel).unwrap();
            assert!(
                jail.describe().contains("memory 200 MiB"),
                "{}",
                jail.describe()
            );
            let (code, out) = run(
                &jail,
                "python3 -c 'b = bytearray(50 << 20); print(len(b) >> 20)'",
                ws.path(),
            )
            .await;
            assert_eq!((code, out.trim()), (0, "50"), "{}", jail.describe());
            let (code, out) = run(&jail, "python3 -c 'bytearray(400 << 20)'", ws.path()).await;
            assert!(
                code != 0 && out.contains("MemoryError"),
                "{}: {code} {out}",
                jail.describe()
            );
        }
    }
}

/// Work in a forked child: what it writes comes back, and however it fails (a panic,
/// a stack overflow, an allocation without end, a loop without end, too much output)
/// this process goes on and the child is gone.
#[test]
fn work_in_a_child_ends_one_call_not_the_process() {
    use std::io::Write;
    use std::time::Duration;

    use crate::{ChildEnd, ChildLimits, run_in_child};

    let limits = ChildLimits {
        timeout: Duration::from_secs(20),
        idle: None,
        memory: 256 << 20,
        output: 1 << 20,
        stack: 8 << 20,
    };
    let run = |f: fn(&mut crate::ChildWriter)| run_in_child(limits, f).unwrap();

    let done = run(|w| w.write_all(b"page 1\npage 2\n").unwrap());
    assert_eq!(
        (done.output.as_slice(), done.end),
        (&b"page 1\npage 2\n"[..], ChildEnd::Finished)
    );

    let panicked = run(|w| {
        w.write_all(b"before\n").unwrap();
        panic!("a parser bug");
    });
    assert_eq!(
        (panicked.output.as_slice(), panicked.end),
        (&b"before\n"[..], ChildEnd::Crashed)
    );

    fn deep(n: u64) -> u64 {
        if n == u64::MAX {
            return 0;
        }
        let pad = [n; 64];
        deep(n + 1) + std::hint::black_box(pad)[3]
    }
    let overflowed = run(|w| {
        w.write_all(b"x").unwrap();
        deep(0);
    });
    assert_eq!(overflowed.end, ChildEnd::Crashed);
    assert_eq!(overflowed.output, b"x");

    let hungry = run(|_| {
        let mut keep = Vec::new();
        loop {
            keep.push(vec![1u8; 64 << 20]);
            std::hint::black_box(&keep);
        }
    });
    assert_eq!(hungry.end, ChildEnd::Crashed);

    let chatty = run(|w| {
        loop {
            if w.write_all(&[b'a'; 4096]).is_err() {
                return;
            }
        }
    });
    assert_eq!(
        (chatty.output.len(), chatty.end),
        (1 << 20, ChildEnd::OutputFull)
    );

    let short = ChildLimits {
        timeout: Duration::from_millis(300),
        ..limits
    };
    let start = std::time::Instant::now();
    let stuck = run_in_child(short, |_| {
        loop {
            std::hint::spin_loop();
        }
    })
    .unwrap();
    assert_eq!(stuck.end, ChildEnd::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(15));

    // Progress, then a step that never ends: killed when it has been quiet too long,
    // with the progress kept.
    let idle = ChildLimits {
        idle: Some(Duration::from_millis(300)),
        ..limits
    };
    let stalled = run_in_child(idle, |w| {
        for i in 0..5 {
            writeln!(w, "step {i}").unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        loop {
            std::hint::spin_loop();
        }
    })
    .unwrap();
    assert_eq!(stalled.end, ChildEnd::Stalled);
    assert_eq!(stalled.output, b"step 0\nstep 1\nstep 2\nstep 3\nstep 4\n");
}

/// A file beside the workspace, and one hidden by `read_deny` inside a folder the
/// view shows, cannot be read on any kernel: missing in a view, refused by Landlock
/// where there are no user namespaces; the system stays readable, and a command in a
/// view cannot mount, unmount or remount its way out of it.
#[tokio::test]
async fn reads_outside_the_view_fail_with_a_view_and_with_landlock_alone() {
    let offered = crate::Isolation::probe();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(dir.path().join("beside.txt"), "SECRET-beside").unwrap();
    let settings = crate::IsolationSettings {
        read_deny: vec!["/etc/hostname".into()],
        ..Default::default()
    };
    let no_namespaces = crate::Isolation {
        namespaces: false,
        ..offered
    };
    for kernel in [offered, no_namespaces] {
        if !kernel.namespaces && kernel.landlock_abi == 0 {
            continue; // nothing can narrow reads here (the description says so)
        }
        let jail = crate::Jail::with_kernel(&settings, &ws, kernel).unwrap();
        let script = format!(
            "cat {}/beside.txt 2>&1; cat /etc/hostname 2>&1; head -c 4 /usr/bin/env | od -c | head -1; true",
            dir.path().display()
        );
        let (code, out) = run(&jail, &script, &ws).await;
        assert_eq!(code, 0, "{out}");
        assert!(!out.contains("SECRET"), "{}: {out}", jail.describe());
        let why = if kernel.namespaces {
            "No such file or directory"
        } else {
            "Permission denied"
        };
        assert_eq!(out.matches(why).count(), 2, "{}: {out}", jail.describe());
        assert!(out.contains("E   L   F"), "the system is readable: {out}");
        let sentence = settings.files_sentence_on(kernel).unwrap();
        assert_eq!(
            sentence.contains("names can still be listed"),
            !kernel.namespaces,
            "{sentence}"
        );
    }
    if offered.namespaces {
        let jail = crate::Jail::with_kernel(&settings, &ws, offered).unwrap();
        let (_, out) = run(
            &jail,
            "mount -t tmpfs none /usr 2>&1; umount /proc 2>&1; mount -o remount,rw /usr 2>&1; \
             echo x > /usr/planted 2>&1; \
             v=$(cat /proc/sys/vm/swappiness); echo $v > /proc/sys/vm/swappiness 2>&1 || echo sysctl-refused; \
             true",
            &ws,
        )
        .await;
        assert!(!std::path::Path::new("/usr/planted").exists(), "{out}");
        assert!(
            !out.contains("planted") || out.contains("Read-only"),
            "{out}"
        );
    }
}

/// A program is looked up in absolute `PATH` folders only: an empty or relative
/// entry (the current folder, often the workspace) cannot put its own `echo` first.
#[test]
fn path_lookups_skip_empty_and_relative_entries() {
    use std::os::unix::fs::PermissionsExt;
    let probe = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/path-probe");
    std::fs::create_dir_all(&probe).unwrap();
    let impostor = probe.join("echo");
    std::fs::write(&impostor, "#!/bin/sh\necho IMPOSTOR\n").unwrap();
    std::fs::set_permissions(&impostor, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Relative to this test's folder, the crate's.
    let path = std::ffi::OsString::from("../../target/path-probe::/usr/bin:/bin");
    let found = crate::spawn::resolve("echo".as_ref(), Some(&path)).unwrap();
    assert!(
        found.is_absolute() && !found.starts_with(&probe),
        "{}",
        found.display()
    );
    assert_eq!(found.file_name().unwrap(), "echo");
}

/// In a view, what a later run reads from the workspace (jianmu's settings, its own
/// folder) and what the user's own git runs (hooks, configuration) are read-only; the
/// rest of the workspace and of `.git` stays writable.
#[tokio::test]
async fn a_command_cannot_change_what_the_next_run_reads() {
    if !crate::Isolation::probe().namespaces {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
    std::fs::write(w.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(w.join("jianmu.toml"), "").unwrap();
    let jail = crate::Jail::new(&crate::IsolationSettings::default(), w).unwrap();
    let (code, out) = run(
        &jail,
        "echo x > .git/hooks/pre-commit; echo '[core] hooksPath = x' >> .git/config; \
         echo '[isolation]' > jianmu.toml; echo ok > .git/HEAD && echo ok > notes && echo writable",
        w,
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("Read-only file system").count(), 3, "{out}");
    assert!(out.contains("writable"), "{out}");
    assert!(!w.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(std::fs::read_to_string(w.join("jianmu.toml")).unwrap(), "");
    // Nor by putting a copy in `.git`'s place: the folder is pinned.
    let (_, out) = run(
        &jail,
        "mv .git .git-old; rm -rf .git; mkdir -p .git/hooks;          echo x > .git/hooks/pre-commit; ls -d .git-old 2>&1",
        w,
    )
    .await;
    assert!(out.contains("busy"), "{out}");
    assert!(!w.join(".git-old").exists(), "{out}");
    assert!(!w.join(".git/hooks/pre-commit").exists(), "{out}");
    assert!(w.join(".git/config").exists());
}

/// Children at once take no more memory together than [`crate::CHILDREN_MEMORY`]:
/// past it, the next waits for one to end.
#[test]
fn children_share_one_memory_budget() {
    use std::io::Write;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use crate::{ChildLimits, run_in_child};

    let limits = ChildLimits {
        timeout: Duration::from_secs(60),
        idle: None,
        memory: crate::CHILDREN_MEMORY / 2,
        output: 1 << 10,
        stack: 1 << 20,
    };
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros()
    };
    let threads: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let run = run_in_child(limits, |w| {
                    let start = now();
                    std::thread::sleep(Duration::from_millis(200));
                    let _ = write!(w, "{start} {}", now());
                })
                .unwrap();
                let text = String::from_utf8(run.output).unwrap();
                let (a, b) = text.split_once(' ').unwrap();
                (a.parse::<u128>().unwrap(), b.parse::<u128>().unwrap())
            })
        })
        .collect();
    let spans: Vec<(u128, u128)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (start, _) in &spans {
        let running = spans
            .iter()
            .filter(|(a, b)| a <= start && start < b)
            .count();
        assert!(running <= 2, "{running} children at once: {spans:?}");
    }
}

/// The kernel's keyrings are not namespaced: a jailed command reaches neither the
/// session keyring it would inherit nor any other (every keyring call is refused).
#[tokio::test]
async fn keyrings_are_out_of_reach() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    if !crate::seccomp::seccomp_available() {
        return; // nothing filters system calls on this kernel
    }
    // With the host's network too, where no socket family is filtered, and where
    // no view can be made (no mount to refuse either).
    let offered = crate::Isolation::probe();
    let no_namespaces = crate::Isolation {
        namespaces: false,
        ..offered
    };
    for network in [false, true] {
        let settings = crate::IsolationSettings {
            network,
            ..crate::IsolationSettings::default()
        };
        for kernel in [offered, no_namespaces] {
            let jail = crate::Jail::with_kernel(&settings, w, kernel).unwrap();
            keyrings_refused(&jail, w).await;
        }
    }
}

async fn keyrings_refused(jail: &crate::Jail, w: &std::path::Path) {
    let script = format!(
        "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); \
         r = l.syscall({keyctl}, 0, -3, 1); print(\"keyctl\", r, ctypes.get_errno()); \
         r = l.syscall({add_key}, b\"user\", b\"k\", b\"v\", 1, -3); print(\"add_key\", r, ctypes.get_errno())'",
        keyctl = libc::SYS_keyctl,
        add_key = libc::SYS_add_key,
    );
    let (code, out) = run(jail, &script, w).await;
    assert_eq!(code, 0, "{out}");
    let eperm = libc::EPERM;
    assert!(out.contains(&format!("keyctl -1 {eperm}")), "{out}");
    assert!(out.contains(&format!("add_key -1 {eperm}")), "{out}");
}
