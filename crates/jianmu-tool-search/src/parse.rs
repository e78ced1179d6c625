//! Reading DuckDuckGo's HTML results page.

use jianmu_net::Url;
use scraper::{ElementRef, Html, Selector};

/// One result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Hit {
    /// The title, markup stripped.
    pub title: String,
    /// The target URL (DuckDuckGo's redirect decoded).
    pub url: String,
    /// The snippet, markup stripped.
    pub snippet: String,
}

/// What a page turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// Results (possibly fewer than asked for).
    Results(Vec<Hit>),
    /// The page says there are no results.
    NoResults,
    /// A rate-limit or bot-challenge page.
    RateLimited,
    /// Neither results nor a known message: the layout changed.
    Unrecognised,
}

const MAX_TITLE: usize = 200;
const MAX_SNIPPET: usize = 500;

fn selector(s: &str) -> Selector {
    // The selectors are constants of this file; a typo fails every test at once.
    Selector::parse(s).unwrap_or_else(|_| Selector::parse("*").expect("`*` is a selector"))
}

/// Text of `el` with markup stripped and whitespace collapsed, cut to `max` chars.
fn text(el: ElementRef<'_>, max: usize) -> String {
    // Text nodes only, and none inside script or style: a snippet is data, not code.
    let joined: String = el
        .descendants()
        .filter_map(|node| {
            let t = node.value().as_text()?;
            let parent = node
                .parent()
                .and_then(|p| p.value().as_element().map(|e| e.name()));
            (!matches!(parent, Some("script" | "style"))).then(|| t.to_string())
        })
        .collect();
    let collapsed = joined.split_whitespace().collect::<Vec<_>>().join(" ");
    match jianmu_tool_core::cut_chars(&collapsed, max) {
        (_, 0) => collapsed,
        (kept, _) => format!("{kept}..."),
    }
}

/// The target of a result link: DuckDuckGo wraps it as `//duckduckgo.com/l/?uddg=...`.
fn target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_owned()
    };
    let url = Url::parse(&absolute).ok()?;
    let is_redirect = url
        .host_str()
        .is_some_and(|h| h.ends_with("duckduckgo.com"))
        && url.path() == "/l/";
    if is_redirect {
        return url
            .query_pairs()
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned());
    }
    matches!(url.scheme(), "http" | "https").then(|| url.to_string())
}

/// Reads a results page.
pub fn parse(html: &str, max_results: usize) -> Page {
    let lower = html.to_ascii_lowercase();
    if lower.contains("anomaly-modal")
        || lower.contains("bots use duckduckgo too")
        || lower.contains("/anomaly.js")
    {
        return Page::RateLimited;
    }
    let doc = Html::parse_document(html);
    let mut hits = Vec::new();
    for result in doc.select(&selector("div.result")) {
        let class = result.value().attr("class").unwrap_or_default();
        if class.contains("result--ad") {
            continue;
        }
        let Some(link) = result.select(&selector("a.result__a")).next() else {
            continue;
        };
        let Some(url) = link.value().attr("href").and_then(target) else {
            continue;
        };
        let snippet = result
            .select(&selector(".result__snippet"))
            .next()
            .map(|s| text(s, MAX_SNIPPET))
            .unwrap_or_default();
        hits.push(Hit {
            title: text(link, MAX_TITLE),
            url,
            snippet,
        });
        if hits.len() >= max_results {
            break;
        }
    }
    if !hits.is_empty() {
        return Page::Results(hits);
    }
    if doc.select(&selector(".no-results")).next().is_some() || lower.contains("no results.") {
        return Page::NoResults;
    }
    Page::Unrecognised
}
