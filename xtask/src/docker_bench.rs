//! The Docker sandbox benchmark: runs the `docker` bench of jianmu-sandbox against the
//! release `jianmu` (built by the MCP benchmark just before) and prints its numbers
//! with the ratios against raw bollard calls made in the same run.

use std::collections::HashMap;

use anyhow::Context as _;

use crate::{cargo, output, root};

/// A second Docker engine for the two-engine run: own data root, exec root, pidfile,
/// socket and bridge, no iptables rules. Stopped and removed when dropped.
struct SecondEngine {
    child: std::process::Child,
    dir: std::path::PathBuf,
    sock: std::path::PathBuf,
}

/// The bridge the second engine attaches to (an engine with `--bridge none` would
/// remove the machine's `docker0`); the tests' engines use the same one.
const BRIDGE: &str = "jianmu-test-br";

impl SecondEngine {
    /// `None` (with the reason printed) where no second engine can start.
    fn start() -> Option<Self> {
        use std::process::{Command, Stdio};
        let quiet = |c: &mut Command| {
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !quiet(Command::new("ip").args(["link", "show", BRIDGE]))
            && !quiet(Command::new("ip").args(["link", "add", "name", BRIDGE, "type", "bridge"]))
        {
            println!("(two-engine run skipped: cannot make the bridge {BRIDGE}; root is needed)");
            return None;
        }
        let dir = std::path::PathBuf::from(format!("/tmp/jm-bench-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let sock = dir.join("sock");
        let log = std::fs::File::create(dir.join("log")).ok()?;
        // Its own settings file: the machine's may set a data root of its own.
        std::fs::write(dir.join("daemon.json"), "{}").ok()?;
        // The machine's engine's storage driver where it is installed; else vfs.
        let driver = if std::path::Path::new("/usr/bin/fuse-overlayfs").exists() {
            "fuse-overlayfs"
        } else {
            "vfs"
        };
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(dir.join("daemon.json"))
            .args(["--storage-driver", driver])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("pid"))
            .arg("-H")
            .arg(format!("unix://{}", sock.display()))
            .args(["--bridge", BRIDGE, "--iptables=false", "--ip6tables=false"])
            .args(["--ip-forward=false", "--ip-masq=false"])
            .stdout(log.try_clone().ok()?)
            .stderr(log)
            .spawn();
        let Ok(child) = child else {
            println!("(two-engine run skipped: dockerd does not start)");
            return None;
        };
        let engine = Self { child, dir, sock };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !quiet(
            Command::new("docker")
                .arg("-H")
                .arg(engine.address())
                .arg("version"),
        ) {
            if std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(engine.dir.join("log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                println!(
                    "(two-engine run skipped: the second engine did not answer in 60 s: {})",
                    tail.join(" | ")
                );
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Some(engine)
    }

    fn address(&self) -> String {
        format!("unix://{}", self.sock.display())
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn run() -> anyhow::Result<()> {
    let second = SecondEngine::start();
    let mut c = bench("jianmu-sandbox", "docker");
    if let Some(engine) = &second {
        c.env("JIANMU_BENCH_SECOND_ENGINE", engine.address());
    }
    let text = match output(c) {
        Ok(text) => text,
        Err(e) => {
            println!("\ndocker sandbox benchmark not run (is a Docker engine up?): {e:#}");
            return Ok(());
        }
    };
    // `docker-bench NAME P50_US P99_US`
    let mut seen: HashMap<&str, (f64, f64)> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["docker-bench", name, p50, p99] = parts.as_slice()
            && let (Ok(p50), Ok(p99)) = (p50.parse(), p99.parse())
        {
            seen.insert(name, (p50, p99));
        }
    }
    let get = |name: &str| seen.get(name).copied().unwrap_or((f64::NAN, f64::NAN));
    let (warm, warm99) = get("warm_call");
    let (exec, _) = get("raw_exec");
    let (cold, _) = get("cold_call");
    let (raw_cold, _) = get("raw_cold");
    println!(
        "\nDocker sandbox (p50 over interleaved runs; goal: warm <= 5 ms, >= 9x exec; cold within 1.1x raw)"
    );
    println!(
        "  warm call through DockerSandbox (calculator): p50 {:.2} ms, p99 {:.2} ms",
        warm / 1e3,
        warm99 / 1e3
    );
    println!(
        "  raw bollard exec of `true` into the same container: p50 {:.1} ms -> warm call is {:.0}x faster",
        exec / 1e3,
        exec / warm
    );
    println!(
        "  cold call (create, attach, start, call, stop, remove): p50 {:.1} ms",
        cold / 1e3
    );
    println!(
        "  raw bollard create+start+wait+remove of `true`, same settings: p50 {:.1} ms -> cold is {:.2}x raw",
        raw_cold / 1e3,
        cold / raw_cold
    );
    let (pool_first, pool_first99) = get("pool_first_call");
    println!(
        "  first call of a new session from a warm pool (pool_size 2): p50 {:.2} ms, p99 {:.2} ms -> {:.0}x faster than raw create+start+wait+remove (goal >= 20x, <= 5 ms)",
        pool_first / 1e3,
        pool_first99 / 1e3,
        raw_cold / pool_first
    );
    // `docker-bench-copy N COPY_IN_MS TAR_C_MS PULL_MS TAR_X_MS`
    for line in text.lines() {
        if let Some(copy) = line.strip_prefix("docker-bench-copy ")
            && let [n, copy_in, tar_c, pull, tar_x] =
                copy.split_whitespace().collect::<Vec<_>>().as_slice()
            && let (Ok(pull_ms), Ok(tar_ms)) = (pull.parse::<f64>(), tar_x.parse::<f64>())
        {
            println!(
                "  copied workspace, {n} small files: in {copy_in} ms (tar -c of the folder: \
                 {tar_c} ms); every file back {pull} ms vs the engine's archive into tar -x \
                 {tar_x} ms ({:.2}x; goal <= 2x)",
                pull_ms / tar_ms
            );
        }
    }
    // `docker-bench-many[2] SESSIONS PER_SECOND MIB_PER_IDLE_CONTAINER`
    for (tag, what) in [
        (
            "docker-bench-many ",
            "opened 10 at a time (each one's container started by its first call)",
        ),
        (
            "docker-bench-many2 ",
            "across two engines (this machine's and a second one, least loaded first)",
        ),
    ] {
        let Some(many) = text.lines().find_map(|l| l.strip_prefix(tag)) else {
            continue;
        };
        if let [n, rate, mib] = many.split_whitespace().collect::<Vec<_>>().as_slice() {
            println!(
                "  {n} sessions {what}: {rate} sessions/s; an idle container uses {mib} MiB (median)"
            );
        }
    }
    drop(second);
    swarm()?;
    stdio_first_call()?;
    let phase = |name: &str| get(name).0 / 1e3;
    println!(
        "  phases (p50): ours: up {:.1} ms (create, attach, start, runner ready), down {:.1} ms (stdin closed, exit, remove); \
         raw: create {:.1}, start {:.1}, wait {:.1}, remove {:.1} ms",
        phase("cold_phase_up"),
        phase("cold_phase_down"),
        phase("raw_phase_create"),
        phase("raw_phase_start"),
        phase("raw_phase_wait"),
        phase("raw_phase_remove"),
    );
    Ok(())
}

/// Sandboxes placed by Swarm, on a three-node swarm of private engines made by
/// `tests/swarm/swarm.sh` for the run (root is needed) and removed after it.
fn swarm() -> anyhow::Result<()> {
    const BASE: &str = "/tmp/jianmu-swarm-bench";
    let script = root().join("tests/swarm/swarm.sh");
    let swarm_sh = |what: &str| {
        std::process::Command::new("bash")
            .arg(&script)
            .arg(what)
            .env("JMSW_BASE", BASE)
            .output()
    };
    let _ = swarm_sh("down");
    match swarm_sh("up") {
        Ok(out) if out.status.success() => {}
        _ => {
            let _ = swarm_sh("down");
            println!("  (Swarm run skipped: tests/swarm/swarm.sh up failed; root is needed)");
            return Ok(());
        }
    }
    let mut c = bench("jianmu-sandbox", "swarm");
    c.env("JIANMU_BENCH_SWARM", BASE);
    let text = output(c).and_then(|swarm| {
        let mut c = bench("jianmu-runtime", "suspend");
        c.args(["--features", "docker"]);
        c.env("JIANMU_BENCH_SWARM", BASE);
        Ok(swarm + &output(c)?)
    });
    let _ = swarm_sh("down");
    let text = text?;
    let mut seen: HashMap<&str, f64> = HashMap::new();
    for line in text.lines() {
        if let ["docker-bench", name, p50, _] = line.split_whitespace().collect::<Vec<_>>()[..]
            && let Ok(p50) = p50.parse()
        {
            seen.insert(name, p50);
        }
    }
    let get = |name: &str| seen.get(name).copied().unwrap_or(f64::NAN) / 1e3;
    println!(
        "\nDocker Swarm (three engines of a test swarm on this machine's 2 cores; p50, interleaved)"
    );
    println!(
        "  first call of a new session from Swarm's warm replicated pool (2 tasks): {:.1} ms; \
         from the one-engine pool on one of its nodes: {:.1} ms ({:.1}x)",
        get("swarm_pool_first_call"),
        get("engine_pool_first_call"),
        get("swarm_pool_first_call") / get("engine_pool_first_call")
    );
    println!(
        "  cold placement (a one-replica service, to its first answer): {:.1} ms; a plain \
         engine's create+start+wait of `true`, same settings: {:.1} ms ({:.2}x; goal <= 1.3x)",
        get("swarm_cold_first_call"),
        get("raw_create_start_wait"),
        get("swarm_cold_first_call") / get("raw_create_start_wait")
    );
    println!(
        "  a session with a 10 MB copied workspace: suspend {:.0} ms (closing one: {:.0} ms); \
         resume to its first answer {:.0} ms (a new session's first answer: {:.0} ms)",
        get("suspend_10mb"),
        get("close_10mb"),
        get("resume_10mb_first_answer"),
        get("new_session_10mb_first_answer")
    );
    Ok(())
}

/// `cargo bench` of `krate`'s bench `name`, given the release `jianmu` as the runner.
fn bench(krate: &str, name: &str) -> std::process::Command {
    let mut c = cargo();
    c.args(["bench", "--locked", "-p", krate, "--bench", name]);
    c.env("JIANMU_BENCH_RUNNER", root().join("target/release/jianmu"));
    c
}

/// The containers whose owner label names process `pid`.
fn containers_of(pid: u32) -> usize {
    let out = std::process::Command::new("docker")
        .args(["ps", "--format", "{{.Label \"io.jianmu.sandbox.owner\"}}"])
        .output();
    let Ok(out) = out else { return 0 };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|owner| owner.split(':').nth(1) == Some(&pid.to_string()))
        .count()
}

/// `jianmu mcp` on stdio with the Docker sandbox: its first `tools/call` (bash `true`)
/// once the server has been up long enough for its container to start, with
/// `pool_size = 1` (its container taken at start) against `pool_size = 0` (started by
/// the first call), and its second call. Medians over 5 servers each.
fn stdio_first_call() -> anyhow::Result<()> {
    let jianmu = root().join("target/release/jianmu");
    let first = |pool: usize, tool: &str| -> anyhow::Result<(f64, f64)> {
        let dir = std::env::temp_dir().join(format!("jm-bench-stdio-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("jianmu.toml"),
            format!(
                "[execution]\ntool_runner = \"docker\"\n[execution.docker]\nimage = \"jianmu-sandbox:bench\"\npool_size = {pool}\n"
            ),
        )?;
        let mut child = std::process::Command::new(&jianmu)
            .arg("mcp")
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut lines = crate::mcp_bench::Lines::new(
            child.stdin.take().context("no stdin")?,
            std::io::BufReader::new(child.stdout.take().context("no stdout")?),
        );
        lines.handshake()?;
        // Up long enough for the warm case's two containers (its own and a spare);
        // the cold case waits as long.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while containers_of(child.id()) < 2 * pool.min(1) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let call = |id: u32| {
            if tool == "bash" {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"true"}}}}}}"#
                )
            } else {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"calculator","arguments":{{"input":"6*7"}}}}}}"#
                )
            }
        };
        let start = std::time::Instant::now();
        let reply = lines.ask(&call(1))?;
        let first = start.elapsed().as_secs_f64() * 1e3;
        let start = std::time::Instant::now();
        lines.ask(&call(2))?;
        let second = start.elapsed().as_secs_f64() * 1e3;
        drop(lines);
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        if !reply.contains("\"result\"") || reply.contains("\"isError\":true") {
            anyhow::bail!("unexpected reply: {reply}");
        }
        Ok((first, second))
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (tool, what) in [("calculator", "calculator `6*7`"), ("bash", "bash `true`")] {
        let (mut warm, mut cold, mut next) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            let (f, s) = first(1, tool)?;
            warm.push(f);
            next.push(s);
            cold.push(first(0, tool)?.0);
        }
        let (warm, cold, next) = (median(warm), median(cold), median(next));
        println!(
            "  jianmu mcp on stdio, first call ({what}) 0.5 s after its container is up: pool_size 1 {warm:.2} ms vs pool_size 0 {cold:.1} ms ({:.0}x; goal <= 5 ms); its second call {next:.2} ms",
            cold / warm
        );
    }
    Ok(())
}
