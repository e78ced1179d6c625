//! Helpers the workspace's tests share (a dev-dependency only; never linked into a
//! library or the `jianmu` binary).

use jianmu_tool_core::{ExecuteOptions, FunctionTool, ToolError, ToolHandle, ToolSet, ToolSpec};
use serde_json::Value;

pub mod pdf;

/// Prints `docker-bench NAME P50_US P99_US`, the line `cargo xtask bench` reads from
/// the Docker benchmarks.
pub fn report_bench(name: &str, mut times: Vec<std::time::Duration>) {
    times.sort();
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    println!("docker-bench {name} {:.1} {:.1}", at(0.5), at(0.99));
}

/// Runs `body` on the runtime the Docker benchmarks use (two workers, as the
/// machine has two cores).
pub fn block_on_bench<F: std::future::Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(body)
}

/// A real PDF from a Debian package (`libtasn1-doc`, which `cargo xtask test-all`
/// installs): the GNU Libtasn1 manual, 36 pages of text.
pub const MANUAL_PDF: &str = "/usr/share/doc/libtasn1-doc/libtasn1.pdf";

/// Calls `tool` with `args` through the real call path (merge, validation, the default
/// runner): its text, or `error: ` and the error.
pub async fn call(tool: &ToolHandle, args: Value) -> String {
    match tool.execute(args, ExecuteOptions::default()).await {
        Ok(out) => out.text,
        Err(e) => format!("error: {e}"),
    }
}

/// Live processes (not zombies) for which `keep` holds, by PID.
fn live_processes(keep: impl Fn(u32) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            }) && keep(*pid)
        })
        .collect()
}

/// Live processes (not zombies) whose command line, its arguments joined by spaces,
/// contains `needle`, by PID: how tests check that nothing a call started is left.
#[must_use]
pub fn running_with(needle: &str) -> Vec<u32> {
    live_processes(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|mut c| {
            for b in &mut c {
                if *b == 0 {
                    *b = b' ';
                }
            }
            String::from_utf8_lossy(&c).contains(needle)
        })
    })
}

/// Live processes whose working folder is `dir` or beneath it (what a call that
/// runs programs in a test's own folder may leave behind).
#[must_use]
pub fn running_in(dir: &std::path::Path) -> Vec<u32> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    live_processes(|pid| {
        std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
    })
}

/// What holds the network namespace `net:[id]` (as `readlink /proc/self/ns/net`
/// names it): processes inside it, and open descriptors of it, as `PID` or `PID/fd/N`.
/// Empty once the namespace is released.
#[must_use]
pub fn holding_network(id: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let target = std::path::PathBuf::from(id);
    let mut found = Vec::new();
    for pid in entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        if std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == target) {
            found.push(pid.to_string());
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok) {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l == target) {
                found.push(format!("{pid}/fd/{}", fd.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Probe tools for runner tests: `echo` (returns its string), `fail` (fails with
/// "no luck"), `slow` (sleeps an hour), `boom` (panics), `shell` (effect
/// `process:exec`, echoes).
///
/// # Panics
/// Never: the specs are valid.
#[must_use]
pub fn probes() -> ToolSet {
    let echo = FunctionTool::from_sync(ToolSpec::new("echo", "Echoes."), |v| {
        Ok(v.as_str().unwrap_or_default().into())
    });
    let fail = FunctionTool::from_sync(ToolSpec::new("fail", "Fails."), |_| {
        Err(ToolError::failed("no luck"))
    });
    let slow = FunctionTool::new(ToolSpec::new("slow", "Sleeps."), |_| async {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        Ok("woke".into())
    });
    let boom = FunctionTool::from_sync(ToolSpec::new("boom", "Panics."), |_| panic!("kaboom"));
    let shell = FunctionTool::from_sync(
        ToolSpec::new("shell", "Runs.").with_effect_tags(["process:exec"]),
        |v| Ok(v.as_str().unwrap_or_default().into()),
    );
    ToolSet::from_tools(
        [echo, fail, slow, boom, shell].map(|t| ToolHandle::new(t).expect("a valid probe")),
    )
}

/// A small deterministic generator (xorshift64), so every run of a generated test
/// tests the same cases and a failure can be replayed from its seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (which must not be 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A real 3x2 PNG (red pixels), CRCs included: an image for the tools to read.
pub const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x03\x00\x00\x00\x02\x08\x02\x00\x00\x00\x12\x16\xf1\x4d\x00\x00\x00\x10\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\x00\x41\x0c\x70\x16\x00\x41\xd2\x05\xfb\x87\xf0\xb9\x48\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// The version of `python-lsp-server` the tests run.
pub const PYLSP_VERSION: &str = "1.13.1";

/// A venv under `target/NAME` with `packages` from PyPI, made on first use by one
/// process while the others wait; `then` runs once inside the lock after the install,
/// with the venv's folder. Answers the folder.
///
/// # Panics
/// When python3 or PyPI is not available: the tests cannot run without them.
fn venv(name: &str, packages: &[&str], then: impl FnOnce(&std::path::Path)) -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let venv = target.join(name);
    let ready = venv.join(format!("ready-{}", packages.join("-")));
    if ready.exists() {
        return venv;
    }
    std::fs::create_dir_all(&target).expect("target folder");
    let lock = std::fs::File::create(target.join(format!("{name}.lock"))).expect("lock file");
    lock.lock().expect("lock");
    if !ready.exists() {
        let status = jianmu_process::std_command("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv)
            .status()
            .expect("python3 is needed for these tests");
        assert!(status.success(), "cannot create {}", venv.display());
        let status = jianmu_process::std_command(venv.join("bin/python"))
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(packages)
            .status()
            .expect("pip runs");
        assert!(status.success(), "cannot install {packages:?} from PyPI");
        then(&venv);
        std::fs::write(&ready, "").expect("marker");
    }
    venv
}

/// `pylsp` (python-lsp-server with pyflakes, from PyPI) in a venv under `target/`,
/// made on first use; one process makes it while the others wait.
///
/// # Panics
/// When python3 or PyPI is not available: the tests cannot run without them.
#[must_use]
pub fn pylsp() -> std::path::PathBuf {
    let spec = format!("python-lsp-server[pyflakes]=={PYLSP_VERSION}");
    venv("lsp-venv", &[&spec, "pyflakes==3.2.0"], |_| {}).join("bin/pylsp")
}

/// The version of PyPI's `nbformat` the notebook tests validate with.
pub const NBFORMAT_VERSION: &str = "5.10.4";

/// PyPI's `nbformat` in a venv under `target/`: the python that has it, and the
/// folder of real notebooks from its source distribution's `tests`.
///
/// # Panics
/// When python3 or PyPI is not available.
#[must_use]
pub fn nbformat() -> (std::path::PathBuf, std::path::PathBuf) {
    let spec = format!("nbformat=={NBFORMAT_VERSION}");
    let venv = venv("nb-venv", &[&spec], |venv| {
        let python = venv.join("bin/python");
        let status = jianmu_process::std_command(&python)
            .args(["-m", "pip", "download", "-q", "--disable-pip-version-check"])
            .args(["--no-deps", "--no-binary", ":all:", "-d"])
            .arg(venv.join("sdist"))
            .arg(&spec)
            .status()
            .expect("pip runs");
        assert!(
            status.success(),
            "cannot download the nbformat sources from PyPI"
        );
        let unpack = format!(
            "import tarfile; tarfile.open('{0}/sdist/nbformat-{NBFORMAT_VERSION}.tar.gz').extractall('{0}/sdist', filter='data')",
            venv.display()
        );
        let status = jianmu_process::std_command(&python)
            .args(["-c", &unpack])
            .status()
            .expect("python runs");
        assert!(status.success(), "cannot unpack the nbformat sources");
    });
    (
        venv.join("bin/python"),
        venv.join(format!("sdist/nbformat-{NBFORMAT_VERSION}/tests")),
    )
}

/// The request heads an [`http_upstream`] got, in order.
pub type Heads = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// An HTTP server on its own thread at `ip` (a port of its own) answering every
/// request with `200` and `body`, keeping each request head: the outside, as a
/// session sees a host on `127.0.0.2`.
pub fn http_upstream(ip: &str, body: &'static str) -> (u16, Heads) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind((ip, 0)).expect("a port to listen on");
    let port = listener.local_addr().map_or(0, |a| a.port());
    let heads = Heads::default();
    let seen = heads.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, heads)
}

/// The lines of the audit log at `path` whose `kind` is `kind` (`egress`,
/// `expose_port`, ...).
pub fn audit_lines(path: &std::path::Path, kind: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["kind"] == kind)
        .collect()
}
