//! Names the enabled Cargo features for `--version` (`JIANMU_FEATURES`, from Cargo's
//! `CARGO_FEATURE_*`, so the list cannot drift from `Cargo.toml`), and links the
//! `jianmu` binary with packed relative relocations (`DT_RELR`) where the linker can:
//! the dynamic loader then applies the binary's tens of thousands of relative
//! relocations from a compact table, which shortens every start of a short-lived
//! `jianmu call`. Older linkers link as before.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // `default` and `full` only group others.
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_owned))
        .map(|f| f.to_ascii_lowercase().replace('_', "-"))
        .filter(|f| f != "default" && f != "full")
        .collect();
    features.sort();
    println!("cargo:rustc-env=JIANMU_FEATURES={}", features.join(", "));
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.contains("linux-gnu") {
        return;
    }
    // `ld --help` lists `-z pack-relative-relocs` where binutils (2.38+) has it.
    #[allow(clippy::disallowed_methods)] // a build script, not a tool call
    let help = Command::new("ld").arg("--help").output();
    let supported = help
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("pack-relative-relocs"))
        .unwrap_or(false);
    if supported {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
