//! A Docker engine the tests start for themselves, beside the machine's: its own data
//! root, exec root, pidfile and socket in a temporary folder, its own bridge (an engine
//! started with `--bridge none` removes the machine's `docker0`), no iptables rules,
//! and gVisor's `runsc` registered as a runtime. Dropping it stops the engine.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// The bridge the tests' engine attaches to; made once, left for the next run.
const BRIDGE: &str = "jianmu-test-br";

pub(crate) struct Engine {
    child: Child,
    /// `unix://` address of its socket.
    pub(crate) host: String,
    _dir: tempfile::TempDir,
}

impl Engine {
    /// Starts an engine and waits until it answers (60 s at most).
    pub(crate) fn start() -> Engine {
        make_bridge();
        // Short: a socket path must fit in 108 bytes.
        let dir = tempfile::Builder::new()
            .prefix("jm-engine-")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path().to_owned();
        let d = d.as_path();
        std::fs::write(
            d.join("daemon.json"),
            r#"{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}"#,
        )
        .unwrap();
        let sock = d.join("sock");
        let log = std::fs::File::create(d.join("log")).unwrap();
        let child = jianmu_process::std_command("dockerd")
            .arg("--config-file")
            .arg(d.join("daemon.json"))
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("pid"))
            .arg("-H")
            .arg(format!("unix://{}", sock.display()))
            .args(["--bridge", BRIDGE, "--iptables=false", "--ip6tables=false"])
            .args([
                "--ip-forward=false",
                "--ip-masq=false",
                "--storage-driver",
                "vfs",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd starts");
        let engine = Engine {
            child,
            host: format!("unix://{}", sock.display()),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !answers(&sock) {
            assert!(
                Instant::now() < deadline,
                "the tests' engine did not answer within 60 s: {}",
                std::fs::read_to_string(d.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        engine
    }
}

/// True when the engine behind `sock` answers `GET /_ping`.
fn answers(sock: &Path) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(sock) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200")
}

fn make_bridge() {
    let exists = jianmu_process::std_command("ip")
        .args(["link", "show", BRIDGE])
        .output()
        .is_ok_and(|o| o.status.success());
    if !exists {
        let made = jianmu_process::std_command("ip")
            .args(["link", "add", "name", BRIDGE, "type", "bridge"])
            .status()
            .expect("ip runs");
        assert!(
            made.success(),
            "cannot make the bridge {BRIDGE} (root is needed)"
        );
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SIGTERM lets it stop its containers and its containerd; SIGKILL after 20 s.
        let _ = jianmu_process::std_command("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
