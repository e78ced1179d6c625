//! The sandbox image, built locally with no registry: `FROM scratch`, our runner
//! binary (`jianmu`, which `jianmu serve`s), the shared libraries it links (listed by
//! `ldd`), Debian's static busybox for a shell and core utilities, and, when given,
//! a Python interpreter with its standard library (Debian's `/usr/bin/python3` by
//! default) so `python_repl` works inside. `bash` in the image is busybox `ash`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt as _;

/// The label on the image holding the digest of its files, so an unchanged image is
/// not rebuilt.
pub const DIGEST_LABEL: &str = "io.jianmu.sandbox.digest";

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct ImageSources {
    /// The runner: a `jianmu` binary (it must have the `serve` command).
    pub runner: PathBuf,
    /// A statically linked busybox (Debian's `busybox-static`: `/bin/busybox`).
    pub busybox: PathBuf,
    /// The CA certificates for HTTPS from inside the sandbox (PEM); skipped when
    /// `None` or missing, and then HTTPS tools cannot start in the image.
    pub ca_bundle: Option<PathBuf>,
    /// A Python interpreter to copy in with its standard library and the libraries
    /// they link, so `python_repl` works inside; `None` leaves Python out.
    pub python: Option<PathBuf>,
}

impl ImageSources {
    /// `runner` with what Debian provides: `/bin/busybox` (`busybox-static`), the CA
    /// bundle, and `/usr/bin/python3` when it exists.
    pub fn debian(runner: PathBuf) -> Self {
        Self {
            runner,
            busybox: PathBuf::from("/bin/busybox"),
            ca_bundle: Some(PathBuf::from(CA_BUNDLE)),
            python: Path::new(PYTHON).exists().then(|| PathBuf::from(PYTHON)),
        }
    }
}

/// A build context: a tar of `Dockerfile` and `rootfs/`.
#[derive(Debug, Clone)]
pub struct ImageContext {
    /// The tar archive to send to the daemon.
    pub tar: Vec<u8>,
    /// A digest of every file in it (hex).
    pub digest: String,
    /// The generated Dockerfile.
    pub dockerfile: String,
}

const RUNNER_PATH: &str = "usr/local/bin/jianmu";

/// Debian's Python, put in the image when present.
pub const PYTHON: &str = "/usr/bin/python3";

/// Where Debian keeps the CA bundle; the image has it at the same path.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Connects to the daemon at `host` (default `DOCKER_HOST`, else the local socket) and
/// agrees on an API version.
///
/// # Errors
/// "sandbox unavailable", with the address and the cause.
pub async fn connect(host: Option<&str>) -> Result<Docker, String> {
    let address = host
        .map(str::to_owned)
        .or_else(|| std::env::var("DOCKER_HOST").ok())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
    let unavailable = |e: bollard::errors::Error| {
        format!("sandbox unavailable: cannot reach the Docker daemon at {address}: {e}")
    };
    let docker = Docker::connect_with_host(&address).map_err(unavailable)?;
    docker.negotiate_version().await.map_err(unavailable)
}

/// Assembles the build context from `sources`.
///
/// # Errors
/// A source that cannot be read, or `ldd` failing on the runner.
pub fn image_context(sources: &ImageSources) -> std::io::Result<ImageContext> {
    let mut files = Files::default();
    for dir in [
        "bin",
        "etc",
        "usr",
        "usr/local",
        "usr/local/bin",
        "workspace",
    ] {
        files.dir(dir, 0o755);
    }
    files.dir("tmp", 0o1777);
    let runner = read_stripped(&sources.runner).map_err(|e| {
        std::io::Error::other(format!(
            "cannot read the runner {}: {e}",
            sources.runner.display()
        ))
    })?;
    files.file(RUNNER_PATH, runner, 0o755);
    let busybox = std::fs::read(&sources.busybox).map_err(|e| {
        std::io::Error::other(format!(
            "cannot read busybox at {} (install Debian's busybox-static): {e}",
            sources.busybox.display()
        ))
    })?;
    files.file("bin/busybox", busybox, 0o755);
    for applet in busybox_applets(&sources.busybox)? {
        if applet != "busybox" {
            files.symlink(&format!("bin/{applet}"), "busybox");
        }
    }
    files.file(
        "bin/bash",
        b"#!/bin/sh\n# bash in this image is busybox ash\nexec /bin/sh \"$@\"\n".to_vec(),
        0o755,
    );
    let mut libs = shared_libraries(&sources.runner)?;
    if let Some(python) = &sources.python {
        libs.extend(add_python(&mut files, python)?);
    }
    libs.sort();
    libs.dedup();
    for lib in libs {
        let rel = rootfs_path(&lib);
        files.parents(&rel);
        let data = std::fs::read(&lib)
            .map_err(|e| std::io::Error::other(format!("cannot read {}: {e}", lib.display())))?;
        files.file(&rel, data, 0o755);
    }
    files.file(
        "etc/passwd",
        b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n".to_vec(),
        0o644,
    );
    files.file(
        "etc/group",
        b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
        0o644,
    );
    if let Some(bundle) = &sources.ca_bundle
        && let Ok(pem) = std::fs::read(bundle)
    {
        files.dir("etc/ssl", 0o755);
        files.dir("etc/ssl/certs", 0o755);
        files.file(&CA_BUNDLE[1..], pem, 0o644);
    }
    let digest = files.digest();
    let dockerfile = format!(
        "FROM scratch\n\
         COPY rootfs/ /\n\
         ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 SSL_CERT_FILE={CA_BUNDLE}\n\
         USER 65534:65534\n\
         WORKDIR /workspace\n\
         LABEL {DIGEST_LABEL}={digest}\n\
         ENTRYPOINT [\"/{RUNNER_PATH}\", \"serve\"]\n"
    );
    let tar = files.into_tar(&dockerfile)?;
    Ok(ImageContext {
        tar,
        digest,
        dockerfile,
    })
}

/// Builds the image from `context` and tags it `tag`.
///
/// # Errors
/// The daemon's message when the build fails.
pub async fn build_image(docker: &Docker, tag: &str, context: &ImageContext) -> Result<(), String> {
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let body = bollard::body_full(context.tar.clone().into());
    let mut stream = docker.build_image(options, None, Some(body));
    while let Some(step) = stream.next().await {
        match step {
            Ok(info) => {
                if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                    return Err(format!("building the sandbox image failed: {detail}"));
                }
                if let Some(text) = info.stream {
                    tracing::debug!("build: {}", text.trim_end());
                }
            }
            Err(e) => return Err(format!("building the sandbox image failed: {e}")),
        }
    }
    match docker.inspect_image(tag).await {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("the build finished but `{tag}` is missing: {e}")),
    }
}

/// Builds the image unless `tag` already holds one made from the same files.
/// Returns whether it built.
///
/// # Errors
/// As [`image_context`] and [`build_image`].
pub async fn ensure_image(
    docker: &Docker,
    tag: &str,
    sources: &ImageSources,
) -> Result<bool, String> {
    let context = image_context(sources).map_err(|e| e.to_string())?;
    let mut old = None;
    if let Ok(image) = docker.inspect_image(tag).await {
        let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get(DIGEST_LABEL) == Some(&context.digest) {
            return Ok(false);
        }
        old = image.id;
    }
    build_image(docker, tag, &context).await?;
    // The image the tag moved away from would only take up space.
    if let Some(old) = old {
        let _ = docker
            .remove_image(
                &old,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
    }
    Ok(true)
}

/// The runner without its debug info when `strip` is installed (a third of the size:
/// a smaller image builds faster and its pages load faster in a new container);
/// else as it is.
fn read_stripped(runner: &Path) -> std::io::Result<Vec<u8>> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!(".jianmu-runner-{}-{n}", std::process::id()));
    let stripped = jianmu_process::std_command("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&tmp)
        .arg(runner)
        .output()
        .is_ok_and(|out| out.status.success());
    let data = if stripped {
        std::fs::read(&tmp)
    } else {
        std::fs::read(runner)
    };
    let _ = std::fs::remove_file(&tmp);
    data
}

/// `path` inside `rootfs/`.
fn rootfs_path(path: &Path) -> String {
    path.strip_prefix("/")
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Parts of the standard library an agent's scripts do not need (tests, GUIs, the
/// installer, third-party packages, the static library).
fn skipped_in_stdlib(name: &str) -> bool {
    matches!(
        name,
        "test"
            | "idlelib"
            | "tkinter"
            | "turtledemo"
            | "ensurepip"
            | "lib2to3"
            | "site-packages"
            | "dist-packages"
    ) || name.starts_with("config-")
}

/// Copies `python` (the interpreter it points to, and a link at its own path) and
/// its standard library into `files`; returns the shared libraries they load.
fn add_python(files: &mut Files, python: &Path) -> std::io::Result<Vec<PathBuf>> {
    let real = python.canonicalize().map_err(|e| {
        std::io::Error::other(format!("cannot find Python at {}: {e}", python.display()))
    })?;
    let out = jianmu_process::std_command(&real)
        .args([
            "-I",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "cannot ask {} for its standard library",
            real.display()
        )));
    }
    let stdlib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let rel = rootfs_path(&real);
    files.parents(&rel);
    files.file(&rel, std::fs::read(&real)?, 0o755);
    if real != python {
        let link = rootfs_path(python);
        files.parents(&link);
        files.symlink(&link, &real.to_string_lossy());
    }
    let mut libs = shared_libraries(&real)?;
    let mut stack = vec![stdlib.clone()];
    files.parents(&rootfs_path(&stdlib.join("x")));
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if dir == stdlib && skipped_in_stdlib(&name) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)?;
            let rel = rootfs_path(&path);
            if meta.is_dir() {
                files.dir(&rel, 0o755);
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                files.symlink(&rel, &std::fs::read_link(&path)?.to_string_lossy());
            } else if meta.is_file() {
                use std::os::unix::fs::PermissionsExt as _;
                files.file(
                    &rel,
                    std::fs::read(&path)?,
                    meta.permissions().mode() & 0o755,
                );
                if name.ends_with(".so") {
                    libs.extend(shared_libraries(&path)?);
                }
            }
        }
    }
    Ok(libs)
}

fn busybox_applets(busybox: &Path) -> std::io::Result<Vec<String>> {
    let out = jianmu_process::std_command(busybox)
        .arg("--list")
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "`{} --list` failed: {}",
            busybox.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('/'))
        .map(str::to_owned)
        .collect())
}

/// The shared libraries `binary` loads, its loader included, as `ldd` lists them;
/// none for a static binary.
fn shared_libraries(binary: &Path) -> std::io::Result<Vec<PathBuf>> {
    let out = jianmu_process::std_command("ldd")
        .arg(binary)
        .output()
        .map_err(|e| std::io::Error::other(format!("cannot run `ldd` on the runner: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let all = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
        if all.contains("not a dynamic executable") || all.contains("statically linked") {
            return Ok(Vec::new());
        }
        return Err(std::io::Error::other(format!(
            "`ldd` failed on the runner: {}",
            all.trim()
        )));
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, right)) => right.trim().split(' ').next().unwrap_or_default(),
            None => line.split(' ').next().unwrap_or_default(),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The files of `rootfs/`, in order, with a digest over paths, modes and contents.
#[derive(Default)]
struct Files {
    entries: Vec<(String, Entry)>,
    seen: HashMap<String, usize>,
}

enum Entry {
    Dir(u32),
    File(Vec<u8>, u32),
    Symlink(String),
}

impl Files {
    fn push(&mut self, path: &str, entry: Entry) {
        if let Some(&i) = self.seen.get(path) {
            self.entries[i].1 = entry;
        } else {
            self.seen.insert(path.to_owned(), self.entries.len());
            self.entries.push((path.to_owned(), entry));
        }
    }
    /// Every folder above `path`, outermost first.
    fn parents(&mut self, path: &str) {
        let mut parents = Vec::new();
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            parents.push(p.to_string_lossy().into_owned());
            parent = p.parent();
        }
        for p in parents.iter().rev() {
            self.dir(p, 0o755);
        }
    }

    fn dir(&mut self, path: &str, mode: u32) {
        if !self.seen.contains_key(path) {
            self.push(path, Entry::Dir(mode));
        }
    }
    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.push(path, Entry::File(data, mode));
    }
    fn symlink(&mut self, path: &str, target: &str) {
        self.push(path, Entry::Symlink(target.to_owned()));
    }

    /// 64-bit FNV-1a over every entry; a cache key, not a security measure.
    fn digest(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (path, entry) in &self.entries {
            eat(path.as_bytes());
            match entry {
                Entry::Dir(mode) => eat(&[b'd', (*mode >> 8) as u8, *mode as u8]),
                Entry::File(data, mode) => {
                    eat(&[b'f', (*mode >> 8) as u8, *mode as u8]);
                    eat(&(data.len() as u64).to_le_bytes());
                    eat(data);
                }
                Entry::Symlink(target) => {
                    eat(b"l");
                    eat(target.as_bytes());
                }
            }
        }
        format!("{h:016x}")
    }

    fn into_tar(self, dockerfile: &str) -> std::io::Result<Vec<u8>> {
        let mut tar = tar::Builder::new(Vec::new());
        let header = |kind: tar::EntryType, mode: u32, size: u64| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h
        };
        let mut h = header(tar::EntryType::Regular, 0o644, dockerfile.len() as u64);
        tar.append_data(&mut h, "Dockerfile", dockerfile.as_bytes())?;
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        tar.append_data(&mut h, "rootfs/", std::io::empty())?;
        for (path, entry) in self.entries {
            let path = format!("rootfs/{path}");
            match entry {
                Entry::Dir(mode) => {
                    let mut h = header(tar::EntryType::Directory, mode, 0);
                    tar.append_data(&mut h, format!("{path}/"), std::io::empty())?;
                }
                Entry::File(data, mode) => {
                    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
                    tar.append_data(&mut h, path, data.as_slice())?;
                }
                Entry::Symlink(target) => {
                    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                    tar.append_link(&mut h, path, target)?;
                }
            }
        }
        tar.into_inner()
    }
}
