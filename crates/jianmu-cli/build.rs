//! Links the `jianmu` binary with packed relative relocations (`DT_RELR`) where the
//! linker can: the dynamic loader then applies the binary's tens of thousands of
//! relative relocations from a compact table, which shortens every start of a
//! short-lived `jianmu call`. Older linkers link as before.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
