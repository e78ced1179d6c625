//! The `web_fetch` tool: a page as the Markdown of its main content, paged, on the
//! same guarded client as `http_request`.
//!
//! A redirect to another host is answered with its URL rather than followed (the
//! model decides whether to go there); robots.txt is honoured unless the settings say
//! otherwise; pages are kept for 15 minutes (bounded in count and bytes), so reading a
//! long page part by part fetches and converts it once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_net::{NetSettings, Url, reqwest};
use jianmu_tool_core::{CallContext, Structured, Tool, ToolConfig, ToolError, ToolHandle};
use serde::{Deserialize, Serialize};

use crate::robots::{MAX_ROBOTS, Robots};

/// The product token robots.txt groups are matched against.
const ROBOTS_AGENT: &str = "jianmu";

/// Settings of `web_fetch` (`[tools.web_fetch]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchSettings {
    /// The guard and client settings.
    #[serde(flatten)]
    pub net: NetSettings,
    /// Deadline of one call in seconds (robots.txt included).
    pub timeout_secs: f64,
    /// Most bytes of a (decoded) body read; the rest is not read.
    pub max_body_bytes: usize,
    /// Characters answered when a call gives no `max_length`.
    pub max_length: usize,
    /// Most characters of a PDF's text (its pages after are named, not read).
    pub max_pdf_chars: usize,
    /// Honour robots.txt (a page it disallows for `jianmu` or `*` is refused).
    pub respect_robots: bool,
    /// How long a fetched page is kept, in seconds (0: not kept).
    pub cache_secs: u64,
    /// Most pages kept.
    pub cache_entries: usize,
    /// Most bytes of pages kept.
    pub cache_bytes: usize,
}

impl Default for FetchSettings {
    fn default() -> Self {
        Self {
            net: NetSettings::default(),
            timeout_secs: 30.0,
            max_body_bytes: 10 * 1024 * 1024,
            max_length: 20_000,
            max_pdf_chars: 1_000_000,
            respect_robots: true,
            cache_secs: 15 * 60,
            cache_entries: 64,
            cache_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The most characters one call may ask for.
const MAX_LENGTH: usize = 200_000;

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchArgs {
    /// The URL (http or https).
    pub url: String,
    /// Most characters to return (default 20000).
    #[schemars(range(min = 1, max = 200_000))]
    pub max_length: Option<usize>,
    /// The character to start at: where the previous answer said to go on.
    #[serde(default)]
    pub start_index: usize,
    /// The body as it came (HTML source, not Markdown).
    #[serde(default)]
    pub raw: bool,
}

/// The structured result of `web_fetch`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct FetchOutput {
    /// The URL the content came from (after redirects on the same host).
    pub url: String,
    /// The response's status code.
    pub status: u16,
    /// Its content type.
    pub content_type: String,
    /// The page's title, for HTML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Characters of the whole content (Markdown, text or raw body).
    pub total_length: usize,
    /// Where this part starts.
    pub start_index: usize,
    /// Where the next part starts; absent when this part is the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_index: Option<usize>,
    /// Set when the page redirected to another host: fetch this URL to follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect: Option<String>,
}

/// One fetched page.
#[derive(Debug)]
struct Fetched {
    at: Instant,
    requested: String,
    url: String,
    status: u16,
    content_type: String,
    /// The decoded body, or a description of one that is not text.
    body: Arc<String>,
    /// Whether `body` is HTML to convert.
    html: bool,
    /// Only the first `max_body_bytes` were read.
    cut: bool,
    /// The conversion, once made.
    converted: Option<Arc<(Option<String>, String)>>,
    redirect: Option<String>,
}

impl Fetched {
    fn size(&self) -> usize {
        self.body.len() + self.converted.as_ref().map_or(0, |c| c.1.len())
    }
}

/// Pages kept, oldest first; robots.txt answers kept by origin.
#[derive(Debug, Default)]
struct Cache {
    pages: VecDeque<Fetched>,
    robots: VecDeque<(Instant, String, Robots)>,
}

/// The `web_fetch` tool.
#[derive(Debug, Clone)]
pub struct WebFetch {
    client: reqwest::Client,
    settings: FetchSettings,
    cache: Arc<Mutex<Cache>>,
}

impl WebFetch {
    /// A tool on `client`, which should be guarded and follow redirects on the same
    /// host only (`same_host_redirects`; see [`jianmu_net::build_client`]).
    pub fn new(client: reqwest::Client, settings: FetchSettings) -> Self {
        Self {
            client,
            settings,
            cache: Arc::default(),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(self.settings.cache_secs)
    }

    /// Fetches (or finds) the page and answers the part asked for.
    ///
    /// # Errors
    /// A refused URL, robots.txt, a failed request, an error status, the deadline.
    pub async fn fetch(&self, args: &FetchArgs) -> Result<Structured<FetchOutput>, ToolError> {
        let url = Url::parse(&args.url)
            .map_err(|e| ToolError::failed(format!("invalid URL `{}`: {e}", args.url)))?;
        jianmu_net::check_url(&url, &|h| self.settings.net.allows(h))
            .map_err(|refused| ToolError::failed(refused.0))?;
        let total = Duration::try_from_secs_f64(self.settings.timeout_secs)
            .unwrap_or(Duration::from_secs(30));
        let deadline = Instant::now() + total;
        let found = self.cached(url.as_str());
        let (body, html, meta) = match found {
            Some(hit) => hit,
            None => {
                if self.settings.respect_robots {
                    self.check_robots(&url, deadline).await?;
                }
                let page = tokio::time::timeout(total, self.get(&url, deadline))
                    .await
                    .map_err(|_| {
                        ToolError::failed(format!(
                            "no answer from {url} within {} s",
                            total.as_secs_f64()
                        ))
                    })??;
                let hit = (Arc::clone(&page.body), page.html, Meta::of(&page));
                self.keep(page);
                hit
            }
        };
        if let Some(to) = &meta.redirect {
            let text = format!(
                "{} redirected to another host: {to}\nCall web_fetch with that URL to read it.\n",
                meta.url
            );
            return Ok(Structured::new(
                text,
                FetchOutput {
                    url: meta.url,
                    status: meta.status,
                    content_type: meta.content_type,
                    title: None,
                    total_length: 0,
                    start_index: 0,
                    next_index: None,
                    redirect: Some(to.clone()),
                },
            ));
        }
        let (title, content) = if html && !args.raw {
            let converted = self
                .converted(url.as_str(), &body, &meta.url, deadline)
                .await?;
            (converted.0.clone(), Content::Shared(converted))
        } else {
            (None, Content::Body(body))
        };
        Ok(self.answer(args, &meta, title, content.text()))
    }

    /// A page kept from an earlier call, if still fresh.
    fn cached(&self, requested: &str) -> Option<(Arc<String>, bool, Meta)> {
        let ttl = self.ttl();
        let mut cache = self.cache();
        cache.pages.retain(|p| p.at.elapsed() < ttl);
        let page = cache.pages.iter().find(|p| p.requested == requested)?;
        Some((Arc::clone(&page.body), page.html, Meta::of(page)))
    }

    fn keep(&self, page: Fetched) {
        if self.settings.cache_secs == 0 || page.size() > self.settings.cache_bytes {
            return;
        }
        let mut cache = self.cache();
        cache.pages.retain(|p| p.requested != page.requested);
        cache.pages.push_back(page);
        self.evict(&mut cache);
    }

    fn evict(&self, cache: &mut Cache) {
        let mut size: usize = cache.pages.iter().map(Fetched::size).sum();
        while cache.pages.len() > self.settings.cache_entries || size > self.settings.cache_bytes {
            match cache.pages.pop_front() {
                Some(old) => size -= old.size(),
                None => break,
            }
        }
    }

    /// The page as Markdown, converted once and kept with the page.
    async fn converted(
        &self,
        requested: &str,
        body: &Arc<String>,
        url: &str,
        deadline: Instant,
    ) -> Result<Arc<(Option<String>, String)>, ToolError> {
        if let Some(done) = self
            .cache()
            .pages
            .iter()
            .find(|p| p.requested == requested)
            .and_then(|p| p.converted.clone())
        {
            return Ok(done);
        }
        let html = Arc::clone(body);
        let base = url.to_owned();
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let page = tokio::task::spawn_blocking(move || {
            jianmu_doc::html::to_markdown(&html, Some(&base), left)
        })
        .await
        .map_err(|_| ToolError::failed("the page could not be converted"))?
        .map_err(|e| ToolError::failed(e.0))?;
        let mut markdown = String::new();
        if let Some(title) = &page.title {
            markdown.push_str(&format!("# {title}\n\n"));
        }
        markdown.push_str(&page.markdown);
        let done = Arc::new((page.title, markdown));
        let mut cache = self.cache();
        if let Some(p) = cache.pages.iter_mut().find(|p| p.requested == requested) {
            p.converted = Some(Arc::clone(&done));
        }
        self.evict(&mut cache);
        Ok(done)
    }

    async fn check_robots(&self, url: &Url, deadline: Instant) -> Result<(), ToolError> {
        let origin = url.origin().ascii_serialization();
        let ttl = self.ttl();
        let known = {
            let mut cache = self.cache();
            cache.robots.retain(|(at, _, _)| at.elapsed() < ttl);
            cache
                .robots
                .iter()
                .find(|(_, o, _)| *o == origin)
                .map(|(_, _, r)| r.clone())
        };
        let robots = match known {
            Some(r) => r,
            None => {
                let r = self.read_robots(&origin, deadline).await?;
                let mut cache = self.cache();
                cache
                    .robots
                    .push_back((Instant::now(), origin.clone(), r.clone()));
                while cache.robots.len() > self.settings.cache_entries.max(1) {
                    cache.robots.pop_front();
                }
                r
            }
        };
        let mut path = url.path().to_owned();
        if let Some(q) = url.query() {
            path.push('?');
            path.push_str(q);
        }
        if robots.allows(&path) {
            Ok(())
        } else {
            Err(ToolError::failed(format!(
                "the site's robots.txt ({origin}/robots.txt) does not allow fetching {url} \
                 for automated agents; it was not fetched. Tell the user, who can open it \
                 themselves"
            )))
        }
    }

    /// The rules of `origin`'s robots.txt, as RFC 9309 says: redirects followed (five,
    /// to any host the guard allows); unavailable (any 4xx, or too many redirects)
    /// allows everything; unreachable (5xx, no connection) allows nothing.
    async fn read_robots(&self, origin: &str, deadline: Instant) -> Result<Robots, ToolError> {
        let robots_url = format!("{origin}/robots.txt");
        let unreadable = |why: String| {
            ToolError::failed(format!(
                "the site's robots.txt ({robots_url}) could not be read ({why}), so the page \
                 was not fetched"
            ))
        };
        // Redirects are followed to another host too (RFC 9309 asks for five), each
        // through the same guard; the file found at the end is the site's.
        let mut at = robots_url.clone();
        let mut hops = 0;
        let mut resp = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let resp = self
                .client
                .get(&at)
                .timeout(left)
                .send()
                .await
                .map_err(|e| unreadable(jianmu_net::describe(&e)))?;
            if !resp.status().is_redirection() {
                break resp;
            }
            let next = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|to| Url::parse(&at).ok()?.join(to).ok())
                .filter(|next| {
                    jianmu_net::check_url(next, &|h| self.settings.net.allows(h)).is_ok()
                });
            match next {
                Some(next) if hops < 5 => {
                    hops += 1;
                    at = next.to_string();
                }
                // Unavailable, as RFC 9309 treats too many redirects.
                _ => return Ok(Robots::allow_all()),
            }
        };
        let status = resp.status().as_u16();
        match status {
            200..=299 => {}
            // Unavailable (every 4xx, 401 and 403 included): RFC 9309 lets crawlers in.
            400..=499 => return Ok(Robots::allow_all()),
            _ => return Err(unreadable(format!("HTTP {status}"))),
        }
        let (bytes, _) = jianmu_net::read_capped(&mut resp, MAX_ROBOTS)
            .await
            .map_err(|e| unreadable(jianmu_net::describe(&e)))?;
        Ok(Robots::parse(
            &String::from_utf8_lossy(&bytes),
            ROBOTS_AGENT,
        ))
    }

    async fn get(&self, url: &Url, deadline: Instant) -> Result<Fetched, ToolError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut resp = self
            .client
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.8,*/*;q=0.5",
            )
            .timeout(left)
            .send()
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "fetching {url} failed: {}",
                    jianmu_net::describe(&e)
                ))
            })?;
        let status = resp.status();
        let final_url = resp.url().to_string();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut page = Fetched {
            at: Instant::now(),
            requested: url.to_string(),
            url: final_url,
            status: status.as_u16(),
            content_type: content_type.clone(),
            body: Arc::default(),
            html: false,
            cut: false,
            converted: None,
            redirect: None,
        };
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| resp.url().join(l).ok());
            return match location {
                Some(to) => {
                    page.redirect = Some(to.to_string());
                    Ok(page)
                }
                None => Err(ToolError::failed(format!(
                    "{url} answered HTTP {} without a usable Location",
                    status.as_u16()
                ))),
            };
        }
        if !status.is_success() {
            return Err(ToolError::failed(format!(
                "{url} answered HTTP {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            )));
        }
        let (bytes, cut) = jianmu_net::read_capped(&mut resp, self.settings.max_body_bytes)
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "reading {url} failed: {}",
                    jianmu_net::describe(&e)
                ))
            })?;
        page.cut = cut;
        let kind = Kind::of(&content_type, &bytes);
        let text = match kind {
            Kind::Html | Kind::Text => {
                // UTF-16 found by its bytes alone is decoded as such.
                let sniffed = utf16(&content_type.to_ascii_lowercase(), &bytes)
                    .filter(|_| !content_type.to_ascii_lowercase().contains("charset="))
                    .map(|label| format!("text/plain; charset={label}"));
                let ct = sniffed
                    .as_deref()
                    .or((!content_type.is_empty()).then_some(content_type.as_str()));
                // A NUL is no character of any page; as HTML parsers do, it becomes U+FFFD.
                jianmu_doc::html::decode(&bytes, ct)
                    .0
                    .replace('\0', "\u{fffd}")
            }
            Kind::Pdf if cut => format!(
                "(a PDF document over {} bytes, the most read: a PDF cannot be read from its \
                 start alone)",
                self.settings.max_body_bytes
            ),
            Kind::Pdf => {
                let limits = jianmu_doc::pdf::Limits {
                    timeout: deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_secs(1)),
                    page_chars: MAX_LENGTH,
                    total_chars: self.settings.max_pdf_chars,
                    max_pages: 2_000,
                    ..jianmu_doc::pdf::Limits::default()
                };
                let name = url.to_string();
                let size = bytes.len();
                let read = tokio::task::spawn_blocking(move || {
                    jianmu_doc::pdf::read(&bytes, &[], &limits).map(|r| {
                        jianmu_doc::pdf::render(&r, &name, |_| {
                            "web_fetch reads no further into a PDF: download it into the \
                             workspace (if a tool here can) and read those pages with \
                             read_file and `pages`"
                                .to_owned()
                        })
                    })
                })
                .await;
                match read {
                    Ok(Ok(text)) => text,
                    Ok(Err(e)) => format!("(a PDF document of {size} bytes: {e})"),
                    Err(_) => format!("(a PDF document of {size} bytes: reading it failed)"),
                }
            }
            Kind::Binary => format!(
                "(binary content, {}, {} bytes: not shown)",
                if content_type.is_empty() {
                    "no content type"
                } else {
                    content_type.as_str()
                },
                bytes.len()
            ),
        };
        page.html = kind == Kind::Html;
        page.body = Arc::new(text);
        Ok(page)
    }

    fn answer(
        &self,
        args: &FetchArgs,
        meta: &Meta,
        title: Option<String>,
        content: &str,
    ) -> Structured<FetchOutput> {
        let max = args
            .max_length
            .unwrap_or(self.settings.max_length)
            .clamp(1, MAX_LENGTH);
        let total = content.chars().count();
        let start = args.start_index.min(total);
        let part: String = content.chars().skip(start).take(max).collect();
        let end = start + part.chars().count();
        let next = (end < total).then_some(end);
        let mut text = String::with_capacity(part.len() + 200);
        if meta.cut {
            text.push_str(&format!(
                "(the page is over {} bytes; only that much was read)\n",
                self.settings.max_body_bytes
            ));
        }
        if start > 0 || next.is_some() {
            text.push_str(&format!(
                "[{}: characters {start}-{end} of {total}]\n\n",
                meta.url
            ));
        }
        if start >= total && total > 0 {
            text.push_str(&format!(
                "(nothing at start_index {}: the content has {total} characters)\n",
                args.start_index
            ));
        } else if total == 0 {
            text.push_str("(the page has no text content)\n");
        }
        text.push_str(&part);
        if let Some(n) = next {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "\n[{} more characters: call web_fetch with start_index={n} to read on]",
                total - n
            ));
        }
        Structured::new(
            text,
            FetchOutput {
                url: meta.url.clone(),
                status: meta.status,
                content_type: meta.content_type.clone(),
                title,
                total_length: total,
                start_index: start,
                next_index: next,
                redirect: None,
            },
        )
    }
}

/// What an answer says about the page besides its content.
#[derive(Debug)]
struct Meta {
    url: String,
    status: u16,
    content_type: String,
    redirect: Option<String>,
    cut: bool,
}

impl Meta {
    fn of(page: &Fetched) -> Self {
        Self {
            url: page.url.clone(),
            status: page.status,
            content_type: page.content_type.clone(),
            redirect: page.redirect.clone(),
            cut: page.cut,
        }
    }
}

enum Content {
    Shared(Arc<(Option<String>, String)>),
    Body(Arc<String>),
}

impl Content {
    fn text(&self) -> &str {
        match self {
            Content::Shared(c) => &c.1,
            Content::Body(b) => b,
        }
    }
}

/// The UTF-16 form of a body, when it is UTF-16: by the charset it is sent with, its
/// byte-order mark, or (with neither) its first bytes, where ASCII text in UTF-16 has
/// a NUL in every other byte.
fn utf16(content_type_lower: &str, body: &[u8]) -> Option<&'static str> {
    if let Some(at) = content_type_lower.find("charset=") {
        let label = content_type_lower[at + 8..]
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(['"', '\'']);
        return match label {
            "utf-16" | "utf-16le" => Some("utf-16le"),
            "utf-16be" => Some("utf-16be"),
            _ => None,
        };
    }
    if body.starts_with(&[0xff, 0xfe]) {
        return Some("utf-16le");
    }
    if body.starts_with(&[0xfe, 0xff]) {
        return Some("utf-16be");
    }
    let head = &body[..body.len().min(512) & !1];
    if head.len() < 4 {
        return None;
    }
    let zeros = |parity: usize| {
        head.iter()
            .skip(parity)
            .step_by(2)
            .filter(|b| **b == 0)
            .count()
    };
    let pairs = head.len() / 2;
    let (even, odd) = (zeros(0), zeros(1));
    if odd * 10 >= pairs * 9 && even == 0 {
        Some("utf-16le")
    } else if even * 10 >= pairs * 9 && odd == 0 {
        Some("utf-16be")
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    Pdf,
    Binary,
}

impl Kind {
    fn textual(mime: &str) -> bool {
        mime.starts_with("text/")
            || mime.ends_with("json")
            || mime.ends_with("xml")
            || mime.ends_with("javascript")
            || mime.ends_with("yaml")
    }

    fn of(content_type: &str, body: &[u8]) -> Self {
        let ct = content_type.to_ascii_lowercase();
        let mime = ct.split(';').next().unwrap_or("").trim();
        if mime == "text/html" || mime == "application/xhtml+xml" {
            return Kind::Html;
        }
        if mime == "application/pdf" || body.starts_with(b"%PDF-") {
            return Kind::Pdf;
        }
        // UTF-16 text has NUL bytes in it, and is text all the same.
        if utf16(&ct, body).is_some() && (mime.is_empty() || Self::textual(mime)) {
            return Kind::Text;
        }
        if body.contains(&0) {
            return Kind::Binary;
        }
        if Self::textual(mime) {
            return Kind::Text;
        }
        let head = &body[..body.len().min(512)];
        let lower = String::from_utf8_lossy(head).to_ascii_lowercase();
        let lower = lower.trim_start();
        if lower.starts_with("<!doctype html") || lower.starts_with("<html") {
            return Kind::Html;
        }
        if mime.is_empty() && !head.contains(&0) {
            return Kind::Text;
        }
        Kind::Binary
    }
}

impl Tool for WebFetch {
    type Args = FetchArgs;
    type Output = Structured<FetchOutput>;
    type Error = ToolError;

    const NAME: &'static str = "web_fetch";

    const DESCRIPTION: &'static str = "Fetches a web page and returns its main content as Markdown (navigation, scripts and \
     boilerplate left out), any charset decoded; plain text and JSON come back as they are. \
     Long content comes in parts of `max_length` characters (default 20000): the answer \
     says which `start_index` reads on. `raw: true` returns the body as it came (HTML \
     source). A redirect to another host is not followed: the answer gives the new URL to \
     fetch. Pages whose robots.txt disallows automated agents are refused. Pages are kept \
     for 15 minutes, so reading on does not fetch again. Private, loopback and \
     cloud-metadata addresses are refused unless allow-listed. A PDF comes back as the \
     text of its pages, under `--- page N ---` lines (a page without a text layer, such \
     as a scan, is said to be an image).";

    const EFFECTS: &'static [&'static str] = &["network"];

    async fn call(
        &self,
        args: FetchArgs,
        _cx: &CallContext,
    ) -> Result<Structured<FetchOutput>, ToolError> {
        self.fetch(&args).await
    }
}

fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let mut settings: FetchSettings = config.settings(WebFetch::NAME)?;
    settings
        .net
        .allow_hosts
        .extend_from_slice(config.allow_hosts());
    settings.net.same_host_redirects = true;
    let client = jianmu_net::client_for(WebFetch::NAME, &settings.net)?;
    ToolHandle::new(WebFetch::new(client, settings))
}

jianmu_tool_core::register_tool!(WebFetch, build);
