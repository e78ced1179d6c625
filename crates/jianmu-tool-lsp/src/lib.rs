//! Language-server tools: `diagnostics`, `definition`, `references`, `hover` and
//! `symbols`, answered by the language servers a developer already uses (`pylsp` for
//! Python, `rust-analyzer` for Rust, `gopls`, `typescript-language-server`, `clangd`;
//! any other by configuration), and the errors an edit introduced, for the file tools
//! (through [`jianmu_tool_core::Diagnose`]).
//!
//! One server per language and workspace, started on the first call that needs it,
//! runs supervised and isolated by `jianmu-process` (no outside network; writes only in
//! the workspace and its temporary folder), and is stopped after `idle_secs` unused or
//! when the tools' session ends. Every request has a time limit; every message read is
//! bounded before it is allocated; every request the server makes is answered.
//!
//! The client speaks the few messages it needs (initialize, document sync, the five
//! requests, published and pulled diagnostics) directly as JSON with `serde_json`,
//! rather than through `lsp-types`/`async-lsp`: the subset is small, and results are
//! read leniently (servers differ in which of the protocol's shapes they answer).
//! Settings are [`LspSettings`] (`[tools.lsp]`).
#![deny(missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use jianmu_process::Jail;
use jianmu_tool_core::{
    CallContext, Change, Diagnose, Tool, ToolConfig, ToolError, ToolHandle, ToolOutput,
};
use jianmu_workspace::Workspace;
use serde::Deserialize;
use serde_json::{Value, json};

mod server;
mod settings;

use server::Server;
pub use settings::{LspSettings, ServerSettings};

/// The settings key every language-server tool reads.
pub const SETTINGS: &str = "lsp";

/// The servers of one configuration scope (a session): one per language, started on
/// first use.
struct Servers {
    settings: LspSettings,
    all: std::collections::BTreeMap<String, ServerSettings>,
    ws: Arc<Workspace>,
    jail: Jail,
    slots: Mutex<HashMap<String, Slot>>,
    watched: std::sync::atomic::AtomicBool,
}

/// One language's server, when it runs; held while it starts.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Server>>>>;

/// The scope's [`Servers`], made by the first tool built in it.
#[derive(Default)]
struct Shared(OnceLock<Arc<Servers>>);

fn servers(config: &ToolConfig) -> Result<Arc<Servers>, ToolError> {
    let shared = config.scope().get::<Shared>();
    if let Some(s) = shared.0.get() {
        return Ok(Arc::clone(s));
    }
    let settings: LspSettings = config.settings(SETTINGS)?;
    let ws = jianmu_workspace::for_tool(config, SETTINGS)?;
    let jail = Jail::new(&settings.isolation, ws.root())
        .map_err(|e| ToolError::Config {
            tool: SETTINGS.into(),
            message: jianmu_tool_core::error_chain(&e),
        })?
        .sharing_network(config.scope().get::<jianmu_process::Network>());
    let all = settings.all_servers();
    // Each configured server's own folder is shown, wherever it is installed.
    let jail = jail.showing_programs(all.values().filter_map(|s| s.command.first()));
    let made = Arc::new(Servers {
        all,
        settings,
        ws,
        jail,
        slots: Mutex::default(),
        watched: std::sync::atomic::AtomicBool::new(false),
    });
    Ok(Arc::clone(shared.0.get_or_init(|| made)))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Servers {
    fn timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.settings.request_timeout_secs)
            .unwrap_or(Duration::from_secs(30))
    }

    fn wait(&self) -> Duration {
        Duration::try_from_secs_f64(self.settings.diagnostics_wait_secs)
            .unwrap_or(Duration::from_secs(15))
    }

    /// The language of `rel` by its extension.
    fn language_of(&self, rel: &Path) -> Option<&str> {
        let ext = rel.extension()?.to_str()?;
        self.all
            .iter()
            .find(|(_, s)| s.extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)))
            .map(|(name, _)| name.as_str())
    }

    fn language_for(&self, rel: &Path) -> Result<String, ToolError> {
        self.language_of(rel).map(str::to_owned).ok_or_else(|| {
            ToolError::failed(format!(
                "no language server is configured for `{}` (configured: {}); add one under [tools.lsp.servers]",
                jianmu_workspace::show(rel),
                self.all.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    /// The running server of `language`, started if need be.
    async fn get(self: &Arc<Self>, language: &str) -> Result<Arc<Server>, ToolError> {
        let Some(settings) = self.all.get(language) else {
            return Err(ToolError::failed(format!(
                "no language server is configured for `{}` (configured: {})",
                jianmu_tool_core::echo(language),
                self.all.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        self.watch();
        let slot = Arc::clone(lock(&self.slots).entry(language.to_owned()).or_default());
        let mut slot = slot.lock().await;
        if let Some(server) = slot.as_ref()
            && server.alive()
        {
            return Ok(Arc::clone(server));
        }
        *slot = None;
        let server = Server::start(
            language,
            settings,
            self.ws.root(),
            &self.jail,
            self.timeout(),
            self.settings.max_message,
        )
        .await?;
        let server = Arc::new(server);
        *slot = Some(Arc::clone(&server));
        Ok(server)
    }

    /// Languages whose server is running.
    fn running(&self) -> Vec<String> {
        lock(&self.slots)
            .iter()
            .filter(|(_, slot)| {
                slot.try_lock()
                    .is_ok_and(|s| s.as_ref().is_some_and(|s| s.alive()))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Stops servers unused for `idle_secs`, looking every quarter of it.
    fn watch(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.watched.swap(true, Ordering::Relaxed) {
            return;
        }
        let idle = Duration::from_secs(self.settings.idle_secs.max(1));
        let every = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(60));
        let started =
            jianmu_tool_core::spawn_periodic(Arc::downgrade(self), every, move |servers| {
                for slot in lock(&servers.slots).values() {
                    let Ok(mut slot) = slot.try_lock() else {
                        continue;
                    };
                    if slot
                        .as_ref()
                        .is_some_and(|s| s.idle_for() >= idle || !s.alive())
                        && let Some(server) = slot.take()
                        && let Ok(server) = Arc::try_unwrap(server)
                    {
                        tokio::spawn(server.shutdown());
                    }
                }
            });
        if !started {
            self.watched.store(false, Ordering::Relaxed);
        }
    }

    /// The text of `rel`, bounded.
    fn read(&self, rel: &Path) -> Result<String, ToolError> {
        let bytes = self.ws.read_to_end(rel, self.settings.max_file_size)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Opens `path` on its language's server, as it is on disk now.
    async fn open(self: &Arc<Self>, path: &str) -> Result<Opened, ToolError> {
        let rel = self.ws.relative_file(path)?;
        let language = self.language_for(&rel)?;
        let server = self.get(&language).await?;
        let text = self.read(&rel)?;
        let abs = self.ws.root().join(&rel);
        server.sync(&abs, &text, &language).await?;
        Ok(Opened {
            rel,
            abs,
            text,
            server,
        })
    }
}

/// A file as its server has it.
struct Opened {
    rel: PathBuf,
    abs: PathBuf,
    text: String,
    server: Arc<Server>,
}

/// The UTF-16 offset of the 1-based character `column` of `line_text`.
fn utf16_of(line_text: &str, column: u32) -> u32 {
    line_text
        .chars()
        .take(column.saturating_sub(1) as usize)
        .map(|c| c.len_utf16() as u32)
        .sum()
}

/// The 1-based character column of the UTF-16 offset `units` in `line_text`.
fn column_of(line_text: &str, units: u64) -> u64 {
    let mut seen = 0u64;
    let mut column = 1;
    for c in line_text.chars() {
        if seen >= units {
            break;
        }
        seen += c.len_utf16() as u64;
        column += 1;
    }
    column
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where `symbol` first occurs as a whole word in `text` (on `line` if given and it
/// occurs there): its 0-based line and 1-based character column.
fn find_symbol(text: &str, symbol: &str, line: Option<u32>) -> Option<(u32, u32)> {
    let mut first = None;
    for (n, line_text) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line_text[from..].find(symbol) {
            let start = from + at;
            let end = start + symbol.len();
            let before = line_text[..start].chars().next_back();
            let after = line_text[end..].chars().next();
            if !before.is_some_and(is_ident) && !after.is_some_and(is_ident) {
                let column = line_text[..start].chars().count() as u32 + 1;
                let hit = (n as u32, column);
                if line.is_none_or(|l| l == n as u32 + 1) {
                    return Some(hit);
                }
                first.get_or_insert(hit);
            }
            from = end.max(start + 1);
            while !line_text.is_char_boundary(from) {
                from += 1;
            }
        }
    }
    first
}

/// Arguments naming a place in code.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaceArgs {
    /// The file, relative to the workspace.
    pub path: Option<String>,
    /// The line, from 1.
    #[schemars(range(min = 1))]
    pub line: Option<u32>,
    /// The column, from 1, in characters (default: where `symbol` is on the line, or
    /// the line's first non-blank character).
    #[schemars(range(min = 1))]
    pub column: Option<u32>,
    /// A name to look up instead of a column: its first whole-word occurrence in
    /// `path` (on `line` when given), or, without `path`, the workspace's symbol of
    /// that name.
    pub symbol: Option<String>,
    /// The language, for `symbol` without `path` when several servers run (e.g.
    /// `python`, `rust`).
    pub language: Option<String>,
    /// `references` only: count the declaration itself (default true).
    pub include_declaration: Option<bool>,
}

/// Where a request points.
struct Target {
    server: Arc<Server>,
    uri: String,
    position: Value,
}

/// Shows locations as `path:line:col: text`, inside the workspace with the line's
/// text.
fn show_locations(servers: &Servers, value: &Value, max: usize) -> String {
    let list: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::Null => Vec::new(),
        one => vec![one],
    };
    if list.is_empty() {
        return "(none found)".to_owned();
    }
    let mut texts: HashMap<PathBuf, Option<String>> = HashMap::new();
    let mut out = String::new();
    for loc in list.iter().take(max) {
        let uri = loc
            .get("targetUri")
            .or_else(|| loc.get("uri"))
            .or_else(|| loc.pointer("/location/uri"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let start = loc
            .pointer("/targetSelectionRange/start")
            .or_else(|| loc.pointer("/range/start"))
            .or_else(|| loc.pointer("/location/range/start"));
        let line = start
            .and_then(|s| s.get("line"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let units = start
            .and_then(|s| s.get("character"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let Some(path) = server::path_of(uri) else {
            out.push_str(&format!("{}\n", jianmu_tool_core::shorten(uri, 300)));
            continue;
        };
        match path.strip_prefix(servers.ws.root()) {
            Ok(rel) => {
                let rel = rel.to_owned();
                let text = texts
                    .entry(rel.clone())
                    .or_insert_with(|| servers.read(&rel).ok())
                    .as_deref()
                    .and_then(|t| t.lines().nth(line as usize))
                    .unwrap_or("");
                let column = column_of(text, units);
                let (kept, _) = jianmu_tool_core::cut_chars(text.trim(), 200);
                out.push_str(&format!(
                    "{}:{}:{column}: {}\n",
                    jianmu_workspace::show(&rel),
                    line + 1,
                    jianmu_tool_core::escape_controls(kept)
                ));
            }
            Err(_) => out.push_str(&format!(
                "{}:{} (outside the workspace)\n",
                jianmu_tool_core::shorten(&path.to_string_lossy(), 300),
                line + 1
            )),
        }
    }
    if list.len() > max {
        out.push_str(&format!("({} more not shown)\n", list.len() - max));
    }
    out
}

const KINDS: [&str; 26] = [
    "file",
    "module",
    "namespace",
    "package",
    "class",
    "method",
    "property",
    "field",
    "constructor",
    "enum",
    "interface",
    "function",
    "variable",
    "constant",
    "string",
    "number",
    "boolean",
    "array",
    "object",
    "key",
    "null",
    "enum member",
    "struct",
    "event",
    "operator",
    "type parameter",
];

fn kind(value: &Value) -> &'static str {
    value
        .get("kind")
        .and_then(Value::as_u64)
        .and_then(|k| KINDS.get((k as usize).wrapping_sub(1)))
        .copied()
        .unwrap_or("symbol")
}

fn severity(value: &Value) -> &'static str {
    match value.get("severity").and_then(Value::as_u64) {
        Some(1) | None => "error",
        Some(2) => "warning",
        Some(3) => "info",
        _ => "hint",
    }
}

/// One diagnostic as `path:line:col: severity: message [source code]`.
fn show_diagnostic(rel: &Path, text: &str, d: &Value) -> String {
    let line = d
        .pointer("/range/start/line")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let units = d
        .pointer("/range/start/character")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let column = column_of(text.lines().nth(line as usize).unwrap_or(""), units);
    let message = d.get("message").and_then(Value::as_str).unwrap_or("");
    let message = jianmu_tool_core::shorten(&message.replace('\n', " "), 500).into_owned();
    let mut tag = d
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Some(code) = d.get("code").filter(|c| !c.is_null()) {
        let code = code
            .as_str()
            .map_or_else(|| code.to_string(), str::to_owned);
        tag = if tag.is_empty() {
            code
        } else {
            format!("{tag} {code}")
        };
    }
    let tag = if tag.is_empty() {
        String::new()
    } else {
        format!(" [{}]", jianmu_tool_core::shorten(&tag, 100))
    };
    format!(
        "{}:{}:{column}: {}: {}{tag}",
        jianmu_workspace::show(rel),
        line + 1,
        severity(d),
        jianmu_tool_core::escape_controls(&message)
    )
}

fn sorted(mut diagnostics: Vec<Value>) -> Vec<Value> {
    let key = |d: &Value| {
        (
            d.get("severity").and_then(Value::as_u64).unwrap_or(1),
            d.pointer("/range/start/line")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            d.pointer("/range/start/character")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        )
    };
    diagnostics.sort_by_key(key);
    diagnostics
}

/// What makes two diagnostics the same problem, wherever its line moved.
fn identity(d: &Value) -> (String, String, String) {
    let field = |k: &str| d.get(k).map(|v| v.to_string()).unwrap_or_default();
    (field("message"), field("source"), field("code"))
}

macro_rules! lsp_tool {
    ($ty:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone)]
        pub struct $ty {
            servers: Arc<Servers>,
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty)).finish_non_exhaustive()
            }
        }
    };
}

lsp_tool!(
    Diagnostics,
    "`diagnostics`: the errors and warnings a language server reports for files."
);
lsp_tool!(Definition, "`definition`: where a name is defined.");
lsp_tool!(References, "`references`: where a name is used.");
lsp_tool!(Hover, "`hover`: a name's type and documentation.");
lsp_tool!(
    Symbols,
    "`symbols`: the outline of a file, or the workspace's symbols matching a query."
);

impl Servers {
    /// The server and position a place argument names.
    async fn target(self: &Arc<Self>, args: &PlaceArgs) -> Result<Target, ToolError> {
        let symbol = args.symbol.as_deref().filter(|s| !s.is_empty());
        if let Some(path) = &args.path {
            let opened = self.open(path).await?;
            let (line, column) = match (args.line, args.column, symbol) {
                (Some(line), Some(column), _) => (line.saturating_sub(1), column),
                (line, None, Some(symbol)) => {
                    find_symbol(&opened.text, symbol, line).ok_or_else(|| {
                        ToolError::failed(format!(
                            "`{}` does not occur as a whole word in {}{}",
                            jianmu_tool_core::echo(symbol),
                            jianmu_workspace::show(&opened.rel),
                            line.map_or(String::new(), |l| format!(" (line {l})"))
                        ))
                    })?
                }
                (Some(line), None, None) => {
                    let line = line.saturating_sub(1);
                    let text = opened.text.lines().nth(line as usize).unwrap_or("");
                    let blank = text.chars().take_while(|c| c.is_whitespace()).count() as u32;
                    (line, blank + 1)
                }
                (None, _, _) => {
                    return Err(ToolError::failed("give `line` (and `column`), or `symbol`"));
                }
            };
            let Some(line_text) = opened.text.lines().nth(line as usize) else {
                return Err(ToolError::failed(format!(
                    "{} has {} lines; line {} is past its end",
                    jianmu_workspace::show(&opened.rel),
                    opened.text.lines().count(),
                    line + 1
                )));
            };
            return Ok(Target {
                uri: server::uri(&opened.abs),
                position: json!({"line": line, "character": utf16_of(line_text, column)}),
                server: opened.server,
            });
        }
        let Some(symbol) = symbol else {
            return Err(ToolError::failed(
                "give `path` with `line` or `symbol`, or a `symbol` to look up in the workspace",
            ));
        };
        let found = self
            .workspace_symbol(symbol, args.language.as_deref())
            .await?;
        let exact = found
            .iter()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(symbol))
            .or_else(|| found.first())
            .ok_or_else(|| {
                ToolError::failed(format!(
                    "no symbol `{}` in the workspace",
                    jianmu_tool_core::echo(symbol)
                ))
            })?;
        let uri = exact
            .pointer("/location/uri")
            .and_then(Value::as_str)
            .unwrap_or("");
        let path = server::path_of(uri)
            .and_then(|p| p.strip_prefix(self.ws.root()).ok().map(Path::to_owned))
            .ok_or_else(|| {
                ToolError::failed(format!(
                    "the symbol `{}` is outside the workspace",
                    jianmu_tool_core::echo(symbol)
                ))
            })?;
        let opened = self.open(&path.to_string_lossy()).await?;
        let position = exact
            .pointer("/location/range/start")
            .cloned()
            .unwrap_or_else(|| json!({"line": 0, "character": 0}));
        Ok(Target {
            uri: server::uri(&opened.abs),
            position,
            server: opened.server,
        })
    }

    /// `method` at the place `args` name, with `extra` parameters.
    async fn at(
        self: &Arc<Self>,
        args: &PlaceArgs,
        method: &str,
        mut extra: Value,
    ) -> Result<Value, ToolError> {
        let t = self.target(args).await?;
        extra["textDocument"] = json!({"uri": t.uri});
        extra["position"] = t.position;
        t.server.request(method, extra).await
    }

    /// `workspace/symbol` on the server of `language` (or the one running server).
    async fn workspace_symbol(
        self: &Arc<Self>,
        query: &str,
        language: Option<&str>,
    ) -> Result<Vec<Value>, ToolError> {
        let language = match language {
            Some(l) => l.to_owned(),
            None => {
                let running = self.running();
                match running.as_slice() {
                    [one] => one.clone(),
                    _ => {
                        return Err(ToolError::failed(format!(
                            "give `path`, or `language` ({}) to search the workspace's symbols",
                            self.all.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    }
                }
            }
        };
        let server = self.get(&language).await?;
        if !server.offers("workspaceSymbolProvider") {
            return Err(ToolError::failed(format!(
                "the {language} server `{}` cannot search the workspace's symbols: give `path` (with `symbol` or `line`)",
                server.command
            )));
        }
        let found = server
            .request("workspace/symbol", json!({"query": query}))
            .await?;
        Ok(found.as_array().cloned().unwrap_or_default())
    }

    async fn diagnose_file(self: &Arc<Self>, path: &str) -> Result<String, ToolError> {
        let opened = self.open(path).await?;
        let shown = jianmu_workspace::show(&opened.rel);
        let Some(found) = opened.server.diagnostics(&opened.abs, self.wait()).await? else {
            return Ok(format!(
                "{shown}: the server `{}` published no diagnostics within {} s",
                opened.server.command,
                self.wait().as_secs_f64()
            ));
        };
        if found.is_empty() {
            return Ok(format!("{shown}: no problems"));
        }
        let max = self.settings.max_results;
        let mut out: Vec<String> = sorted(found.clone())
            .iter()
            .take(max)
            .map(|d| show_diagnostic(&opened.rel, &opened.text, d))
            .collect();
        if found.len() > max {
            out.push(format!("({} more in {shown})", found.len() - max));
        }
        Ok(out.join("\n"))
    }
}

/// Arguments of `diagnostics`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiagnosticsArgs {
    /// Files to check, relative to the workspace.
    #[schemars(length(min = 1, max = 20))]
    pub paths: Vec<String>,
}

/// Arguments of `symbols`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SymbolsArgs {
    /// A file: its outline (classes, functions, … nested, with lines).
    pub path: Option<String>,
    /// Without `path`: the workspace's symbols whose names match this.
    pub query: Option<String>,
    /// The language, for `query` when several servers run.
    pub language: Option<String>,
}

impl Tool for Diagnostics {
    type Args = DiagnosticsArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "diagnostics";
    const DESCRIPTION: &'static str = "Checks files with their language's server (pylsp for Python, rust-analyzer for Rust, \
     gopls, typescript-language-server, clangd) and lists the problems it reports, as \
     `path:line:col: severity: message [source code]`, errors first. The file is read \
     as it is on disk now. The first call for a language starts its server, which \
     takes a moment.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(
        &self,
        args: DiagnosticsArgs,
        _cx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        if args.paths.is_empty() || args.paths.len() > 20 {
            return Err(ToolError::failed("give 1 to 20 `paths`"));
        }
        let mut parts = Vec::new();
        for path in &args.paths {
            parts.push(match self.servers.diagnose_file(path).await {
                Ok(text) => text,
                Err(e) if args.paths.len() > 1 => format!("{}: {e}", jianmu_tool_core::echo(path)),
                Err(e) => return Err(e),
            });
        }
        Ok(ToolOutput::text(parts.join("\n")))
    }
}

impl Tool for Definition {
    type Args = PlaceArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "definition";
    const DESCRIPTION: &'static str = "Finds where the name at a place in code is defined, as `path:line:col: text of that \
     line`, through the file's language server. Give `path` with `line` (and `column`, \
     from 1), or `path` with `symbol` (its first whole-word occurrence, on `line` if \
     given), or only `symbol` to find it in the workspace.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: PlaceArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let s = &self.servers;
        if args.path.is_none() {
            let Some(symbol) = args.symbol.as_deref().filter(|s| !s.is_empty()) else {
                return Err(ToolError::failed(
                    "give `path` with `line` or `symbol`, or a `symbol` to look up in the workspace",
                ));
            };
            let found = s.workspace_symbol(symbol, args.language.as_deref()).await?;
            let exact: Vec<Value> = found
                .iter()
                .filter(|f| f.get("name").and_then(Value::as_str) == Some(symbol))
                .cloned()
                .collect();
            let list = if exact.is_empty() { found } else { exact };
            return Ok(ToolOutput::text(show_locations(
                s,
                &Value::Array(list),
                s.settings.max_results,
            )));
        }
        let found = s.at(&args, "textDocument/definition", json!({})).await?;
        Ok(ToolOutput::text(show_locations(
            s,
            &found,
            s.settings.max_results,
        )))
    }
}

impl Tool for References {
    type Args = PlaceArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "references";
    const DESCRIPTION: &'static str = "Lists where the name at a place in code is used, as `path:line:col: text of that \
     line`, through the file's language server (`include_declaration`, default true). \
     Give `path` with `line` (and `column`, from 1), or `path` with `symbol` (its first \
     whole-word occurrence, on `line` if given), or only `symbol` to find it in the \
     workspace.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: PlaceArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let s = &self.servers;
        let context =
            json!({"context": {"includeDeclaration": args.include_declaration.unwrap_or(true)}});
        let found = s.at(&args, "textDocument/references", context).await?;
        Ok(ToolOutput::text(show_locations(
            s,
            &found,
            s.settings.max_results,
        )))
    }
}

impl Tool for Hover {
    type Args = PlaceArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "hover";
    const DESCRIPTION: &'static str = "Shows what the file's language server knows about the name at a place in code: its \
     type or signature and its documentation. Give `path` with `line` (and `column`, \
     from 1), or `path` with `symbol` (its first whole-word occurrence, on `line` if \
     given), or only `symbol` to find it in the workspace.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: PlaceArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let s = &self.servers;
        let found = s.at(&args, "textDocument/hover", json!({})).await?;
        let contents = found.get("contents").cloned().unwrap_or(Value::Null);
        let piece = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        };
        let text = match &contents {
            Value::Array(items) => items.iter().map(piece).collect::<Vec<_>>().join("\n\n"),
            other => piece(other),
        };
        let text = text.trim();
        Ok(ToolOutput::text(if text.is_empty() {
            "(the server has nothing to show here)".to_owned()
        } else {
            jianmu_tool_core::shorten(text, 8000).into_owned()
        }))
    }
}

/// The outline of `symbols`, nested by indentation.
fn outline(out: &mut Vec<String>, items: &[Value], depth: usize, max: usize) {
    for item in items {
        if out.len() >= max {
            return;
        }
        let name = item.get("name").and_then(Value::as_str).unwrap_or("?");
        let line = item
            .pointer("/selectionRange/start/line")
            .or_else(|| item.pointer("/range/start/line"))
            .or_else(|| item.pointer("/location/range/start/line"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        out.push(format!(
            "{}{} {}  (line {})",
            "  ".repeat(depth.min(20)),
            kind(item),
            jianmu_tool_core::shorten(name, 200),
            line + 1
        ));
        if let Some(children) = item.get("children").and_then(Value::as_array) {
            outline(out, children, depth + 1, max);
        }
    }
}

impl Tool for Symbols {
    type Args = SymbolsArgs;
    type Output = ToolOutput;
    type Error = ToolError;
    const NAME: &'static str = "symbols";
    const DESCRIPTION: &'static str = "With `path`: the outline of that file (classes, functions, methods, … nested, each \
     with its line), through its language server. With `query` instead: the \
     workspace's symbols whose names match it, each as `path:line:col`.";
    const EFFECTS: &'static [&'static str] = &["filesystem:read"];

    async fn call(&self, args: SymbolsArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let s = &self.servers;
        let max = s.settings.max_results * 5;
        if let Some(path) = &args.path {
            let opened = s.open(path).await?;
            let found = opened
                .server
                .request(
                    "textDocument/documentSymbol",
                    json!({"textDocument": {"uri": server::uri(&opened.abs)}}),
                )
                .await?;
            let items = found.as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                return Ok(ToolOutput::text("(no symbols)"));
            }
            let mut out = Vec::new();
            outline(&mut out, &items, 0, max);
            if out.len() >= max {
                out.push(format!("(cut at {max} symbols)"));
            }
            return Ok(ToolOutput::text(out.join("\n")));
        }
        let Some(query) = &args.query else {
            return Err(ToolError::failed(
                "give `path` for a file's outline, or `query` to search the workspace",
            ));
        };
        let found = s.workspace_symbol(query, args.language.as_deref()).await?;
        if found.is_empty() {
            return Ok(ToolOutput::text("(none found)"));
        }
        let lines: Vec<String> = found
            .iter()
            .take(s.settings.max_results)
            .map(|f| {
                format!(
                    "{} {}  {}",
                    kind(f),
                    f.get("name").and_then(Value::as_str).unwrap_or("?"),
                    show_locations(s, f, 1).trim_end()
                )
            })
            .collect();
        let mut text = lines.join("\n");
        if found.len() > s.settings.max_results {
            text.push_str(&format!(
                "\n({} more not shown)",
                found.len() - s.settings.max_results
            ));
        }
        Ok(ToolOutput::text(text))
    }
}

/// Most new errors an edit's answer lists.
const MAX_INTRODUCED: usize = 5;

/// The errors an edit introduced, for the file tools.
struct EditChecker(Arc<Servers>);

#[async_trait]
impl Diagnose for EditChecker {
    async fn introduced(&self, changes: Vec<Change>) -> Option<String> {
        let s = &self.0;
        let mut lines = Vec::new();
        let mut new_total = 0;
        let mut checked = Vec::new();
        for change in changes.into_iter().take(10) {
            let Some(language) = s.language_of(&change.path).map(str::to_owned) else {
                continue;
            };
            let server = match s.get(&language).await {
                Ok(server) => server,
                Err(e) => {
                    lines.push(format!("(no diagnostics: {e})"));
                    continue;
                }
            };
            let Ok(after) = s.read(&change.path) else {
                continue;
            };
            let abs = s.ws.root().join(&change.path);
            let wait = s.wait();
            let before = match &change.before {
                Some(text) => {
                    if server.sync(&abs, text, &language).await.is_err() {
                        continue;
                    }
                    server
                        .diagnostics(&abs, wait)
                        .await
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                }
                None => Vec::new(),
            };
            if server.sync(&abs, &after, &language).await.is_err() {
                continue;
            }
            let Ok(Some(now)) = server.diagnostics(&abs, wait).await else {
                lines.push(format!(
                    "(no diagnostics for {}: the server sent none in time)",
                    jianmu_workspace::show(&change.path)
                ));
                continue;
            };
            checked.push(server.command.clone());
            let mut old: Vec<_> = before
                .iter()
                .filter(|d| severity(d) == "error")
                .map(identity)
                .collect();
            for d in sorted(now) {
                if severity(&d) != "error" {
                    continue;
                }
                if let Some(at) = old.iter().position(|o| *o == identity(&d)) {
                    old.swap_remove(at);
                    continue;
                }
                new_total += 1;
                if new_total <= MAX_INTRODUCED {
                    lines.push(show_diagnostic(&change.path, &after, &d));
                }
            }
        }
        if lines.is_empty() && checked.is_empty() {
            return None;
        }
        checked.dedup();
        let mut out = if new_total == 0 {
            format!("Diagnostics ({}): no new errors.", checked.join(", "))
        } else {
            format!("New errors ({}):", checked.join(", "))
        };
        for line in lines {
            out.push('\n');
            out.push_str(&line);
        }
        if new_total > MAX_INTRODUCED {
            out.push_str(&format!(
                "\n({} more new errors: see `diagnostics`)",
                new_total - MAX_INTRODUCED
            ));
        }
        Some(out)
    }
}

fn make_diagnose(config: &ToolConfig) -> Result<Arc<dyn Diagnose>, ToolError> {
    Ok(Arc::new(EditChecker(servers(config)?)))
}

inventory::submit! {
    jianmu_tool_core::DiagnoseRegistration { make: make_diagnose }
}

macro_rules! register {
    ($($ty:ident => $build:ident),* $(,)?) => {
        $(
            fn $build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
                ToolHandle::new($ty { servers: servers(config)? })
            }
            jianmu_tool_core::register_tool!($ty, $build);
        )*
    };
}

register!(
    Diagnostics => build_diagnostics,
    Definition => build_definition,
    References => build_references,
    Hover => build_hover,
    Symbols => build_symbols,
);

#[cfg(test)]
mod tests;
