//! The Docker sandbox benchmark: runs the `docker` bench of jianmu-sandbox against the
//! release `jianmu` (built by the MCP benchmark just before) and prints its numbers
//! with the ratios against raw bollard calls made in the same run.

use std::collections::HashMap;

use crate::{cargo, output, root};

pub(crate) fn run() -> anyhow::Result<()> {
    let mut c = cargo();
    c.args([
        "bench",
        "--locked",
        "-p",
        "jianmu-sandbox",
        "--features",
        "docker",
        "--bench",
        "docker",
    ]);
    c.env("JIANMU_BENCH_RUNNER", root().join("target/release/jianmu"));
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
    // `docker-bench-many SESSIONS PER_SECOND MIB_PER_IDLE_CONTAINER`
    if let Some(many) = text
        .lines()
        .find_map(|l| l.strip_prefix("docker-bench-many "))
    {
        let v: Vec<&str> = many.split_whitespace().collect();
        if let [n, rate, mib] = v.as_slice() {
            println!(
                "  {n} sessions opened 10 at a time (each one's container started by its first call): {rate} sessions/s; an idle container uses {mib} MiB (median)"
            );
        }
    }
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
