//! `ToolIndex`: ranked search over tool specs (names, descriptions, parameter names),
//! for clients that load tool definitions on demand instead of all up front.

use std::collections::HashMap;

use serde_json::Value;

use crate::ToolSpec;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalization.
const B: f64 = 0.75;
/// How many times a name's words count against a description's.
const NAME_WEIGHT: u32 = 3;
/// How many times a parameter's name counts.
const PARAMETER_WEIGHT: u32 = 2;
/// What a query word that is a word of the tool's name adds, past BM25's saturation
/// and whatever its rarity: the name says what the tool is for, even where every
/// description uses the word too.
const NAME_BONUS: f64 = 3.0;

/// Tool specs indexed for [`ToolIndex::search`]: BM25 over the words of each tool's
/// name (weighted most), parameter names and description.
#[derive(Debug, Clone, Default)]
pub struct ToolIndex {
    docs: Vec<Doc>,
    /// Inverse document frequency of every word.
    idf: HashMap<String, f64>,
    /// The average document length, in weighted words.
    average: f64,
}

#[derive(Debug, Clone)]
struct Doc {
    name: String,
    /// The words of the name.
    named: Vec<String>,
    terms: HashMap<String, u32>,
    len: f64,
}

impl ToolIndex {
    /// An index of `specs`.
    pub fn new<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        let docs: Vec<Doc> = specs.into_iter().map(Doc::new).collect();
        let mut seen: HashMap<String, u32> = HashMap::new();
        for doc in &docs {
            for term in doc.terms.keys() {
                *seen.entry(term.clone()).or_default() += 1;
            }
        }
        let n = docs.len() as f64;
        let idf = seen
            .into_iter()
            .map(|(term, df)| {
                let df = f64::from(df);
                (term, ((n - df + 0.5) / (df + 0.5) + 1.0).ln())
            })
            .collect();
        let average = if docs.is_empty() {
            1.0
        } else {
            docs.iter().map(|d| d.len).sum::<f64>() / n
        };
        Self { docs, idf, average }
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// True when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The names of the tools that best match `query`, best first, at most `max`.
    /// `select:a,b` asks for tools by name; a query that is a tool's name finds it
    /// first; otherwise words are matched (case, `_`, `-` and a plural `s` aside).
    pub fn search(&self, query: &str, max: usize) -> Vec<&str> {
        if let Some(names) = query.trim().strip_prefix("select:") {
            let mut picked: Vec<&str> = Vec::new();
            for want in names.split(',').map(str::trim) {
                if let Some(doc) = self.docs.iter().find(|d| d.name == want)
                    && !picked.contains(&doc.name.as_str())
                    && picked.len() < max
                {
                    picked.push(&doc.name);
                }
            }
            return picked;
        }
        let words: Vec<String> = words(query).collect();
        let exact = query.trim();
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, doc)| {
                let mut score: f64 = words
                    .iter()
                    .filter_map(|w| {
                        let tf = f64::from(*doc.terms.get(w)?);
                        let idf = self.idf.get(w).copied().unwrap_or(0.0);
                        let named = if doc.named.contains(w) {
                            NAME_BONUS
                        } else {
                            0.0
                        };
                        Some(
                            idf * tf * (K1 + 1.0)
                                / (tf + K1 * (1.0 - B + B * doc.len / self.average))
                                + named,
                        )
                    })
                    .sum();
                if doc.name == exact {
                    score += 1000.0;
                }
                (score > 0.0).then_some((score, i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .take(max)
            .map(|(_, i)| self.docs[i].name.as_str())
            .collect()
    }
}

impl Doc {
    fn new(spec: &ToolSpec) -> Self {
        let mut terms: HashMap<String, u32> = HashMap::new();
        let mut add = |text: &str, weight: u32| {
            for word in words(text) {
                *terms.entry(word).or_default() += weight;
            }
        };
        add(&spec.name, NAME_WEIGHT);
        for parameter in parameter_names(&spec.input_schema) {
            add(parameter, PARAMETER_WEIGHT);
        }
        add(&spec.description, 1);
        let len = f64::from(terms.values().sum::<u32>()).max(1.0);
        Self {
            name: spec.name.clone(),
            named: words(&spec.name).collect(),
            terms,
            len,
        }
    }
}

/// The names of a schema's properties, and of its nested objects' properties.
fn parameter_names(schema: &Value) -> Vec<&str> {
    let mut names = Vec::new();
    let mut stack = vec![(schema, 0)];
    while let Some((schema, depth)) = stack.pop() {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (name, sub) in properties {
            names.push(name.as_str());
            if depth < 2 {
                stack.push((sub, depth + 1));
                if let Some(items) = sub.get("items") {
                    stack.push((items, depth + 1));
                }
            }
        }
    }
    names
}

/// The words of `text`, lowercase, split at anything not a letter or digit, a
/// plural `s` and an `ing` dropped (`files` is `file`, `working` is `work`).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut w = w.to_lowercase();
            if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w.pop();
            }
            if w.len() >= 7 && w.ends_with("ing") {
                w.truncate(w.len() - 3);
            }
            w
        })
}

/// Which tools are loaded on demand rather than listed up front (`[mcp] defer`,
/// `jianmu tools --defer`): each entry is a tool's name or a glob of names (`git_*`),
/// one of its effect tags (`network`), or the group a tool belongs to (`lsp`, given
/// with [`Deferral::with_group`]).
#[derive(Debug, Clone, Default)]
pub struct Deferral {
    patterns: Vec<String>,
    groups: HashMap<String, String>,
}

impl Deferral {
    /// Defers the tools `patterns` name.
    pub fn new(patterns: impl IntoIterator<Item = String>) -> Self {
        Self {
            patterns: patterns.into_iter().collect(),
            groups: HashMap::new(),
        }
    }

    /// Says that `tool` belongs to `group` (the feature that adds it), so an entry
    /// naming the group defers it.
    #[must_use]
    pub fn with_group(mut self, tool: impl Into<String>, group: impl Into<String>) -> Self {
        self.groups.insert(tool.into(), group.into());
        self
    }

    /// Whether nothing is deferred.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `spec`'s tool is loaded on demand.
    pub fn defers(&self, spec: &ToolSpec) -> bool {
        let group = self.groups.get(&spec.name);
        self.patterns.iter().any(|p| {
            glob(p, &spec.name)
                || spec.effect_tags.iter().any(|t| t == p)
                || group.is_some_and(|g| g == p)
        })
    }
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and `?` one.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with one backtrack point: linear in practice.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str, description: &str, parameters: &[&str]) -> ToolSpec {
        let properties: serde_json::Map<String, Value> = parameters
            .iter()
            .map(|p| ((*p).to_owned(), json!({"type": "string"})))
            .collect();
        ToolSpec::new(name, description)
            .with_input_schema(json!({"type": "object", "properties": properties}))
    }

    fn index() -> ToolIndex {
        let specs = [
            spec(
                "read_file",
                "Reads a text file in the workspace.",
                &["path", "offset"],
            ),
            spec(
                "git_log",
                "Shows the commit history of the repository.",
                &["max_count"],
            ),
            spec(
                "hover",
                "Shows the type and docs of a symbol from the language server.",
                &["path", "line"],
            ),
            spec(
                "web_fetch",
                "Fetches a web page and returns it as Markdown.",
                &["url"],
            ),
        ];
        ToolIndex::new(&specs)
    }

    #[test]
    fn words_of_names_descriptions_and_parameters_rank_tools() {
        let index = index();
        assert_eq!(index.search("commit history", 5), ["git_log"]);
        assert_eq!(index.search("git", 5), ["git_log"]);
        assert_eq!(index.search("Fetch pages", 5), ["web_fetch"]);
        assert_eq!(index.search("url", 5), ["web_fetch"]);
        assert_eq!(index.search("language server symbol", 1), ["hover"]);
        assert_eq!(index.search("read files", 5)[0], "read_file");
        assert_eq!(index.search("reading", 5)[0], "read_file");
        // A word of the name outranks rarer words of other descriptions.
        let specs = [
            spec(
                "git_status",
                "Shows the changed files and their status.",
                &[],
            ),
            spec(
                "git_add",
                "Stages every change of the work tree; answers with the status after.",
                &[],
            ),
            spec(
                "git_checkout",
                "Switches the work tree; answers with the status after.",
                &[],
            ),
        ];
        assert_eq!(
            ToolIndex::new(&specs).search("working tree status", 3)[0],
            "git_status"
        );
        assert!(index.search("nothing matches this", 5).is_empty());
        assert!(index.search("", 5).is_empty());
    }

    #[test]
    fn a_name_or_a_selection_finds_exactly_those_tools() {
        let index = index();
        assert_eq!(index.search("hover", 5)[0], "hover");
        assert_eq!(
            index.search("select:web_fetch, git_log, nope", 5),
            ["web_fetch", "git_log"]
        );
        assert_eq!(index.search("select:web_fetch,git_log", 1), ["web_fetch"]);
        assert_eq!(index.search("select:hover,hover, hover", 5), ["hover"]);
        assert_eq!(index.search("path", 1).len(), 1);
    }
    #[test]
    fn globs_match_whole_names() {
        assert!(glob("git_*", "git_log"));
        assert!(glob("*", "anything"));
        assert!(glob("h?ver", "hover"));
        assert!(glob("*_file", "read_file"));
        assert!(!glob("git_*", "digit_log"));
        assert!(!glob("read", "read_file"));
        assert!(glob("a*b*c", "aXbYbc"));
    }

    #[test]
    fn an_entry_defers_by_name_effect_or_group() {
        let spec = |name: &str, tags: &[&str]| {
            ToolSpec::new(name, "A tool.").with_effect_tags(tags.iter().copied())
        };
        let deferral = Deferral::new(["git_*".to_owned(), "network".to_owned(), "lsp".to_owned()])
            .with_group("hover", "lsp");
        assert!(deferral.defers(&spec("git_log", &[])));
        assert!(deferral.defers(&spec("web_fetch", &["network"])));
        assert!(deferral.defers(&spec("hover", &["filesystem:read"])));
        assert!(!deferral.defers(&spec("read_file", &["filesystem:read"])));
        assert!(Deferral::default().is_empty());
    }
}
