//! Skills over MCP (the `io.modelcontextprotocol/skills` extension, SEP-2640):
//! `skills/list` and `skills/get` give each skill's entry (its `SKILL.md`
//! frontmatter and every file with its SHA-256 digest and size), and each file is a
//! resource, `skill://PREFIX/NAME/PATH`, read with `resources/read`.
//!
//! Two sources: a few skills of jianmu's own that teach its tools
//! (`skill://jianmu/NAME/SKILL.md`, served when the session has those tools), and the
//! workspace's skill folders (`.agents/skills/NAME/`, `.claude/skills/NAME/`,
//! `.codex/skills/NAME/`, `.github/skills/NAME/`, as `skill://agents/NAME/…` and so
//! on), when the session offers `read_file`. Workspace files are read through the
//! workspace's confined handle, and no link is followed inside the skills folders
//! (folders, files, `SKILL.md`); a skill over the extension's limits (512 files,
//! 16 MiB), whose name breaks the naming rules or whose frontmatter does not name it
//! as its folder is not served. Entries are made afresh for each request, so digests
//! are those of the files as they are, and a file is served only when its bytes are
//! the ones its entry describes. Each request's work is bounded: 64 skills a folder,
//! 4,096 entries a skill, 64 MiB read in all.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use jianmu_workspace::Workspace;
use rmcp::model::{
    CacheScope, ErrorData, GetSkillResult, ListSkillsResult, ReadResourceResult, Resource,
    ResourceContents, SkillFrontmatter, SkillResource, SkillResources,
};
use serde_json::{Map, Value, json};

/// The workspace folders skills are found in, and the prefix of their URIs.
const SOURCES: [(&str, &str); 4] = [
    (".agents/skills", "agents"),
    (".claude/skills", "claude"),
    (".codex/skills", "codex"),
    (".github/skills", "github"),
];
/// Most files of one skill, `SKILL.md` included (the extension's limit).
const MAX_FILES: usize = 512;
/// Most bytes of one skill's files together (the extension's limit).
const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Most skills one source folder gives.
const MAX_SKILLS: usize = 64;
/// Most entries of a source folder looked at.
const MAX_LOOKED_AT: usize = 1024;
/// Most entries (files and folders) of one skill walked.
const MAX_ENTRIES: usize = 4096;
/// Most bytes one request reads, all skills together.
const MAX_READ: u64 = 64 * 1024 * 1024;
/// Most nodes of a frontmatter.
const MAX_NODES: usize = 10_000;
/// Deepest folder inside a skill that is looked into.
const MAX_DEPTH: usize = 8;
/// Most bytes of a `SKILL.md`'s frontmatter.
const MAX_FRONTMATTER: usize = 64 * 1024;
/// Deepest nesting of a frontmatter value.
const MAX_NESTING: usize = 32;
/// How long a client may keep an entry or a listing.
const TTL_MS: u64 = 60_000;

/// A skill of jianmu's own: its name, the tools it needs, its `SKILL.md`.
struct Builtin {
    name: &'static str,
    needs: &'static [&'static str],
    text: &'static str,
}

const BUILTINS: [Builtin; 3] = [
    Builtin {
        name: "shell-sessions-and-jobs",
        needs: &["bash", "bash_output", "bash_kill"],
        text: include_str!("skills/shell-sessions-and-jobs.md"),
    },
    Builtin {
        name: "saved-outputs",
        needs: &["read_file"],
        text: include_str!("skills/saved-outputs.md"),
    },
    Builtin {
        name: "run-script",
        needs: &["run_script"],
        text: include_str!("skills/run-script.md"),
    },
];

/// Where a file's bytes are.
#[derive(Debug, Clone)]
enum Origin {
    Builtin(&'static str),
    /// Relative to the workspace root.
    Workspace(PathBuf),
}

#[derive(Debug, Clone)]
struct File {
    uri: String,
    origin: Origin,
    digest: String,
    size: u64,
}

/// One skill: its `SKILL.md`'s URI, frontmatter and files (`SKILL.md` first).
#[derive(Debug, Clone)]
struct Skill {
    uri: String,
    frontmatter: Map<String, Value>,
    files: Vec<File>,
}

impl Skill {
    fn entry(&self) -> rmcp::model::Skill {
        let text = |k: &str| {
            self.frontmatter
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut frontmatter = SkillFrontmatter::new(text("name"), text("description"));
        for (key, value) in &self.frontmatter {
            if key != "name" && key != "description" {
                frontmatter = frontmatter.with_field(key.clone(), value.clone());
            }
        }
        let resources = self
            .files
            .iter()
            .map(|f| SkillResource::new(&f.uri, &f.digest, f.size))
            .collect();
        rmcp::model::Skill::new(&self.uri, frontmatter, SkillResources::Files(resources))
    }
}

/// The skills one session serves.
#[derive(Debug)]
pub(crate) struct Skills {
    root: PathBuf,
    /// The workspace, opened at first use (off the async threads).
    ws: std::sync::OnceLock<Option<Workspace>>,
    tools: Vec<String>,
}

fn digest(bytes: &[u8]) -> String {
    rmcp::model::sha256_digest(bytes)
}

/// The answer to a `resources/read` of a URI that is not served (SEP-2164): -32602,
/// with the URI in `data`.
pub(crate) fn not_found(uri: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("Resource not found: {uri} (skills/get lists a skill's files)"),
        Some(json!({ "uri": uri })),
    )
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

impl Skills {
    /// The skills of a session working in `workspace`, with `tools`.
    pub(crate) fn new(workspace: &Path, tools: Vec<String>) -> Self {
        Self {
            root: workspace.to_path_buf(),
            ws: std::sync::OnceLock::new(),
            tools,
        }
    }

    /// Every skill, as it is now.
    fn all(&self) -> Vec<Skill> {
        let mut skills = self.builtins();
        if let Some(ws) = self.workspace() {
            let mut budget = MAX_READ;
            for (folder, prefix) in SOURCES {
                skills.extend(workspace_skills(
                    ws,
                    Path::new(folder),
                    prefix,
                    None,
                    &mut budget,
                ));
            }
        }
        skills
    }

    /// jianmu's own skills whose tools the session has.
    fn builtins(&self) -> Vec<Skill> {
        let mut skills = Vec::new();
        for builtin in &BUILTINS {
            if builtin
                .needs
                .iter()
                .all(|t| self.tools.iter().any(|n| n == t))
                && let Some(frontmatter) = frontmatter(builtin.text)
            {
                let uri = format!("skill://jianmu/{}/SKILL.md", builtin.name);
                let bytes = builtin.text.as_bytes();
                skills.push(Skill {
                    uri: uri.clone(),
                    frontmatter,
                    files: vec![File {
                        uri,
                        origin: Origin::Builtin(builtin.text),
                        digest: digest(bytes),
                        size: bytes.len() as u64,
                    }],
                });
            }
        }
        skills
    }

    /// The workspace, when its skills are served: only to a session that may read
    /// files.
    fn workspace(&self) -> Option<&Workspace> {
        if !self.tools.iter().any(|t| t == "read_file") {
            return None;
        }
        self.ws
            .get_or_init(|| Workspace::open(&self.root).ok())
            .as_ref()
    }

    /// The one skill `uri` (a file of it) belongs to, as it is now.
    fn skill_of(&self, uri: &str) -> Option<Skill> {
        let rest = uri.strip_prefix("skill://")?;
        let (prefix, rest) = rest.split_once('/')?;
        let name = rest.split('/').next()?;
        if prefix == "jianmu" {
            return self
                .builtins()
                .into_iter()
                .find(|s| s.uri == format!("skill://jianmu/{name}/SKILL.md"));
        }
        let (folder, _) = SOURCES.iter().find(|(_, p)| *p == prefix)?;
        let mut budget = MAX_READ;
        workspace_skills(
            self.workspace()?,
            Path::new(folder),
            prefix,
            Some(name),
            &mut budget,
        )
        .into_iter()
        .next()
    }

    /// `skills/list`: every entry, in one page.
    pub(crate) fn list(&self, cursor: Option<&str>) -> Result<ListSkillsResult, ErrorData> {
        if cursor.is_some() {
            return Err(invalid(
                "unknown cursor: skills/list answers in one page and gives no cursor",
            ));
        }
        let skills = self.all().iter().map(Skill::entry).collect();
        Ok(ListSkillsResult::with_all_items(skills)
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    /// `skills/get`: the entry of the skill whose `SKILL.md` is `uri`.
    pub(crate) fn get(&self, uri: &str) -> Result<GetSkillResult, ErrorData> {
        let skill = self.skill_of(uri).filter(|s| s.uri == uri).ok_or_else(|| {
            invalid(format!(
                "no skill is served at {uri}: skills/list names them"
            ))
        })?;
        Ok(GetSkillResult::new(skill.entry())
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    /// `resources/list`: every file of every skill.
    pub(crate) fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        for skill in self.all() {
            let name = skill
                .frontmatter
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            for file in &skill.files {
                let mut resource = Resource::new(&file.uri, &name)
                    .with_mime_type(mime(&file.uri))
                    .with_size(file.size);
                if file.uri == skill.uri
                    && let Some(description) =
                        skill.frontmatter.get("description").and_then(Value::as_str)
                {
                    resource = resource.with_description(description);
                }
                out.push(resource);
            }
        }
        out
    }

    /// `resources/read` of a skill's file, or `None` when `uri` is not one: the bytes
    /// its entry describes (a file changed since is refused, to be listed again).
    pub(crate) fn read(&self, uri: &str) -> Option<Result<ReadResourceResult, ErrorData>> {
        if !uri.starts_with("skill://") {
            return None;
        }
        let file = self
            .skill_of(uri)
            .into_iter()
            .flat_map(|s| s.files)
            .find(|f| f.uri == uri);
        let Some(file) = file else {
            return Some(Err(not_found(uri)));
        };
        let bytes = match &file.origin {
            Origin::Builtin(text) => text.as_bytes().to_vec(),
            Origin::Workspace(rel) => {
                let read = self.workspace().map(|ws| ws.read_no_link(rel, MAX_BYTES));
                match read {
                    Some(Ok(bytes)) if digest(&bytes) == file.digest => bytes,
                    _ => return Some(Err(not_found(uri))),
                }
            }
        };
        let mime_type = Some(mime(uri).to_owned());
        let contents = match String::from_utf8(bytes) {
            Ok(text) => ResourceContents::TextResourceContents {
                uri: uri.to_owned(),
                mime_type,
                text,
                meta: None,
            },
            Err(e) => ResourceContents::BlobResourceContents {
                uri: uri.to_owned(),
                mime_type,
                blob: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                meta: None,
            },
        };
        Some(Ok(ReadResourceResult::new(vec![contents])
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private)))
    }
}

fn mime(uri: &str) -> &'static str {
    let ext = uri.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("md") => "text/markdown",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        Some("json") => "application/json",
        Some("txt") => "text/plain",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// Whether `rel` is a folder itself, not a link to one.
fn real_dir(ws: &Workspace, rel: &Path) -> bool {
    ws.symlink_metadata(rel).is_ok_and(|m| m.is_dir())
}

/// The skills of one workspace folder (`.agents/skills`), as `skill://PREFIX/NAME/…`
/// (only `only`, when given), within `budget` bytes read.
fn workspace_skills(
    ws: &Workspace,
    folder: &Path,
    prefix: &str,
    only: Option<&str>,
    budget: &mut u64,
) -> Vec<Skill> {
    // No link on the way: `.agents` and `.agents/skills` are folders themselves.
    let mut on_the_way = PathBuf::new();
    for part in folder.components() {
        on_the_way.push(part);
        if !real_dir(ws, &on_the_way) {
            return Vec::new();
        }
    }
    let Ok(entries) = ws.dir().read_dir(folder) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .take(MAX_LOOKED_AT)
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| valid_name(n) && only.is_none_or(|o| o == n))
        .collect();
    names.sort();
    names.truncate(MAX_SKILLS);
    let mut skills = Vec::new();
    for name in names {
        let root = folder.join(&name);
        match workspace_skill(ws, &root, prefix, &name, budget) {
            Ok(skill) => skills.push(skill),
            Err(why) => tracing::debug!("skill {}: not served: {why}", root.display()),
        }
    }
    skills
}

/// A skill's name as the Agent Skills specification allows it: 1 to 64 lowercase
/// letters, digits and single hyphens, not at either end.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// `segment` as a URI path segment: every byte but the unreserved ones escaped.
fn escape(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn workspace_skill(
    ws: &Workspace,
    root: &Path,
    prefix: &str,
    name: &str,
    budget: &mut u64,
) -> Result<Skill, String> {
    let mut rels = Vec::new();
    let mut entries = 0;
    collect(ws, root, Path::new(""), 0, &mut rels, &mut entries)?;
    rels.sort();
    // SKILL.md first; it must be one of the files found (a regular file, not a link).
    let Some(at) = rels.iter().position(|r| r == Path::new("SKILL.md")) else {
        return Err("no SKILL.md (a regular file) in it".to_owned());
    };
    let skill_md = rels.remove(at);
    rels.insert(0, skill_md);
    let mut files = Vec::with_capacity(rels.len());
    let mut frontmatter_of = None;
    let mut total = 0u64;
    for rel in rels {
        let path = root.join(&rel);
        let room = MAX_BYTES.saturating_sub(total).min(*budget);
        let bytes = ws.read_no_link(&path, room).map_err(|e| e.message())?;
        total += bytes.len() as u64;
        *budget = budget.saturating_sub(bytes.len() as u64);
        let Some(rel_text) = rel.to_str() else {
            return Err(format!("{} is not a UTF-8 name", rel.display()));
        };
        if frontmatter_of.is_none() {
            // SKILL.md, read once: its frontmatter and its digest are of the same bytes.
            let text =
                std::str::from_utf8(&bytes).map_err(|_| "SKILL.md is not UTF-8".to_owned())?;
            let fm =
                frontmatter(text).ok_or("SKILL.md has no frontmatter with name and description")?;
            if fm.get("name").and_then(Value::as_str) != Some(name) {
                return Err(format!(
                    "its frontmatter's name is not its folder's, {name}"
                ));
            }
            frontmatter_of = Some(fm);
        }
        let escaped: Vec<String> = rel_text.split('/').map(escape).collect();
        files.push(File {
            uri: format!("skill://{prefix}/{name}/{}", escaped.join("/")),
            origin: Origin::Workspace(path),
            digest: digest(&bytes),
            size: bytes.len() as u64,
        });
    }
    let skill = Skill {
        uri: format!("skill://{prefix}/{name}/SKILL.md"),
        frontmatter: frontmatter_of.ok_or("no SKILL.md")?,
        files,
    };
    skill
        .entry()
        .validate()
        .map_err(|e| format!("not a valid skill entry: {e}"))?;
    Ok(skill)
}

/// The regular files under `root/rel`, as paths relative to `root`; links are not
/// followed, and at most [`MAX_ENTRIES`] entries are walked.
fn collect(
    ws: &Workspace,
    root: &Path,
    rel: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
    entries: &mut usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("folders deeper than {MAX_DEPTH} levels"));
    }
    let listed = ws
        .dir()
        .read_dir(root.join(rel))
        .map_err(|e| format!("{}: {e}", root.join(rel).display()))?;
    for entry in listed {
        *entries += 1;
        if *entries > MAX_ENTRIES {
            return Err(format!("over {MAX_ENTRIES} entries"));
        }
        let entry = entry.map_err(|e| e.to_string())?;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let child = rel.join(entry.file_name());
        if kind.is_dir() {
            collect(ws, root, &child, depth + 1, out, entries)?;
        } else if kind.is_file() {
            out.push(child);
            if out.len() > MAX_FILES {
                return Err(format!("over {MAX_FILES} files"));
            }
        }
    }
    Ok(())
}

/// The YAML frontmatter of a `SKILL.md` as JSON, when it has `name` and
/// `description` strings. Read event by event with an explicit stack: no anchors or
/// aliases, at most [`MAX_NESTING`] levels and [`MAX_NODES`] events.
fn frontmatter(text: &str) -> Option<Map<String, Value>> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest
        .match_indices("\n---")
        .map(|(i, _)| i)
        .find(|&i| matches!(rest[i + 4..].chars().next(), None | Some('\n' | '\r')))?;
    let yaml = &rest[..=end];
    if yaml.len() > MAX_FRONTMATTER {
        return None;
    }
    let Value::Object(map) = yaml_to_json(yaml)? else {
        return None;
    };
    let has = |k: &str| {
        map.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    (has("name") && has("description")).then_some(map)
}

/// A list or map being read (a map with the key waiting for its value).
enum Open {
    List(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

/// The first YAML document of `yaml` as JSON.
fn yaml_to_json(yaml: &str) -> Option<Value> {
    use yaml_rust2::parser::{Event, Parser};
    let mut parser = Parser::new_from_str(yaml);
    let mut stack: Vec<Open> = Vec::new();
    let mut root = None;
    for _ in 0..MAX_NODES {
        let (event, _) = parser.next_token().ok()?;
        let done = match event {
            Event::Nothing | Event::StreamStart | Event::DocumentStart => None,
            Event::StreamEnd | Event::DocumentEnd => return root,
            Event::Alias(_) => return None,
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 {
                    return None;
                }
                Some(scalar(text, style, tag.is_some()))
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) if anchor != 0 => {
                return None;
            }
            Event::SequenceStart(..) => {
                stack.push(Open::List(Vec::new()));
                None
            }
            Event::MappingStart(..) => {
                stack.push(Open::Map(Map::new(), None));
                None
            }
            Event::SequenceEnd => match stack.pop()? {
                Open::List(items) => Some(Value::Array(items)),
                Open::Map(..) => return None,
            },
            Event::MappingEnd => match stack.pop()? {
                Open::Map(map, None) => Some(Value::Object(map)),
                _ => return None,
            },
        };
        if stack.len() > MAX_NESTING {
            return None;
        }
        if let Some(value) = done {
            match stack.last_mut() {
                None => root = Some(value),
                Some(Open::List(items)) => items.push(value),
                Some(Open::Map(map, key)) => match key.take() {
                    Some(k) => {
                        map.insert(k, value);
                    }
                    None => {
                        *key = Some(match value {
                            Value::String(s) => s,
                            Value::Number(n) => n.to_string(),
                            Value::Bool(b) => b.to_string(),
                            _ => return None,
                        });
                    }
                },
            }
        }
    }
    None
}

/// A scalar's value: a plain one typed as YAML's core schema does, others strings.
fn scalar(text: String, style: yaml_rust2::scanner::TScalarStyle, tagged: bool) -> Value {
    use yaml_rust2::Yaml;
    if style != yaml_rust2::scanner::TScalarStyle::Plain || tagged {
        return Value::String(text);
    }
    match Yaml::from_str(&text) {
        Yaml::Integer(i) => json!(i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::String(text), Value::Number),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Null => Value::Null,
        _ => Value::String(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_is_read_verbatim_and_needs_name_and_description() {
        let text = "---\nname: demo\ndescription: Does a thing\nlicense: MIT\nmetadata:\n  version: \"1.2\"\n  tags: [a, b]\n---\n# Demo\n";
        let fm = frontmatter(text).unwrap();
        assert_eq!(
            Value::Object(fm),
            json!({"name": "demo", "description": "Does a thing", "license": "MIT",
                   "metadata": {"version": "1.2", "tags": ["a", "b"]}})
        );
        assert!(frontmatter("---\nname: demo\n---\n").is_none());
        assert!(frontmatter("no frontmatter").is_none());
        assert!(frontmatter("---\nname: [unclosed\n---\n").is_none());
        let deep = format!(
            "---\nname: x\ndescription: y\nz: {}{}\n---\n",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(frontmatter(&deep).is_none());
        // Block nesting as deep as the size allows, and aliases that would multiply.
        let block = format!(
            "---\nname: x\ndescription: y\nz: {}1\n---\n",
            "- ".repeat(30_000)
        );
        assert!(frontmatter(&block).is_none());
        let mut laughs =
            String::from("---\nname: x\ndescription: y\na0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let j = i - 1;
            laughs.push_str(&format!(
                "a{i}: &a{i} [*a{j}, *a{j}, *a{j}, *a{j}, *a{j}, *a{j}, *a{j}, *a{j}, *a{j}]\n"
            ));
        }
        laughs.push_str("---\n");
        assert!(frontmatter(&laughs).is_none());
        assert!(frontmatter("---\nname: &n x\ndescription: y\n---\n").is_none());
    }

    #[test]
    fn names_follow_the_agent_skills_rules_and_paths_are_escaped() {
        assert!(valid_name("pdf-processing") && valid_name("a1"));
        for bad in ["", "-a", "a-", "a--b", "My_Skill", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert_eq!(escape("a b#?%.md"), "a%20b%23%3F%25.md");
    }

    #[test]
    fn builtin_skills_have_valid_frontmatter_named_as_their_folder() {
        for builtin in &BUILTINS {
            let fm = frontmatter(builtin.text).expect(builtin.name);
            assert_eq!(fm["name"], builtin.name);
        }
    }
}
