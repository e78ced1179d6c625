//! Skills over MCP (the `io.modelcontextprotocol/skills` extension, SEP-2640):
//! `skills/list` and `skills/get` give each skill's entry (its `SKILL.md`
//! frontmatter and every file with its SHA-256 digest and size), and each file is a
//! resource, `skill://PREFIX/NAME/PATH`, read with `resources/read`.
//!
//! Two sources: a few skills of jianmu's own that teach its tools
//! (`skill://jianmu/NAME/SKILL.md`, served when the session has those tools), and the
//! workspace's skill folders (`.agents/skills/NAME/`, `.claude/skills/NAME/`,
//! `.codex/skills/NAME/`, `.github/skills/NAME/`, as `skill://agents/NAME/…` and so
//! on). Workspace files are read through the workspace's confined handle, never
//! following a link; a skill over the extension's limits (512 files, 16 MiB) or whose
//! frontmatter does not name it as its folder is not served. Entries are made afresh
//! for each request, so digests are those of the files as they are.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
const MAX_SKILLS: usize = 256;
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
        needs: &["bash"],
        text: include_str!("skills/shell-sessions-and-jobs.md"),
    },
    Builtin {
        name: "saved-outputs",
        needs: &["read_file", "grep_search"],
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
#[derive(Debug, Clone)]
pub(crate) struct Skills {
    ws: Option<Arc<Workspace>>,
    tools: Arc<Vec<String>>,
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
            ws: Workspace::open(workspace).ok().map(Arc::new),
            tools: Arc::new(tools),
        }
    }

    /// Every skill, as it is now.
    fn all(&self) -> Vec<Skill> {
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
        if let Some(ws) = &self.ws {
            for (folder, prefix) in SOURCES {
                skills.extend(workspace_skills(ws, Path::new(folder), prefix));
            }
        }
        skills
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
        let skill = self
            .all()
            .into_iter()
            .find(|s| s.uri == uri)
            .ok_or_else(|| {
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

    /// `resources/read` of a skill's file, or `None` when `uri` is not one.
    pub(crate) fn read(&self, uri: &str) -> Option<Result<ReadResourceResult, ErrorData>> {
        if !uri.starts_with("skill://") {
            return None;
        }
        let file = self
            .all()
            .into_iter()
            .flat_map(|s| s.files)
            .find(|f| f.uri == uri);
        let Some(file) = file else {
            return Some(Err(not_found(uri)));
        };
        let bytes = match &file.origin {
            Origin::Builtin(text) => text.as_bytes().to_vec(),
            Origin::Workspace(rel) => {
                match self.ws.as_ref().map(|ws| ws.read_to_end(rel, MAX_BYTES)) {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(e)) => {
                        return Some(Err(invalid(format!(
                            "{uri} cannot be read: {}",
                            e.message()
                        ))));
                    }
                    None => return Some(Err(invalid(format!("{uri} cannot be read")))),
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
        Some(Ok(
            ReadResourceResult::new(vec![contents]).with_ttl_ms(TTL_MS)
        ))
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

/// The skills of one workspace folder (`.agents/skills`), as `skill://PREFIX/NAME/…`.
fn workspace_skills(ws: &Workspace, folder: &Path, prefix: &str) -> Vec<Skill> {
    let Ok(entries) = ws.dir().read_dir(folder) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .take(MAX_SKILLS)
        .collect();
    names.sort();
    let mut skills = Vec::new();
    for name in names {
        let root = folder.join(&name);
        match workspace_skill(ws, &root, prefix, &name) {
            Ok(skill) => skills.push(skill),
            Err(why) => tracing::debug!("skill {}: not served: {why}", root.display()),
        }
    }
    skills
}

fn workspace_skill(ws: &Workspace, root: &Path, prefix: &str, name: &str) -> Result<Skill, String> {
    let text = ws
        .read_to_end(&root.join("SKILL.md"), MAX_BYTES)
        .map_err(|e| e.message())?;
    let text = String::from_utf8(text).map_err(|_| "SKILL.md is not UTF-8".to_owned())?;
    let frontmatter =
        frontmatter(&text).ok_or("SKILL.md has no frontmatter with name and description")?;
    if frontmatter.get("name").and_then(Value::as_str) != Some(name) {
        return Err(format!(
            "its frontmatter's name is not its folder's, {name}"
        ));
    }
    let mut rels = Vec::new();
    collect(ws, root, Path::new(""), 0, &mut rels)?;
    rels.sort();
    // SKILL.md first.
    rels.retain(|r| r != Path::new("SKILL.md"));
    rels.insert(0, PathBuf::from("SKILL.md"));
    let mut files = Vec::with_capacity(rels.len());
    let mut total = 0u64;
    for rel in rels {
        let path = root.join(&rel);
        let bytes = ws
            .read_to_end(&path, MAX_BYTES.saturating_sub(total))
            .map_err(|e| e.message())?;
        total += bytes.len() as u64;
        let Some(rel_text) = rel.to_str() else {
            return Err(format!("{} is not a UTF-8 name", rel.display()));
        };
        files.push(File {
            uri: format!("skill://{prefix}/{name}/{rel_text}"),
            origin: Origin::Workspace(path),
            digest: digest(&bytes),
            size: bytes.len() as u64,
        });
    }
    Ok(Skill {
        uri: format!("skill://{prefix}/{name}/SKILL.md"),
        frontmatter,
        files,
    })
}

/// The regular files under `root/rel`, as paths relative to `root`; links are not
/// followed.
fn collect(
    ws: &Workspace,
    root: &Path,
    rel: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("folders deeper than {MAX_DEPTH} levels"));
    }
    let entries = ws
        .dir()
        .read_dir(root.join(rel))
        .map_err(|e| format!("{}: {e}", root.join(rel).display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let child = rel.join(entry.file_name());
        if kind.is_dir() {
            collect(ws, root, &child, depth + 1, out)?;
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
/// `description` strings.
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
    let docs = yaml_rust2::YamlLoader::load_from_str(yaml).ok()?;
    let Value::Object(map) = to_json(docs.first()?, 0)? else {
        return None;
    };
    let has = |k: &str| {
        map.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    (has("name") && has("description")).then_some(map)
}

fn to_json(yaml: &yaml_rust2::Yaml, depth: usize) -> Option<Value> {
    use yaml_rust2::Yaml;
    if depth > MAX_NESTING {
        return None;
    }
    Some(match yaml {
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => json!(i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(r.clone()), Value::Number),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Null => Value::Null,
        Yaml::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| to_json(i, depth + 1))
                .collect::<Option<_>>()?,
        ),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (k, v) in hash {
                let key = match k {
                    Yaml::String(s) | Yaml::Real(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    _ => return None,
                };
                map.insert(key, to_json(v, depth + 1)?);
            }
            Value::Object(map)
        }
        Yaml::Alias(_) | Yaml::BadValue => return None,
    })
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
    }

    #[test]
    fn builtin_skills_have_valid_frontmatter_named_as_their_folder() {
        for builtin in &BUILTINS {
            let fm = frontmatter(builtin.text).expect(builtin.name);
            assert_eq!(fm["name"], builtin.name);
        }
    }
}
