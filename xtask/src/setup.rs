//! The preflight of `cargo xtask test-all`: finds what the checks need, says what it
//! found, and installs what is missing, so README's test command works on a fresh
//! Debian-like machine.
//!
//! Cargo tools are installed with `cargo install --locked` at pinned versions; system
//! packages with `apt-get` when running as root (otherwise the one command to run is
//! printed and the preflight fails); a Docker engine is started when none answers.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// `cargo-nextest`, at the version CI is known to work with.
const NEXTEST: &str = "cargo-nextest@0.9.143";
/// `cargo-deny`, pinned: its config format moves between releases.
const DENY: &str = "cargo-deny@0.20.2";

/// One thing the checks need and the Debian package that provides it.
struct Need {
    what: &'static str,
    package: &'static str,
    present: fn() -> bool,
}

const NEEDS: &[Need] = &[
    Need {
        what: "python3 (differential tests, MCP client)",
        package: "python3",
        present: || on_path("python3") && Path::new("/usr/bin/python3").exists(),
    },
    Need {
        what: "python3 venv (MCP client, bench references)",
        package: "python3-venv",
        present: || quiet(Command::new("python3").args(["-c", "import ensurepip, venv"])),
    },
    Need {
        what: "rg (grep_search parity)",
        package: "ripgrep",
        present: || on_path("rg"),
    },
    Need {
        what: "fd (glob_search parity)",
        package: "fd-find",
        present: || on_path("fdfind") || on_path("fd"),
    },
    Need {
        what: "git (fixture repositories)",
        package: "git",
        present: || on_path("git"),
    },
    Need {
        what: "mkfifo (special-file tests)",
        package: "coreutils",
        present: || on_path("mkfifo"),
    },
    Need {
        what: "mount (full-disk tests)",
        package: "mount",
        present: || on_path("mount"),
    },
    Need {
        what: "ldd (sandbox image)",
        package: "libc-bin",
        present: || on_path("ldd"),
    },
    Need {
        what: "static busybox (sandbox image)",
        package: "busybox-static",
        present: || {
            // A dynamic busybox would need its libraries inside a FROM-scratch image.
            Path::new("/bin/busybox").exists() && !quiet(Command::new("ldd").arg("/bin/busybox"))
        },
    },
    Need {
        what: "Docker engine (sandbox tests)",
        package: "docker.io",
        present: || on_path("docker") && on_path("dockerd"),
    },
    Need {
        what: "gVisor runsc (sandbox tests under gVisor)",
        package: "runsc",
        present: || Path::new("/usr/bin/runsc").exists(),
    },
    Need {
        what: "Python 3.11 documentation (real pages for web_fetch)",
        package: "python3.11-doc",
        present: || Path::new("/usr/share/doc/python3.11/html/library/os.html").exists(),
    },
    Need {
        what: "a real PDF manual (read_file, web_fetch)",
        package: "libtasn1-doc",
        present: || Path::new("/usr/share/doc/libtasn1-doc/libtasn1.pdf").exists(),
    },
    Need {
        what: "groff (the PDF benchmark's document)",
        package: "groff",
        present: || on_path("gropdf"),
    },
    Need {
        what: "pdftotext (the PDF benchmark's reference)",
        package: "poppler-utils",
        present: || on_path("pdftotext"),
    },
    Need {
        what: "ip (a bridge for the tests' own engine)",
        package: "iproute2",
        present: || on_path("ip"),
    },
];

/// Checks and installs; prints one line per finding.
pub(crate) fn preflight() -> anyhow::Result<()> {
    let start = Instant::now();
    let root = is_root();
    eprintln!(
        "preflight: running as {}",
        if root { "root" } else { "a user" }
    );

    let mut packages = Vec::new();
    for need in NEEDS {
        let found = (need.present)();
        eprintln!(
            "preflight: {:<45} {}",
            need.what,
            if found {
                "found".to_owned()
            } else {
                format!("missing (Debian package {})", need.package)
            }
        );
        if !found && !packages.contains(&need.package) {
            packages.push(need.package);
        }
    }
    if !packages.is_empty() {
        let list = packages.join(" ");
        if !(root && on_path("apt-get")) {
            bail!("install what is missing first: sudo apt-get install -y {list}");
        }
        eprintln!("preflight: installing {list}");
        apt(&["update", "-qq"])?;
        let mut args = vec!["install", "-y", "-qq"];
        args.extend(&packages);
        apt(&args)?;
    }

    cargo_tool("nextest", NEXTEST)?;
    cargo_tool("deny", DENY)?;
    for (sub, component) in [("fmt", "rustfmt"), ("clippy", "clippy")] {
        if !quiet(crate::cargo().args([sub, "--version"])) {
            eprintln!("preflight: installing the {component} component");
            crate::run({
                let mut c = Command::new("rustup");
                c.args(["component", "add", component]);
                c
            })?;
        }
    }

    docker_engine(root)?;
    eprintln!("preflight: ready in {:.1?}", start.elapsed());
    Ok(())
}

/// Installs `cargo <sub>` from `spec` unless it answers `--version`.
fn cargo_tool(sub: &str, spec: &str) -> anyhow::Result<()> {
    let mut probe = crate::cargo();
    probe.args([sub, "--version"]);
    if let Some(version) = first_line(probe) {
        eprintln!("preflight: cargo {sub:<40} {version}");
        return Ok(());
    }
    eprintln!("preflight: cargo {sub:<40} missing: cargo install --locked {spec}");
    let mut c = crate::cargo();
    c.args(["install", "--locked", spec]);
    crate::run(c)
}

/// Makes sure a Docker engine answers, starting `dockerd` when it does not.
fn docker_engine(root: bool) -> anyhow::Result<()> {
    if quiet(Command::new("docker").arg("info")) {
        eprintln!("preflight: {:<45} answers", "Docker engine");
        return Ok(());
    }
    if !root {
        bail!("no Docker engine answers `docker info`: start one (sudo systemctl start docker)");
    }
    let log = std::env::temp_dir().join("jianmu-dockerd.log");
    eprintln!(
        "preflight: starting dockerd (log: {}); no registry is used",
        log.display()
    );
    let out = std::fs::File::create(&log).context("cannot create the dockerd log")?;
    Command::new("dockerd")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start dockerd")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if quiet(Command::new("docker").arg("info")) {
            eprintln!("preflight: {:<45} answers", "Docker engine");
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let tail = std::fs::read_to_string(&log).unwrap_or_default();
    bail!("dockerd did not answer within 60 s; its log:\n{tail}")
}

fn apt(args: &[&str]) -> anyhow::Result<()> {
    let mut c = Command::new("apt-get");
    c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    crate::run(c)
}

/// True when `cmd` runs and succeeds; its output is discarded.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first line `cmd` prints when it succeeds.
fn first_line(mut cmd: Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().next().unwrap_or("").trim().to_owned())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
