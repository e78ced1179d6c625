//! The sandbox image, built locally with no registry: `FROM scratch`, our runner
//! binary (`jianmu`, which `jianmu serve`s), the shared libraries it links (listed by
//! `ldd`), Debian's static busybox for a shell and core utilities, and, when given,
//! a Python interpreter with its standard library (Debian's `/usr/bin/python3` by
//! default) so `python_repl` works inside. `bash` in the image is busybox `ash`.

use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt as _;

use crate::SandboxError;

mod rootfs;

use rootfs::{Files, add_python, busybox_applets, read_stripped, rootfs_path, shared_libraries};

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
/// [`SandboxError::Unavailable`], with the address and the cause.
pub async fn connect(host: Option<&str>) -> Result<Docker, SandboxError> {
    connect_with(host, None).await
}

/// As [`connect`], over mutual TLS when `tls` is given (for a `tcp://` engine): the
/// engine's certificate must chain to `tls.ca`, and this client shows `tls.cert`.
///
/// # Errors
/// [`SandboxError::Unavailable`] when the engine does not answer, or refuses this
/// client, or a TLS file cannot be read.
pub async fn connect_with(
    host: Option<&str>,
    tls: Option<&super::settings::TlsFiles>,
) -> Result<Docker, SandboxError> {
    let address = host
        .map(str::to_owned)
        .or_else(|| std::env::var("DOCKER_HOST").ok())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
    let unavailable = |e: bollard::errors::Error| SandboxError::Unavailable {
        address: address.clone(),
        source: e.into(),
    };
    let docker = match tls {
        Some(tls) => Docker::connect_with_ssl(
            &address,
            &tls.key,
            &tls.cert,
            &tls.ca,
            120,
            bollard::API_DEFAULT_VERSION,
        ),
        None => Docker::connect_with_host(&address),
    }
    .map_err(unavailable)?;
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
/// [`SandboxError::Engine`] with the daemon's message when the build fails.
pub async fn build_image(
    docker: &Docker,
    tag: &str,
    context: &ImageContext,
) -> Result<(), SandboxError> {
    const FAILED: &str = "building the sandbox image failed";
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
                    return Err(SandboxError::engine(FAILED, detail));
                }
                if let Some(text) = info.stream {
                    tracing::debug!("build: {}", text.trim_end());
                }
            }
            Err(e) => return Err(SandboxError::engine(FAILED, e)),
        }
    }
    match docker.inspect_image(tag).await {
        Ok(_) => Ok(()),
        Err(e) => Err(SandboxError::engine(
            format!("the build finished but `{tag}` is missing"),
            e,
        )),
    }
}

/// Builds the image unless `tag` already holds one made from the same files.
/// Returns whether it built.
///
/// # Errors
/// As [`image_context`] (as [`SandboxError::Io`]) and [`build_image`].
pub async fn ensure_image(
    docker: &Docker,
    tag: &str,
    sources: &ImageSources,
) -> Result<bool, SandboxError> {
    let context = image_context(sources).map_err(|source| SandboxError::Io {
        what: "cannot assemble the sandbox image".into(),
        source,
    })?;
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
