//! `ToolSpec`: what a model and a policy need to know about a tool before calling it.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The field of a whole structured result that holds the answer's text
/// ([`ToolSpec::whole_output_schema`]).
pub const WHOLE_TEXT: &str = "text";

/// The static description of a tool: the attributes of the Python tools'
/// (docs/python-compat.md).
///
/// `input_schema` and `output_schema` are JSON Schemas. A bare-string input schema
/// (`{"type": "string"}`) is allowed: such a tool accepts a JSON string or
/// `{"input": "..."}`, and [`ToolSpec::parameters`] exports the object form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The unique name a model calls the tool by.
    pub name: String,
    /// What the tool does, written for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// JSON Schema of the output: of its structured JSON when the tool returns one
    /// (an object schema), else of its text (a string schema).
    pub output_schema: Value,
    /// Whether calls may run concurrently with other calls.
    pub parallel_safe: bool,
    /// Side effects such as `filesystem:write` or `network`, for policies.
    pub effect_tags: Vec<String>,
}

impl ToolSpec {
    /// A spec with the defaults: a string input, a text output, parallel-safe, no
    /// effects.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: default_string_schema("Tool input string"),
            output_schema: text_output_schema(),
            parallel_safe: true,
            effect_tags: Vec::new(),
        }
    }

    /// Appends `sentence`, when there is one, to the description: what a tool's
    /// settings allow here, for example.
    #[must_use]
    pub fn with_sentence(mut self, sentence: Option<String>) -> Self {
        if let Some(sentence) = sentence {
            self.description.push(' ');
            self.description.push_str(&sentence);
        }
        self
    }

    /// Replaces the input schema.
    #[must_use]
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Replaces the output schema.
    #[must_use]
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = schema;
        self
    }

    /// Sets whether calls may run concurrently.
    #[must_use]
    pub fn with_parallel_safe(mut self, parallel_safe: bool) -> Self {
        self.parallel_safe = parallel_safe;
        self
    }

    /// Sets the effect tags.
    #[must_use]
    pub fn with_effect_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.effect_tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The schema of the tool's structured output, when it has one: the output schema
    /// if it describes an object (what MCP's `outputSchema` may hold), else `None`
    /// (the tool answers with text only).
    pub fn structured_output_schema(&self) -> Option<&Value> {
        (self.output_schema.get("type").and_then(Value::as_str) == Some("object"))
            .then_some(&self.output_schema)
    }

    /// The output schema a front end announces with whole structured results
    /// ([`crate::ToolOutput::into_whole`]): the tool's own object schema with `text`, the
    /// whole answer, added and required; `None` for a tool that answers with text
    /// only.
    pub fn whole_output_schema(&self) -> Option<Value> {
        let mut schema = self.structured_output_schema()?.clone();
        let object = schema.as_object_mut()?;
        let properties = object
            .entry("properties")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        properties.as_object_mut()?.insert(
            WHOLE_TEXT.to_owned(),
            json!({
                "type": "string",
                "description": "The whole answer, as the text content gives it: the file's \
                    text, the response's body, the page, the command's output. The other \
                    fields describe it.",
            }),
        );
        let required = object
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(required) = required.as_array_mut()
            && !required.iter().any(|r| r == WHOLE_TEXT)
        {
            required.push(WHOLE_TEXT.into());
        }
        Some(schema)
    }

    /// True when the input schema is a bare string (`{"type": "string"}`).
    pub fn takes_bare_string(&self) -> bool {
        self.input_schema.get("type").and_then(Value::as_str) == Some("string")
    }

    /// The input schema as an object schema, the form function-calling APIs require:
    /// a bare-string schema becomes `{"type": "object", "properties": {"input": ...}}`.
    pub fn parameters(&self) -> Value {
        if self.takes_bare_string() {
            json!({
                "type": "object",
                "properties": { "input": self.input_schema },
                "required": ["input"],
                "additionalProperties": false,
            })
        } else {
            self.input_schema.clone()
        }
    }

    /// The first line of the description, for listings.
    pub fn summary(&self) -> &str {
        self.description.lines().next().unwrap_or("").trim()
    }
}

/// The output schema of a tool whose calls return `T`: the schema `T` declares
/// ([`crate::IntoToolOutput::output_schema`]), else a string (text only).
pub fn output_schema_of<T: crate::IntoToolOutput>() -> Value {
    T::output_schema().unwrap_or_else(text_output_schema)
}

fn text_output_schema() -> Value {
    default_string_schema("The tool's answer, as text")
}

fn default_string_schema(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// The JSON Schema of `T` in the form LLM APIs accept: no `$schema`, no `title`,
/// sub-schemas inlined, and no description at the root (the tool's description says
/// what the arguments are for; a struct's doc comment would only repeat it).
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.meta_schema = None;
        s.inline_subschemas = true;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(map) = value.as_object_mut() {
        map.remove("title");
        map.remove("description");
    }
    value
}
