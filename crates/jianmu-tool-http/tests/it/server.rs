//! A local hyper server with the routes the tests need, counting hits per path.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub(crate) struct Server {
    pub(crate) port: u16,
    hits: Arc<Mutex<HashMap<String, u32>>>,
}

impl Server {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub(crate) fn hits(&self, path: &str) -> u32 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    pub(crate) fn total_hits(&self) -> u32 {
        self.hits.lock().unwrap().values().sum()
    }
}

/// A port nothing listens on.
pub(crate) fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn bomb() -> Bytes {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    Bytes::from(gz.finish().unwrap())
}

fn reply(status: u16, ctype: Option<&str>, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(StatusCode::from_u16(status).unwrap());
    if let Some(c) = ctype {
        r = r.header("content-type", c);
    }
    r.body(Full::new(body.into())).unwrap()
}

async fn route(req: Request<Incoming>, port: u16, n: u32) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/json" => reply(
            200,
            Some("application/json"),
            r#"{"a": 1, "b": [true]}"#.replace(' ', ""),
        ),
        "/long" => reply(200, None, "x".repeat(10_000)),
        "/utf16" => reply(200, Some("text/plain"), utf16_le("\u{feff}héllo, 世界\n")),
        "/utf16-labelled" => reply(
            200,
            Some("text/plain; charset=utf-16be"),
            "plain text\n".encode_utf16().flat_map(u16::to_be_bytes).collect::<Vec<u8>>(),
        ),
        "/utf16-bare" => reply(200, None, utf16_le("no mark, no label\n")),
        "/echo" => {
            let method = req.method().to_string();
            let test = req
                .headers()
                .get("x-test")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            let ct = req
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let text = format!(
                "{method} x-test={test} {ct} {}",
                String::from_utf8_lossy(&body)
            );
            reply(200, Some("text/plain"), text)
        }
        "/flaky" if n <= 2 => reply(503, None, "busy"),
        "/flaky" => reply(200, None, "ok"),
        "/limited" if n == 1 => {
            let mut r = reply(429, None, "slow down");
            r.headers_mut().insert("retry-after", "1".parse().unwrap());
            r
        }
        "/limited" => reply(200, None, "ok"),
        "/down" => reply(503, None, "down"),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            reply(200, None, "late")
        }
        "/endless" => reply(200, Some("application/octet-stream"), vec![b'z'; 4 << 20]),
        "/bomb" => {
            let mut r = reply(200, Some("text/plain"), bomb());
            r.headers_mut()
                .insert("content-encoding", "gzip".parse().unwrap());
            r
        }
        "/loop" => {
            let mut r = reply(302, None, "");
            r.headers_mut().insert(
                "location",
                format!("http://127.0.0.1:{port}/loop").parse().unwrap(),
            );
            r
        }
        "/to-private" => {
            let mut r = reply(302, None, "");
            r.headers_mut()
                .insert("location", "http://10.0.0.1/".parse().unwrap());
            r
        }
        "/robots.txt" => reply(
            200,
            Some("text/plain"),
            "User-agent: *\nDisallow: /private\n\nUser-agent: otherbot\nDisallow: /\n",
        ),
        "/article" | "/private/article" => reply(200, Some("text/html; charset=utf-8"), article()),
        "/python-os" => reply(
            200,
            Some("text/html"),
            std::fs::read(PYTHON_OS_PAGE).expect("python3.11-doc is installed by cargo xtask test-all"),
        ),
        "/latin1" => reply(
            200,
            Some("text/html; charset=ISO-8859-1"),
            b"<html><body><article><h1>Caf\xe9</h1><p>cr\xe8me br\xfbl\xe9e</p></article></body></html>".to_vec(),
        ),
        "/deep" => {
            let n = 100_000;
            let page = format!("<html><body>{}deep text{}</body></html>", "<div>".repeat(n), "</div>".repeat(n));
            reply(200, Some("text/html"), page)
        }
        "/html-bomb" => {
            let mut r = reply(200, Some("text/html"), bomb());
            r.headers_mut()
                .insert("content-encoding", "gzip".parse().unwrap());
            r
        }
        "/pdf" => reply(200, Some("application/pdf"), b"%PDF-1.4\n%\xe2\xe3\n".to_vec()),
        // A real manual, served without a content type: the body says what it is.
        "/manual" => reply(
            200,
            None,
            std::fs::read(jianmu_test_support::MANUAL_PDF)
                .expect("libtasn1-doc is installed by cargo xtask test-all"),
        ),
        "/form-loop.pdf" => reply(200, Some("application/pdf"), jianmu_test_support::pdf::form_loop()),
        "/png" => reply(200, Some("image/png"), b"\x89PNG\r\n\x1a\n\0\0".to_vec()),
        "/moved" => {
            let mut r = reply(301, None, "");
            r.headers_mut()
                .insert("location", "/article".parse().unwrap());
            r
        }
        "/elsewhere" => {
            let mut r = reply(302, None, "");
            r.headers_mut().insert(
                "location",
                format!("http://localhost:{port}/article").parse().unwrap(),
            );
            r
        }
        _ => reply(404, None, "not found"),
    }
}

/// A real page no one here wrote: the Python 3.11 documentation of `os` (Debian's
/// python3.11-doc).
pub(crate) const PYTHON_OS_PAGE: &str = "/usr/share/doc/python3.11/html/library/os.html";

/// An article with navigation, a script and a footer around it, long enough to stand
/// out as the main content.
fn utf16_le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

pub(crate) fn article() -> String {
    let para = "<p>Ownership is a set of rules that govern how a program manages memory. \
                Some languages have garbage collection; in others, the programmer must \
                allocate and free memory explicitly.</p>";
    format!(
        "<html><head><title>Understanding Ownership</title><script>track()</script></head>\
         <body><nav><a href='/'>Home</a> | <a href='/blog'>Blog</a></nav><article>\
         <h1>Understanding Ownership</h1>{}<h2>The stack and the heap</h2>\
         <pre><code>let s = String::from(\"hello\");</code></pre>\
         <p>Read <a href='/ch04-02'>references and borrowing</a> next.</p>{}</article>\
         <footer>Site footer text</footer></body></html>",
        para.repeat(6),
        (0..200)
            .map(|i| format!("<p>Paragraph number {i} of the long tail of this chapter.</p>"))
            .collect::<String>()
    )
}

pub(crate) async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let counter = counter.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let n = {
                        let mut h = counter.lock().unwrap();
                        let e = h.entry(req.uri().path().to_owned()).or_insert(0);
                        *e += 1;
                        *e
                    };
                    async move { Ok::<_, Infallible>(route(req, port, n).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server { port, hits }
}
