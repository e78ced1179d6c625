//! Tool definitions in the shapes LLM APIs take: OpenAI function calling (plain and
//! strict), Anthropic tools, Gemini function declarations and MCP tools.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value, json};

use crate::{ToolSet, ToolSpec};

/// A shape to export tool definitions in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaFormat {
    /// This crate's own [`ToolSpec`].
    Jianmu,
    /// OpenAI function calling: `{"type": "function", "function": {...}}`.
    OpenAi,
    /// OpenAI function calling in strict mode where the schema allows it (every
    /// property required, optional ones nullable, no extra properties); tools whose
    /// schema cannot be made strict are exported as with [`SchemaFormat::OpenAi`].
    OpenAiStrict,
    /// Anthropic tools: `{"name", "description", "input_schema"}`.
    Anthropic,
    /// Gemini function declarations, in Gemini's OpenAPI subset of JSON Schema.
    Gemini,
    /// MCP tools: `{"name", "description", "inputSchema", "annotations"}`.
    Mcp,
}

impl SchemaFormat {
    /// Every format, with its name.
    pub const ALL: [(&'static str, SchemaFormat); 6] = [
        ("jianmu", Self::Jianmu),
        ("openai", Self::OpenAi),
        ("openai-strict", Self::OpenAiStrict),
        ("anthropic", Self::Anthropic),
        ("gemini", Self::Gemini),
        ("mcp", Self::Mcp),
    ];

    /// The format's name, as [`FromStr`] takes it.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("jianmu", |(n, _)| n)
    }
}

impl fmt::Display for SchemaFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SchemaFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown schema format `{s}`; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// MCP's behaviour hints, derived from effect tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Annotations {
    /// No effect beyond reading (`*:read` tags only, or none).
    pub read_only: bool,
    /// May destroy or change state: writes, process or code execution.
    pub destructive: bool,
    /// Calling twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// Reaches outside the machine (`network`).
    pub open_world: bool,
}

impl ToolSpec {
    /// The definition in `format`.
    pub fn export(&self, format: SchemaFormat) -> Value {
        match format {
            SchemaFormat::Jianmu => serde_json::to_value(self).unwrap_or(Value::Null),
            SchemaFormat::OpenAi => self.openai(false),
            SchemaFormat::OpenAiStrict => self.openai(true),
            SchemaFormat::Anthropic => json!({
                "name": self.name,
                "description": self.description,
                "input_schema": self.parameters(),
            }),
            SchemaFormat::Gemini => json!({
                "name": self.name,
                "description": self.description,
                "parameters": gemini(&self.parameters()),
            }),
            SchemaFormat::Mcp => {
                let a = self.annotations();
                let mut tool = json!({
                    "name": self.name,
                    "description": self.description,
                    "inputSchema": self.parameters(),
                    "annotations": {
                        "readOnlyHint": a.read_only,
                        "destructiveHint": a.destructive,
                        "idempotentHint": a.idempotent,
                        "openWorldHint": a.open_world,
                    },
                });
                if let Some(schema) = self.whole_output_schema() {
                    tool["outputSchema"] = schema;
                }
                tool
            }
        }
    }

    fn openai(&self, strict: bool) -> Value {
        let strict_parameters = if strict {
            self.strict_parameters()
        } else {
            None
        };
        let mut function = json!({
            "name": self.name,
            "description": self.description,
            "parameters": strict_parameters.clone().unwrap_or_else(|| self.parameters()),
        });
        if strict {
            function["strict"] = Value::Bool(strict_parameters.is_some());
        }
        json!({"type": "function", "function": function})
    }

    /// The parameters in OpenAI's strict form, or `None` when the schema has parts
    /// strict mode cannot express (free-form objects).
    pub fn strict_parameters(&self) -> Option<Value> {
        strict(&self.parameters())
    }

    /// MCP's hints, from the effect tags.
    pub fn annotations(&self) -> Annotations {
        let tags = &self.effect_tags;
        let read_only = tags.iter().all(|t| t.ends_with(":read"));
        let destructive = tags
            .iter()
            .any(|t| t.ends_with(":write") || t.ends_with(":exec") || t.ends_with(":delete"));
        Annotations {
            read_only,
            destructive,
            idempotent: read_only,
            open_world: tags
                .iter()
                .any(|t| t == "network" || t.starts_with("network:")),
        }
    }
}

impl ToolSet {
    /// Every tool's definition in `format`, in order.
    pub fn export(&self, format: SchemaFormat) -> Vec<Value> {
        self.iter().map(|t| t.spec().export(format)).collect()
    }
}

/// Adds `null` to what `schema` accepts.
fn nullable(mut schema: Value) -> Value {
    let Some(map) = schema.as_object_mut() else {
        return schema;
    };
    if let Some(any) = map.get_mut("anyOf").and_then(Value::as_array_mut) {
        if !any.iter().any(|s| s["type"] == "null") {
            any.push(json!({"type": "null"}));
        }
        return schema;
    }
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            if t != "null" {
                map.insert("type".into(), json!([t, "null"]));
            }
        }
        Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
            types.push(json!("null"));
        }
        _ => {}
    }
    if let Some(values) = map.get_mut("enum").and_then(Value::as_array_mut)
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    schema
}

fn is_object(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => map.contains_key("properties"),
    }
}

/// OpenAI's strict form of `schema`: every object closed and fully required (optional
/// properties made nullable), `default` dropped. `None` for free-form objects.
fn strict(schema: &Value) -> Option<Value> {
    let Some(map) = schema.as_object() else {
        return Some(schema.clone());
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "default" | "$schema" | "title" => {}
            "properties" | "required" | "additionalProperties" => {}
            "items" => {
                out.insert(key.clone(), strict(value)?);
            }
            "anyOf" | "oneOf" => {
                let list = value
                    .as_array()?
                    .iter()
                    .map(strict)
                    .collect::<Option<Vec<_>>>()?;
                out.insert("anyOf".into(), Value::Array(list));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if is_object(map) {
        // Free-form objects (maps) and objects taking extra properties have no strict
        // form: closing them would refuse arguments the tool accepts.
        let has_props = map
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
        let takes_extra = map.contains_key("additionalProperties") && !closed;
        if (!has_props && !closed) || takes_extra {
            return None;
        }
        let props = map
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut strict_props = Map::new();
        for (name, sub) in &props {
            let sub = strict(sub)?;
            let sub = if required.contains(&name.as_str()) {
                sub
            } else {
                nullable(sub)
            };
            strict_props.insert(name.clone(), sub);
        }
        out.insert(
            "required".into(),
            Value::Array(props.keys().map(|k| json!(k)).collect()),
        );
        out.insert("properties".into(), Value::Object(strict_props));
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Some(Value::Object(out))
}

/// Gemini's subset: no `$schema`, `additionalProperties`, `default` or `const`;
/// `["T", "null"]` becomes `T` with `nullable`; only the formats Gemini knows.
fn gemini(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if let Some(first) = non_null.first() {
                        out.insert("type".into(), (*first).clone());
                    }
                    if non_null.len() < types.len() {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                }
                other => {
                    out.insert("type".into(), other.clone());
                }
            },
            "format" => {
                let known = ["int32", "int64", "float", "double", "date-time", "enum"];
                if value.as_str().is_some_and(|f| known.contains(&f)) {
                    out.insert(key.clone(), value.clone());
                }
            }
            "properties" => {
                let props = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), gemini(v)))
                            .collect::<Map<_, _>>()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" => {
                out.insert(key.clone(), gemini(value));
            }
            "anyOf" | "oneOf" => {
                let list: Vec<Value> = value.as_array().into_iter().flatten().map(gemini).collect();
                out.insert("anyOf".into(), Value::Array(list));
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "description" | "nullable" | "enum" | "required" | "minItems" | "maxItems"
            | "minimum" | "maximum" | "minLength" | "maxLength" | "pattern" => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}
