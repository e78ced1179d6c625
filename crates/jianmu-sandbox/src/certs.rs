//! `jianmu sandbox tls init DIR`: the files of mutual TLS between a host and its
//! runners, made with one new certificate authority. Keys are written to files the
//! owner alone reads, never printed or passed on a command line.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// What [`tls_init`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInit {
    /// The authority's certificate and key (`ca.pem`, `ca-key.pem`): keep the key
    /// away from runners.
    pub ca: PathBuf,
    /// The host's folder: `ca.pem`, `cert.pem` (a client certificate), `key.pem`.
    pub host: PathBuf,
    /// The runners' folder, for `jianmu serve --tls-dir`: `ca.pem`, `cert.pem` (a
    /// server certificate for the names given), `key.pem`.
    pub runner: PathBuf,
}

/// Makes `dir` (which must not exist, or be empty) with a new certificate
/// authority, a host's client certificate under `dir/host` and a runner's server
/// certificate for `names` (host names or IP addresses) under `dir/runner`.
///
/// # Errors
/// `dir` holds files already (nothing is overwritten), a name that is neither a
/// host name nor an address, or the files cannot be written.
pub fn tls_init(dir: &Path, names: &[String]) -> Result<TlsInit, SandboxError> {
    let io = |what: String, source: std::io::Error| SandboxError::Io { what, source };
    let bad = |why: String| SandboxError::Settings(why);
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(bad(format!(
            "{} holds files already; give a new or empty folder",
            dir.display()
        )));
    }
    if names.is_empty() {
        return Err(bad("give the runner at least one name (--name)".into()));
    }
    let rc = |e: rcgen::Error| bad(format!("cannot make a certificate: {e}"));
    let ca_key = rcgen::KeyPair::generate().map_err(rc)?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "jianmu runners CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(rc)?;
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let leaf = |names: Vec<String>, common: &str, usage: rcgen::ExtendedKeyUsagePurpose| {
        let key = rcgen::KeyPair::generate().map_err(rc)?;
        let mut params = rcgen::CertificateParams::new(names)
            .map_err(|e| bad(format!("not a host name or address: {e}")))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, &issuer).map_err(rc)?;
        Ok::<_, SandboxError>((cert.pem(), key.serialize_pem()))
    };
    let host = leaf(
        Vec::new(),
        "jianmu host",
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    let runner = leaf(
        names.to_vec(),
        "jianmu runner",
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let made = TlsInit {
        ca: dir.to_owned(),
        host: dir.join("host"),
        runner: dir.join("runner"),
    };
    for folder in [&made.ca, &made.host, &made.runner] {
        let mut builder = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(builder.recursive(true), 0o700);
        builder
            .create(folder)
            .map_err(|e| io(format!("cannot make {}", folder.display()), e))?;
    }
    let (ca_pem, ca_key_pem) = (ca_cert.pem(), ca_key.serialize_pem());
    let files: [(PathBuf, &str, u32); 8] = [
        (made.ca.join("ca.pem"), &ca_pem, 0o644),
        (made.ca.join("ca-key.pem"), &ca_key_pem, 0o600),
        (made.host.join("ca.pem"), &ca_pem, 0o644),
        (made.host.join("cert.pem"), &host.0, 0o644),
        (made.host.join("key.pem"), &host.1, 0o600),
        (made.runner.join("ca.pem"), &ca_pem, 0o644),
        (made.runner.join("cert.pem"), &runner.0, 0o644),
        (made.runner.join("key.pem"), &runner.1, 0o600),
    ];
    for (path, text, mode) in files {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(made)
}
