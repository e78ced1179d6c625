//! Settings of the language-server tools (`[tools.lsp]`, shared by all of them).

use std::collections::BTreeMap;

use jianmu_process::IsolationSettings;
use serde::Deserialize;
use serde_json::Value;

/// One language's server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// The command and its arguments; the first is a name on PATH or a path.
    pub command: Vec<String>,
    /// File extensions (without the dot) of this language.
    pub extensions: Vec<String>,
    /// How to install the server, said when it is missing.
    #[serde(default)]
    pub install: String,
    /// Sent as `initializationOptions`.
    #[serde(default)]
    pub initialization_options: Value,
}

/// Settings of the language-server tools (`[tools.lsp]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LspSettings {
    /// Servers by language name, over the built-in ones (`python`: `pylsp`, `rust`:
    /// `rust-analyzer`, `go`: `gopls`, `typescript`: `typescript-language-server`,
    /// `c`: `clangd`).
    pub servers: BTreeMap<String, ServerSettings>,
    /// Time limit of one request (and of a server's start), in seconds.
    pub request_timeout_secs: f64,
    /// How long `diagnostics` waits for a server that publishes them, in seconds.
    pub diagnostics_wait_secs: f64,
    /// Seconds after which an unused server is stopped (the next call starts it again).
    pub idle_secs: u64,
    /// Largest message read from a server, in bytes.
    pub max_message: usize,
    /// Largest file sent to a server, in bytes.
    pub max_file_size: u64,
    /// Most results (locations, symbols, diagnostics per file) in one answer.
    pub max_results: usize,
    /// How servers are isolated (`[tools.lsp.isolation]`).
    pub isolation: IsolationSettings,
}

impl Default for LspSettings {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            request_timeout_secs: 30.0,
            diagnostics_wait_secs: 15.0,
            idle_secs: 600,
            max_message: 16 * 1024 * 1024,
            max_file_size: 4 * 1024 * 1024,
            max_results: 100,
            isolation: IsolationSettings::default(),
        }
    }
}

fn server(command: &[&str], extensions: &[&str], install: &str) -> ServerSettings {
    ServerSettings {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        extensions: extensions.iter().map(|s| (*s).to_owned()).collect(),
        install: install.to_owned(),
        initialization_options: Value::Null,
    }
}

impl LspSettings {
    /// The servers in force: the built-in ones, with those the settings name replacing
    /// them or added.
    pub fn all_servers(&self) -> BTreeMap<String, ServerSettings> {
        let mut all = BTreeMap::from([
            (
                "python".to_owned(),
                server(
                    &["pylsp"],
                    &["py", "pyi"],
                    "install it with `pip install 'python-lsp-server[pyflakes]'`",
                ),
            ),
            (
                "rust".to_owned(),
                server(
                    &["rust-analyzer"],
                    &["rs"],
                    "install it with `rustup component add rust-analyzer`",
                ),
            ),
            (
                "go".to_owned(),
                server(
                    &["gopls"],
                    &["go"],
                    "install it with `go install golang.org/x/tools/gopls@latest`",
                ),
            ),
            (
                "typescript".to_owned(),
                server(
                    &["typescript-language-server", "--stdio"],
                    &["ts", "tsx", "js", "jsx", "mjs", "cjs"],
                    "install it with `npm install -g typescript-language-server typescript`",
                ),
            ),
            (
                "c".to_owned(),
                server(
                    &["clangd"],
                    &["c", "h", "cc", "cpp", "cxx", "hpp", "hh"],
                    "install clangd (e.g. `apt install clangd`)",
                ),
            ),
        ]);
        for (name, s) in &self.servers {
            all.insert(name.clone(), s.clone());
        }
        all
    }
}
