//! The `duckduckgo_search` tool (alias `web_search`): web search with no API key,
//! through DuckDuckGo's HTML endpoint on the shared guarded client of [`jianmu_net`].
//!
//! Results are parsed with a real HTML parser (`scraper`): title, target URL (the
//! redirect link decoded) and snippet, markup stripped and lengths capped, formatted as
//! the Python tool does (`[n] title\nURL: link\nSnippet: text\n`; docs/python-compat.md). A rate-limit or challenge
//! page is a clear rate-limit error (retried with backoff first), never "no results";
//! a page of unknown layout says so.
#![deny(missing_docs)]

use std::time::Duration;

use jianmu_net::{NetSettings, Url, reqwest};
use jianmu_tool_core::{CallContext, Structured, Tool, ToolConfig, ToolError, ToolHandle};
use serde::{Deserialize, Serialize};

mod parse;

pub use parse::{Hit, Page, parse};

/// Settings of `duckduckgo_search` (`[tools.duckduckgo_search]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// The guard and client settings.
    #[serde(flatten)]
    pub net: NetSettings,
    /// The results endpoint.
    pub endpoint: String,
    /// Retries after a rate-limit page or a failed request.
    pub retries: u32,
    /// Deadline of one call, retries included, in seconds.
    pub timeout_secs: f64,
    /// Most bytes of a results page read.
    pub max_page_bytes: usize,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            net: NetSettings::default(),
            endpoint: "https://html.duckduckgo.com/html/".into(),
            retries: 2,
            timeout_secs: 20.0,
            max_page_bytes: 2 * 1024 * 1024,
        }
    }
}

fn five() -> usize {
    5
}

/// Safe-search levels.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SafeSearch {
    /// Filter explicit results.
    On,
    /// DuckDuckGo's default.
    #[default]
    Moderate,
    /// No filtering.
    Off,
}

/// How recent results must be.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TimeLimit {
    /// The last day.
    D,
    /// The last week.
    W,
    /// The last month.
    M,
    /// The last year.
    Y,
}

/// Arguments of `duckduckgo_search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to search for.
    #[schemars(length(min = 1, max = 500))]
    pub query: String,
    /// Most results returned.
    #[serde(default = "five")]
    #[schemars(default = "five", range(min = 1, max = 30))]
    pub max_results: usize,
    /// Region, such as `us-en`, `uk-en`, `de-de`; worldwide when absent.
    pub region: Option<String>,
    /// Safe-search level.
    #[serde(default)]
    pub safesearch: SafeSearch,
    /// Only results from the last day, week, month or year.
    pub timelimit: Option<TimeLimit>,
}

/// The `duckduckgo_search` tool.
#[derive(Debug, Clone)]
pub struct DuckDuckGoSearch {
    client: reqwest::Client,
    settings: SearchSettings,
}

impl DuckDuckGoSearch {
    /// A tool on `client` (which should be guarded: see [`jianmu_net::build_client`]).
    pub fn new(client: reqwest::Client, settings: SearchSettings) -> Self {
        Self { client, settings }
    }

    fn url(&self, args: &SearchArgs) -> Result<Url, ToolError> {
        let mut url = Url::parse(&self.settings.endpoint)
            .map_err(|e| ToolError::failed(format!("invalid search endpoint: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("q", &args.query);
            q.append_pair("kl", args.region.as_deref().unwrap_or("wt-wt"));
            q.append_pair(
                "kp",
                match args.safesearch {
                    SafeSearch::On => "1",
                    SafeSearch::Moderate => "-1",
                    SafeSearch::Off => "-2",
                },
            );
            if let Some(t) = args.timelimit {
                q.append_pair(
                    "df",
                    match t {
                        TimeLimit::D => "d",
                        TimeLimit::W => "w",
                        TimeLimit::M => "m",
                        TimeLimit::Y => "y",
                    },
                );
            }
        }
        jianmu_net::check_url(&url, &|h| self.settings.net.allows(h))
            .map_err(|refused| ToolError::failed(refused.0))?;
        Ok(url)
    }

    async fn fetch(&self, url: &Url) -> Result<(u16, String), String> {
        let mut resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| jianmu_net::describe(&e))?;
        let status = resp.status().as_u16();
        let (bytes, _) = jianmu_net::read_capped(&mut resp, self.settings.max_page_bytes)
            .await
            .map_err(|e| jianmu_net::describe(&e))?;
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Searches and formats the results.
    ///
    /// # Errors
    /// A rate limit that outlasted the retries, a failed request, a page of unknown
    /// layout, a refused endpoint.
    pub async fn search(&self, args: &SearchArgs) -> Result<Structured<SearchOutput>, ToolError> {
        let url = self.url(args)?;
        let attempts = self.settings.retries + 1;
        let work = async {
            let mut last = String::new();
            for attempt in 0..attempts {
                if attempt > 0 {
                    tokio::time::sleep(backoff(attempt - 1)).await;
                }
                let (status, page) = match self.fetch(&url).await {
                    Ok(r) => r,
                    Err(e) => {
                        last = format!("the request failed: {e}");
                        continue;
                    }
                };
                let parsed = parse(&page, args.max_results);
                if matches!(status, 202 | 403 | 429) || parsed == Page::RateLimited {
                    last = format!(
                        "DuckDuckGo is rate-limiting these searches (HTTP {status}, a challenge page); wait a minute before searching again"
                    );
                    continue;
                }
                return match parsed {
                    Page::Results(hits) => Ok(render(&hits)),
                    Page::NoResults => Ok(Structured::new(
                        format!("No results for `{}`.", args.query),
                        SearchOutput {
                            results: Vec::new(),
                        },
                    )),
                    Page::Unrecognised if status >= 400 => Err(ToolError::failed(format!(
                        "the search failed with HTTP {status}"
                    ))),
                    _ => Err(ToolError::failed(
                        "the results page has an unknown layout (DuckDuckGo may have changed it); no results could be read",
                    )),
                };
            }
            Err(ToolError::failed(format!(
                "search failed after {attempts} attempts: {last}"
            )))
        };
        let limit = Duration::try_from_secs_f64(self.settings.timeout_secs)
            .unwrap_or(Duration::from_secs(20));
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(ToolError::failed(format!(
                "the search ran past its {} s deadline",
                limit.as_secs_f64()
            )))
        })
    }
}

fn render(hits: &[Hit]) -> Structured<SearchOutput> {
    let text = hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "[{}] {}\nURL: {}\nSnippet: {}\n",
                i + 1,
                h.title,
                h.url,
                h.snippet
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    Structured::new(
        text,
        SearchOutput {
            results: hits.to_vec(),
        },
    )
}

/// The wait before retry `attempt`: from 500 ms, doubling, at most 8 s; a rate limit
/// needs a real pause.
fn backoff(attempt: u32) -> Duration {
    jianmu_net::backoff(attempt, Duration::from_millis(500), Duration::from_secs(8))
}

/// The structured result of `duckduckgo_search`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SearchOutput {
    /// The results, in the page's order; empty when the search found nothing.
    pub results: Vec<Hit>,
}

impl Tool for DuckDuckGoSearch {
    type Args = SearchArgs;
    type Output = Structured<SearchOutput>;
    type Error = ToolError;

    const NAME: &'static str = "duckduckgo_search";

    const DESCRIPTION: &'static str = "Searches the web with DuckDuckGo (no API key) and returns numbered results: title, URL \
     and snippet.\n\
     Good for current information, news and general knowledge. Options: `max_results`, \
     `region` (e.g. us-en), `safesearch` (on, moderate, off), `timelimit` (d, w, m, y).";

    const EFFECTS: &'static [&'static str] = &["network"];

    async fn call(
        &self,
        args: SearchArgs,
        _cx: &CallContext,
    ) -> Result<Structured<SearchOutput>, ToolError> {
        self.search(&args).await
    }
}

fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let mut settings: SearchSettings = config.settings(DuckDuckGoSearch::NAME)?;
    settings
        .net
        .allow_hosts
        .extend_from_slice(config.allow_hosts());
    let client = jianmu_net::client_for(DuckDuckGoSearch::NAME, &settings.net)?;
    ToolHandle::new(DuckDuckGoSearch::new(client, settings))
}

jianmu_tool_core::register_tool!(DuckDuckGoSearch, build);
