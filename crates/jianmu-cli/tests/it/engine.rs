//! A Docker engine the tests start for themselves, beside the machine's: its own data
//! root, exec root, pidfile and socket in a temporary folder, its own bridge (an engine
//! started with `--bridge none` removes the machine's `docker0`), no iptables rules,
//! gVisor's `runsc` registered as a runtime, and a `tcp://127.0.0.1` listener that
//! takes only clients with a certificate from its own test CA (mutual TLS; the
//! certificates are made with `openssl` for each engine). Dropping it stops the engine.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// The bridge the tests' engine attaches to; made once, left for the next run.
const BRIDGE: &str = "jianmu-test-br";

pub(crate) struct Engine {
    child: Child,
    /// `tcp://127.0.0.1:PORT`, mutual TLS only.
    pub(crate) tcp: String,
    /// A client certificate the engine accepts.
    pub(crate) tls: jianmu_runtime::TlsFiles,
    /// A client certificate from another CA, which it refuses.
    pub(crate) stranger: jianmu_runtime::TlsFiles,
    _dir: tempfile::TempDir,
}

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &Path, args: &str) {
    let out = jianmu_process::std_command("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` in `dir`, and a certificate it signs for `who` with `usage`.
fn certificates(dir: &Path, name: &str, who: &[(&str, &str)]) {
    openssl(
        dir,
        &format!(
            "req -x509 -newkey rsa:2048 -nodes -keyout {name}-ca-key.pem -out {name}-ca.pem -days 2 -subj /CN={name}-ca"
        ),
    );
    for (leaf, ext) in who {
        std::fs::write(dir.join(format!("{leaf}.ext")), ext).unwrap();
        openssl(
            dir,
            &format!(
                "req -newkey rsa:2048 -nodes -keyout {leaf}-key.pem -out {leaf}.csr -subj /CN={leaf}"
            ),
        );
        openssl(
            dir,
            &format!(
                "x509 -req -in {leaf}.csr -CA {name}-ca.pem -CAkey {name}-ca-key.pem -CAcreateserial -out {leaf}.pem -days 2 -extfile {leaf}.ext"
            ),
        );
    }
}

fn files(dir: &Path, ca: &str, leaf: &str) -> jianmu_runtime::TlsFiles {
    jianmu_runtime::TlsFiles {
        ca: dir.join(format!("{ca}-ca.pem")),
        cert: dir.join(format!("{leaf}.pem")),
        key: dir.join(format!("{leaf}-key.pem")),
    }
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
        certificates(
            d,
            "test",
            &[
                (
                    "server",
                    "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
                ),
                ("client", "extendedKeyUsage=clientAuth\n"),
            ],
        );
        certificates(d, "other", &[("stranger", "extendedKeyUsage=clientAuth\n")]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
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
            .arg("-H")
            .arg(format!("tcp://127.0.0.1:{port}"))
            .arg("--tlsverify")
            .arg("--tlscacert")
            .arg(d.join("test-ca.pem"))
            .arg("--tlscert")
            .arg(d.join("server.pem"))
            .arg("--tlskey")
            .arg(d.join("server-key.pem"))
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
            tcp: format!("tcp://127.0.0.1:{port}"),
            tls: files(d, "test", "client"),
            stranger: files(d, "other", "stranger"),
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
