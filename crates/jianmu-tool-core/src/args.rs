//! Argument handling on the call path: merging injected values, then validating against
//! the input schema with every violation reported.

use serde_json::{Map, Value};

use crate::{ToolError, ToolSpec, Violation};

/// The key a bare-string tool's argument travels under in object form.
pub const INPUT_KEY: &str = "input";

/// A compiled input schema. Compiled once per tool, used on every call.
pub(crate) struct ArgsValidator {
    validator: jsonschema::Validator,
    bare_string: bool,
    /// Top-level properties that are optional and do not accept `null`: a `null` for
    /// one of them means "absent" (what strict-mode clients send) and is dropped.
    null_means_absent: Vec<String>,
    /// The name of the only argument, when the tool takes exactly one, a required
    /// string: a bare string stands for it (`"x"` means `{"patch": "x"}`).
    lone_string: Option<String>,
}

impl std::fmt::Debug for ArgsValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgsValidator")
            .field("bare_string", &self.bare_string)
            .finish_non_exhaustive()
    }
}

/// Validators already compiled, by the text of their schema, so that a schema is
/// compiled once per process: a deferred handle and the tool it builds, and every
/// session's own set, share one. Schemas come from tools, not from calls; past
/// [`MAX_SHARED`] schemas (or for one over [`MAX_SHARED_TEXT`] bytes) a validator is
/// compiled and not kept.
static SHARED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<ArgsValidator>>>,
> = std::sync::LazyLock::new(Default::default);

/// The most schemas [`SHARED`] keeps.
const MAX_SHARED: usize = 1024;
/// The longest schema text [`SHARED`] keeps.
const MAX_SHARED_TEXT: usize = 256 * 1024;

impl ArgsValidator {
    /// The validator of `spec`'s input schema, compiled once per process.
    pub(crate) fn shared(spec: &ToolSpec) -> Result<std::sync::Arc<Self>, ToolError> {
        use std::sync::{Arc, PoisonError};
        let key = spec.input_schema.to_string();
        let lock = || SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = lock().get(&key) {
            return Ok(Arc::clone(found));
        }
        let made = Arc::new(Self::new(spec)?);
        if key.len() <= MAX_SHARED_TEXT {
            let mut shared = lock();
            if shared.len() < MAX_SHARED {
                return Ok(Arc::clone(shared.entry(key).or_insert(made)));
            }
        }
        Ok(made)
    }

    fn new(spec: &ToolSpec) -> Result<Self, ToolError> {
        let validator = compile(&spec.input_schema).map_err(|e| ToolError::Config {
            tool: spec.name.clone(),
            message: format!("the input schema is not a valid JSON Schema: {e}"),
        })?;
        Ok(Self {
            validator,
            bare_string: spec.takes_bare_string(),
            null_means_absent: optional_non_null(&spec.input_schema),
            lone_string: lone_string(&spec.input_schema),
        })
    }

    /// Merges `injected` into `args`, then validates. Returns the arguments in the shape
    /// the tool body expects: a bare string for bare-string tools, else an object.
    pub(crate) fn prepare(
        &self,
        tool: &str,
        args: Value,
        injected: Option<&Map<String, Value>>,
        prefer_injected: bool,
    ) -> Result<Value, ToolError> {
        let args = self.normalize(tool, args)?;
        let args = match injected {
            Some(injected) if !injected.is_empty() => merge(tool, args, injected, prefer_injected)?,
            _ => args,
        };
        let mut args = if self.bare_string {
            unwrap_input(tool, args)?
        } else {
            args
        };
        if let Value::Object(map) = &mut args {
            for key in &self.null_means_absent {
                if map.get(key) == Some(&Value::Null) {
                    map.remove(key);
                }
            }
        }
        self.validate(tool, &args)?;
        Ok(args)
    }

    fn normalize(&self, tool: &str, args: Value) -> Result<Value, ToolError> {
        match args {
            // Models often send `null` for "no arguments".
            Value::Null if !self.bare_string => Ok(Value::Object(Map::new())),
            Value::String(_) if self.bare_string => {
                let mut map = Map::new();
                map.insert(INPUT_KEY.to_owned(), args);
                Ok(Value::Object(map))
            }
            Value::String(_) if self.lone_string.is_some() => {
                let mut map = Map::new();
                map.insert(self.lone_string.clone().unwrap_or_default(), args);
                Ok(Value::Object(map))
            }
            Value::Object(_) => Ok(args),
            other if self.bare_string => Err(invalid(
                tool,
                "",
                format!(
                    "expected a string or {{\"{INPUT_KEY}\": string}}, got {}",
                    kind_of(&other)
                ),
            )),
            // Let the schema say what is wrong with a non-object.
            other => Ok(other),
        }
    }

    fn validate(&self, tool: &str, args: &Value) -> Result<(), ToolError> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let violations = self
            .validator
            .iter_errors(args)
            .map(|e| Violation {
                // The exported schema of a bare-string tool is `{"input": string}`;
                // point into that, the shape the model was shown.
                pointer: if self.bare_string {
                    format!("/{INPUT_KEY}{}", e.instance_path())
                } else {
                    e.instance_path().to_string()
                },
                message: clip(e.to_string()),
            })
            .collect();
        Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            violations,
        })
    }
}

fn merge(
    tool: &str,
    args: Value,
    injected: &Map<String, Value>,
    prefer_injected: bool,
) -> Result<Value, ToolError> {
    let Value::Object(mut map) = args else {
        return Err(invalid(
            tool,
            "",
            format!("injected arguments need an object, got {}", kind_of(&args)),
        ));
    };
    for (key, value) in injected {
        if prefer_injected || !map.contains_key(key) {
            map.insert(key.clone(), value.clone());
        }
    }
    Ok(Value::Object(map))
}

fn unwrap_input(tool: &str, args: Value) -> Result<Value, ToolError> {
    let Value::Object(mut map) = args else {
        return Ok(args);
    };
    let input = map.remove(INPUT_KEY);
    if let Some(extra) = map.keys().next() {
        return Err(invalid(
            tool,
            &format!("/{extra}"),
            format!("this tool takes a single `{INPUT_KEY}` string; unexpected key `{extra}`"),
        ));
    }
    input.ok_or_else(|| {
        invalid(
            tool,
            "",
            format!("expected a string or {{\"{INPUT_KEY}\": string}}, got an object without `{INPUT_KEY}`"),
        )
    })
}

fn invalid(tool: &str, pointer: &str, message: String) -> ToolError {
    ToolError::InvalidArguments {
        tool: tool.to_owned(),
        violations: vec![Violation {
            pointer: pointer.to_owned(),
            message,
        }],
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Violation messages quote the offending value; a huge value must not make a huge
/// error, so messages are cut.
fn clip(mut message: String) -> String {
    const MAX: usize = 300;
    if message.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|i| message.is_char_boundary(*i))
            .unwrap_or(0);
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

/// The only property of an object schema, when it is a required string.
fn lone_string(schema: &Value) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    let (name, sub) = props.iter().next().filter(|_| props.len() == 1)?;
    let required = schema.get("required")?.as_array()?;
    (required.len() == 1
        && required[0].as_str() == Some(name)
        && sub.get("type").and_then(Value::as_str) == Some("string"))
    .then(|| name.clone())
}

fn optional_non_null(schema: &Value) -> Vec<String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    props
        .iter()
        .filter(|(name, _)| !required.contains(&name.as_str()))
        .filter(|(_, sub)| !compile(sub).is_ok_and(|v| v.is_valid(&Value::Null)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Compiles `schema`. A schema that names no draft and uses only keywords whose meaning
/// is the same in draft 7 and draft 2020-12 (what tool schemas are made of) is compiled
/// as draft 7: checking it against its meta-schema costs a third of 2020-12's, which is
/// paid once per process, so at every `jianmu call`. Any other schema is compiled as
/// it says, or as 2020-12.
fn compile(schema: &Value) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    if schema.get("$schema").is_none() && plain(schema, 0) {
        // 2020-12 does not assert `format`; neither does this.
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .should_validate_formats(false)
            .build(schema)
    } else {
        jsonschema::validator_for(schema)
    }
}

/// True when every keyword of `schema` (and of its subschemas) means the same in
/// draft 7 and draft 2020-12.
fn plain(schema: &Value, depth: usize) -> bool {
    const SAME: [&str; 22] = [
        "type",
        "enum",
        "const",
        "default",
        "description",
        "title",
        "examples",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "uniqueItems",
        "required",
        "minProperties",
        "maxProperties",
    ];
    let Some(map) = schema.as_object() else {
        return schema.is_boolean();
    };
    if depth > 32 {
        return false;
    }
    map.iter().all(|(key, value)| match key.as_str() {
        "properties" => value
            .as_object()
            .is_some_and(|props| props.values().all(|v| plain(v, depth + 1))),
        "items" | "additionalProperties" | "not" => plain(value, depth + 1),
        "anyOf" | "oneOf" | "allOf" => value
            .as_array()
            .is_some_and(|all| all.iter().all(|v| plain(v, depth + 1))),
        key => SAME.contains(&key),
    })
}

#[cfg(test)]
mod draft_tests {
    use serde_json::json;

    use super::{compile, plain};

    #[test]
    fn plain_schemas_compile_as_draft_7_and_mean_the_same() {
        let tool = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "mode": {"anyOf": [{"const": "a"}, {"type": "null"}]},
                "items": {"type": "array", "items": {"type": "integer", "format": "uint32"}},
                "mail": {"type": "string", "format": "email"},
            },
            "required": ["path"],
            "additionalProperties": false,
        });
        assert!(plain(&tool, 0));
        let v = compile(&tool).unwrap();
        assert!(
            v.is_valid(&json!({"path": "a", "mode": null, "items": [1], "mail": "not-an-email"}))
        );
        assert!(!v.is_valid(&json!({"path": ""})));
        assert!(!v.is_valid(&json!({"path": "a", "extra": 1})));
        // Anything whose meaning could differ goes to the draft it names, or 2020-12.
        for other in [
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}),
            json!({"type": "array", "prefixItems": [{"type": "string"}]}),
            json!({"type": "object", "unevaluatedProperties": false}),
        ] {
            assert!(!plain(&other, 0), "{other}");
            assert!(compile(&other).is_ok(), "{other}");
        }
        // A draft 7 tuple is not plain: 2020-12 refuses it, as before.
        let tuple = json!({"type": "array", "items": [{"type": "string"}]});
        assert!(!plain(&tuple, 0));
        let tuple =
            compile(&json!({"type": "array", "prefixItems": [{"type": "string"}]})).unwrap();
        assert!(!tuple.is_valid(&json!([1])));
    }
}
