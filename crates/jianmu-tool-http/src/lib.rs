//! The `http_request` tool (the Python tools' `HTTPTool`; docs/python-compat.md) and the
//! `web_fetch` tool (a page as Markdown), on shared guarded `reqwest` clients.
//!
//! Beyond the Python tool: HEAD and PATCH; the status line and selected response headers;
//! retries only where they are safe (connection errors, timeouts, 429/502/503/504; never
//! POST or PATCH unless asked) with exponential backoff, jitter and `Retry-After`; a
//! total deadline per call; a cap on decoded body bytes (a gzip bomb or an endless body
//! stops there); header values with CR or LF refused; and the SSRF guard of
//! [`jianmu_net`], on by default.
#![deny(missing_docs)]

mod fetch;
mod robots;

pub use fetch::{FetchArgs, FetchOutput, FetchSettings, WebFetch};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jianmu_net::{NetSettings, Url, reqwest};
use jianmu_tool_core::{CallContext, Structured, Tool, ToolConfig, ToolError, ToolHandle};
use jianmu_workspace::Saver;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Settings of `http_request` (`[tools.http_request]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// The guard and client settings.
    #[serde(flatten)]
    pub net: NetSettings,
    /// Default deadline of one call, retries included, in seconds.
    pub timeout_secs: f64,
    /// Most characters of the body returned; a longer body keeps its start and end and
    /// is saved whole to a file the answer names.
    pub max_response_length: usize,
    /// Most bytes of the decoded body read at all.
    pub max_body_bytes: usize,
    /// The longest `Retry-After` honoured, in seconds.
    pub max_retry_after_secs: f64,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            net: NetSettings::default(),
            timeout_secs: 30.0,
            max_response_length: 50_000,
            max_body_bytes: 10 * 1024 * 1024,
            max_retry_after_secs: 10.0,
        }
    }
}

/// HTTP methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum Method {
    /// GET.
    #[default]
    GET,
    /// POST.
    POST,
    /// PUT.
    PUT,
    /// DELETE.
    DELETE,
    /// HEAD.
    HEAD,
    /// PATCH.
    PATCH,
}

impl Method {
    fn idempotent(self) -> bool {
        !matches!(self, Method::POST | Method::PATCH)
    }

    fn as_reqwest(self) -> reqwest::Method {
        match self {
            Method::GET => reqwest::Method::GET,
            Method::POST => reqwest::Method::POST,
            Method::PUT => reqwest::Method::PUT,
            Method::DELETE => reqwest::Method::DELETE,
            Method::HEAD => reqwest::Method::HEAD,
            Method::PATCH => reqwest::Method::PATCH,
        }
    }
}

fn three() -> u32 {
    3
}

/// Arguments of `http_request`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpArgs {
    /// The URL (http or https).
    pub url: String,
    /// The method.
    #[serde(default)]
    pub method: Method,
    /// Request headers, name to value.
    pub headers: Option<Map<String, Value>>,
    /// A JSON body, sent with `Content-Type: application/json`.
    pub body: Option<Value>,
    /// Retries after connection errors, timeouts and 429/502/503/504 responses.
    #[serde(default = "three")]
    #[schemars(default = "three", range(max = 10))]
    pub retries: u32,
    /// Also retry POST and PATCH, which may not be safe to repeat.
    #[serde(default)]
    pub retry_non_idempotent: bool,
    /// Deadline of the whole call in seconds, retries included (default 30).
    #[schemars(range(min = 0.001, max = 600.0))]
    pub timeout: Option<f64>,
}

/// The `http_request` tool.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    client: reqwest::Client,
    settings: HttpSettings,
    saver: Option<Saver>,
}

/// Response headers worth showing the model.
const SHOWN_HEADERS: [&str; 6] = [
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "last-modified",
    "etag",
];

impl HttpRequest {
    /// A tool on `client` (which should be guarded: see [`jianmu_net::build_client`]).
    pub fn new(client: reqwest::Client, settings: HttpSettings) -> Self {
        Self {
            client,
            settings,
            saver: None,
        }
    }

    /// Saves a body too long to answer whole with `saver`, and answers its head and
    /// tail with where the whole is.
    #[must_use]
    pub fn with_saver(mut self, saver: Saver) -> Self {
        self.saver = Some(saver);
        self
    }

    /// Sends the request, retrying where safe, and renders the response.
    ///
    /// # Errors
    /// A refused URL or header, a request that failed on every attempt, the deadline.
    pub async fn request(&self, args: &HttpArgs) -> Result<Structured<HttpOutput>, ToolError> {
        let url = Url::parse(&args.url)
            .map_err(|e| ToolError::failed(format!("invalid URL `{}`: {e}", args.url)))?;
        jianmu_net::check_url(&url, &|h| self.settings.net.allows(h))
            .map_err(|refused| ToolError::failed(refused.0))?;
        let headers = headers(args.headers.as_ref())?;
        let total = Duration::try_from_secs_f64(args.timeout.unwrap_or(self.settings.timeout_secs))
            .unwrap_or(Duration::from_secs(30));
        let deadline = Instant::now() + total;
        let attempts = if args.method.idempotent() || args.retry_non_idempotent {
            args.retries + 1
        } else {
            1
        };
        let mut last_error = String::new();
        for attempt in 0..attempts {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut req = self
                .client
                .request(args.method.as_reqwest(), url.clone())
                .headers(headers.clone())
                .timeout(left);
            if let Some(body) = &args.body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string());
            }
            let wait = match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    if matches!(status, 429 | 502 | 503 | 504) && attempt + 1 < attempts {
                        last_error = format!("HTTP {status}");
                        retry_after(&resp, self.settings.max_retry_after_secs)
                            .unwrap_or_else(|| backoff(attempt))
                    } else {
                        return self.render(args.method, resp, deadline).await;
                    }
                }
                Err(e) => {
                    if jianmu_net::refusal(&e).is_some() || !(e.is_connect() || e.is_timeout()) {
                        return Err(ToolError::failed(format!(
                            "request failed: {}",
                            jianmu_net::describe(&e)
                        )));
                    }
                    last_error = jianmu_net::describe(&e);
                    backoff(attempt)
                }
            };
            let wait = wait.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(wait).await;
        }
        Err(ToolError::failed(format!(
            "request failed after {attempts} attempt{} within {} s: {last_error}",
            if attempts == 1 { "" } else { "s" },
            total.as_secs_f64()
        )))
    }

    async fn render(
        &self,
        method: Method,
        mut resp: reqwest::Response,
        deadline: Instant,
    ) -> Result<Structured<HttpOutput>, ToolError> {
        let status = resp.status();
        let mut shown = BTreeMap::new();
        let mut text = format!(
            "HTTP {} {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        );
        for name in SHOWN_HEADERS {
            if let Some(v) = resp.headers().get(name).and_then(|v| v.to_str().ok()) {
                text.push_str(&format!("{name}: {v}\n"));
                shown.insert(name.to_owned(), v.to_owned());
            }
        }
        let json_body = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("json"));
        if method == Method::HEAD {
            return Ok(Structured::new(
                text,
                HttpOutput {
                    status: status.as_u16(),
                    headers: shown,
                    json: None,
                },
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(
            left,
            jianmu_net::read_capped(&mut resp, self.settings.max_body_bytes),
        );
        let (bytes, cut_bytes) = match read.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return Err(ToolError::failed(format!(
                    "reading the body failed: {}",
                    jianmu_net::describe(&e)
                )));
            }
            Err(_) => return Err(ToolError::failed("reading the body ran past the deadline")),
        };
        let parsed: Option<Value> = (json_body && !cut_bytes)
            .then(|| serde_json::from_slice(&bytes).ok())
            .flatten();
        let body = match &parsed {
            Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
            // NUL bytes make a body binary, as they make a file binary for read_file.
            None if bytes.contains(&0) => format!(
                "(a binary body of {} bytes, with NUL bytes; not shown)",
                bytes.len()
            ),
            None => String::from_utf8_lossy(&bytes).into_owned(),
        };
        text.push('\n');
        let limit = self.settings.max_response_length;
        let (kept, rest) = jianmu_tool_core::cut_chars(&body, limit);
        match (&self.saver, rest) {
            (_, 0) => text.push_str(kept),
            (None, _) => {
                text.push_str(kept);
                text.push_str(&format!(
                    "\n... (response truncated: {rest} more characters)"
                ));
            }
            (Some(saver), _) => {
                // The head and the tail, and where the whole body is.
                let saved = saver.save(body.as_bytes()).unwrap_or_else(|why| why.0);
                text.push_str(&jianmu_workspace::head_and_tail(&body, limit, &saved));
            }
        }
        if cut_bytes {
            text.push_str(&format!(
                "\n... (body cut: only the first {} bytes were read)",
                self.settings.max_body_bytes
            ));
        }
        Ok(Structured::new(
            text,
            HttpOutput {
                status: status.as_u16(),
                headers: shown,
                json: parsed,
            },
        ))
    }
}

/// Headers the client sets from the request itself: a caller's value would contradict
/// the body actually sent.
const COMPUTED_HEADERS: [&str; 2] = ["content-length", "transfer-encoding"];

fn headers(given: Option<&Map<String, Value>>) -> Result<reqwest::header::HeaderMap, ToolError> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in given.into_iter().flatten() {
        let value = match value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            _ => {
                return Err(ToolError::failed(format!(
                    "header `{name}` must be a string"
                )));
            }
        };
        if value.contains(['\r', '\n']) || name.contains(['\r', '\n']) {
            return Err(ToolError::failed(format!(
                "refused header `{}`: CR and LF are not allowed in header names or values",
                name.escape_debug()
            )));
        }
        if COMPUTED_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name.trim()))
        {
            return Err(ToolError::failed(format!(
                "refused header `{}`: it is set from the body that is sent; leave it out",
                jianmu_tool_core::echo(name)
            )));
        }
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ToolError::failed(format!(
                "invalid header name `{}`",
                jianmu_tool_core::echo(name)
            ))
        })?;
        let value = reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| ToolError::failed(format!("invalid value for header `{name}`")))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// `Retry-After` in seconds, capped; `None` when absent or a date.
fn retry_after(resp: &reqwest::Response, cap: f64) -> Option<Duration> {
    let secs: f64 = resp
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Duration::try_from_secs_f64(secs.clamp(0.0, cap)).ok()
}

/// The wait before retry `attempt`: from 200 ms, doubling, at most 5 s.
fn backoff(attempt: u32) -> Duration {
    jianmu_net::backoff(attempt, Duration::from_millis(200), Duration::from_secs(5))
}

/// The structured result of `http_request`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct HttpOutput {
    /// The response's status code; 4xx and 5xx are answers too, not errors.
    pub status: u16,
    /// The response headers worth reading (content type, length, location, ...).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON, when it is JSON and was read whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<Value>,
}

impl Tool for HttpRequest {
    type Args = HttpArgs;
    type Output = Structured<HttpOutput>;
    type Error = ToolError;

    const NAME: &'static str = "http_request";

    const DESCRIPTION: &'static str = "Sends an HTTP request (GET, POST, PUT, DELETE, HEAD, PATCH) and returns the status line, \
     selected headers and the body (JSON pretty-printed; a long body keeps its start and \
     end, and the whole is saved to a file the answer names).\n\
     Retries connection errors, timeouts and 429/502/503/504 with backoff (not POST or \
     PATCH unless `retry_non_idempotent`). Private, loopback and cloud-metadata addresses \
     are refused unless allow-listed.";

    const EFFECTS: &'static [&'static str] = &["network"];

    async fn call(
        &self,
        args: HttpArgs,
        _cx: &CallContext,
    ) -> Result<Structured<HttpOutput>, ToolError> {
        self.request(&args).await
    }
}

fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let mut settings: HttpSettings = config.settings(HttpRequest::NAME)?;
    settings
        .net
        .allow_hosts
        .extend_from_slice(config.allow_hosts());
    let client = jianmu_net::client_for(HttpRequest::NAME, &settings.net)?;
    let saver = Saver::for_tool(config, HttpRequest::NAME)?;
    ToolHandle::new(HttpRequest::new(client, settings).with_saver(saver))
}

jianmu_tool_core::register_tool!(HttpRequest, build);
