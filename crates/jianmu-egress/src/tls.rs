//! HTTPS interception for credentials: the session's own certificate authority, a
//! certificate per host signed by it, and the upstream verified as usual.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::policy::Ready;
use crate::proxy::{
    HEAD_TIMEOUT, HeadError, Held, Record, Shared, answer, read_head, reason, refused_method,
    rewrite,
};

/// A session's certificate authority: made at its first intercepted connection's
/// setup, its key never leaves jianmu's memory.
pub(crate) struct Ca {
    pub(crate) pem: String,
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// Server configurations made so far, by host.
    servers: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Ca {
    pub(crate) fn new() -> Result<Self, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "jianmu session CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("cannot make the session's certificate authority: {e}"))?;
        Ok(Self {
            pem: cert.pem(),
            params,
            key,
            servers: Mutex::new(HashMap::new()),
        })
    }

    /// A TLS server configuration presenting a certificate for `host`.
    fn server_for(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(config) = servers.get(host) {
            return Ok(config.clone());
        }
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            rcgen::CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
        let chain = vec![cert.der().clone()];
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, der)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if servers.len() < 1024 {
            servers.insert(host.to_owned(), config.clone());
        }
        Ok(config)
    }
}

/// The client that verifies upstream servers: the system's roots, and
/// `SSL_CERT_FILE`'s where jianmu's own environment sets it.
fn verifier() -> Result<tokio_rustls::TlsConnector, String> {
    static CONNECTOR: OnceLock<Result<tokio_rustls::TlsConnector, String>> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("no trusted certificates found on this host".to_owned());
            }
            let mut config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
        })
        .clone()
}

/// Ends the client's TLS here, opens the upstream's, and forwards one request with
/// the credential set.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn intercept<S>(
    shared: &Shared,
    held: &Held,
    mut client: S,
    upstream: TcpStream,
    (host, port): (&str, u16),
    credential: &Ready,
    early: Vec<u8>,
    record: &mut Record,
) -> Option<&'static str>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    if !early.is_empty() {
        // A client that sent its hello before the answer: rare; refuse plainly.
        answer(
            &mut client,
            400,
            "Bad Request",
            "",
            "jianmu proxy: wait for the CONNECT answer\n",
        )
        .await;
        return Some("the client spoke before the tunnel opened");
    }
    let server = match shared.ca().and_then(|ca| ca.server_for(host)) {
        Ok(server) => server,
        Err(_) => {
            answer(
                &mut client,
                502,
                "Bad Gateway",
                "",
                "jianmu proxy: cannot make a certificate\n",
            )
            .await;
            return Some("the session's certificate could not be made");
        }
    };
    let Ok(connector) = verifier() else {
        answer(
            &mut client,
            502,
            "Bad Gateway",
            "",
            "jianmu proxy: no trusted certificates on the host\n",
        )
        .await;
        return Some("no trusted certificates on the host");
    };
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return Some("not a server name");
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return None;
    }
    let accept = tokio_rustls::TlsAcceptor::from(server).accept(client);
    let Ok(Ok(mut inner)) = tokio::time::timeout(HEAD_TIMEOUT, accept).await else {
        return Some(
            "the client's TLS handshake failed or took over 30 s (does it trust the session's certificate authority?)",
        );
    };
    let connect = tokio::time::timeout(HEAD_TIMEOUT, connector.connect(name, upstream));
    let mut outer = match connect.await {
        Ok(Ok(outer)) => outer,
        Err(_) => {
            answer(
                &mut inner,
                504,
                "Gateway Timeout",
                "",
                &format!("jianmu proxy: the TLS handshake with {host} took over 30 s\n"),
            )
            .await;
            return Some("the upstream's TLS handshake took over 30 s");
        }
        Ok(Err(_)) => {
            answer(
                &mut inner,
                502,
                "Bad Gateway",
                "",
                &format!("jianmu proxy: the certificate of {host} could not be verified\n"),
            )
            .await;
            return Some("the upstream's certificate could not be verified");
        }
    };
    let head = match read_head(&mut inner).await {
        Ok(head) => head,
        Err(HeadError::Gone) => return None,
        Err(HeadError::Bad(status, why)) => {
            answer(
                &mut inner,
                status,
                "Bad Request",
                "",
                &format!("jianmu proxy: {why}\n"),
            )
            .await;
            return Some(why);
        }
    };
    if let Some(why) = refused_method(&head.method) {
        answer(
            &mut inner,
            405,
            reason(405),
            "",
            &format!("jianmu proxy: {why}\n"),
        )
        .await;
        return Some(why);
    }
    // Origin form only: an absolute URL would be routed by its own host.
    if !head.target.starts_with('/') {
        answer(
            &mut inner,
            400,
            "Bad Request",
            "",
            "jianmu proxy: inside the tunnel, send the path only (GET /path)\n",
        )
        .await;
        return Some("a request inside the tunnel named another target");
    }
    let authority = crate::proxy::authority(host, port, 443);
    let rewritten = rewrite(&head, &head.target, &authority, Some(credential));
    if outer.write_all(&rewritten).await.is_err() {
        return None;
    }
    record.sent += rewritten.len() as u64;

    crate::relay::pipe(inner, outer, held, record).await
}
