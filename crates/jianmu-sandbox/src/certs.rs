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

/// The authority whose certificate is `ca` and whose key is `key` (PEM files), to mint
/// certificates with.
///
/// # Errors
/// Either file unreadable, or the key not the one of the certificate.
pub(crate) fn issuer(
    ca: &Path,
    key: &Path,
) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>, SandboxError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| SandboxError::Io {
            what: format!("cannot read {}", path.display()),
            source,
        })
    };
    let (ca_pem, key_pem) = (read(ca)?, read(key)?);
    let bad = |why: String| SandboxError::Settings(why);
    let key_pair = rcgen::KeyPair::from_pem(&key_pem)
        .map_err(|e| bad(format!("{} is not a private key: {e}", key.display())))?;
    use rustls::pki_types::pem::PemObject as _;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|e| bad(format!("{} is not a certificate: {e}", ca.display())))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| bad(format!("{} is not a certificate: {e}", ca.display())))?;
    if parsed.public_key().subject_public_key.data.as_ref() != key_pair.public_key_raw() {
        return Err(bad(format!(
            "{} is not the certificate authority's key: it does not match {}",
            key.display(),
            ca.display()
        )));
    }
    rcgen::Issuer::from_ca_cert_der(&der, key_pair)
        .map_err(|e| bad(format!("{} cannot sign: {e}", ca.display())))
}

/// A client certificate for session `id`, minted by `issuer`, valid from the start
/// of yesterday to the start of the day after tomorrow (UTC; at least a day left),
/// and its key.
///
/// # Errors
/// The system's randomness or the signature failing.
pub(crate) fn session_certificate(
    issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
    id: &str,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    SandboxError,
> {
    let rc =
        |e: rcgen::Error| SandboxError::Lost(format!("cannot mint the session's certificate: {e}"));
    let key = rcgen::KeyPair::generate().map_err(rc)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("jianmu session {id}"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    let day = |days: u64| {
        let (y, m, d) = civil(days);
        rcgen::date_time_ymd(y, m, d)
    };
    params.not_before = day(today.saturating_sub(1));
    params.not_after = day(today + 2);
    let cert = params.signed_by(&key, issuer).map_err(rc)?;
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| SandboxError::Lost(format!("cannot mint the session's certificate: {e}")))?;
    Ok((vec![cert.der().clone()], key))
}

/// The civil date (year, month, day) `days` after 1970-01-01.
fn civil(days: u64) -> (i32, u8, u8) {
    // Howard Hinnant's days-to-civil, for days since the epoch.
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        i32::try_from(y).unwrap_or(1970),
        u8::try_from(m).unwrap_or(1),
        u8::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates_of_known_days() {
        assert_eq!(super::civil(0), (1970, 1, 1));
        assert_eq!(super::civil(11_016), (2000, 2, 29));
        assert_eq!(super::civil(20_793), (2026, 12, 6));
    }
}
