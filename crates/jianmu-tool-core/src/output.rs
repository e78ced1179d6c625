//! `ToolOutput` and the conversions that let a plain function return ordinary values.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ToolError;

/// What a successful call gives back: text for the model, and optionally the same
/// result as structured JSON for programs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The text the model reads.
    #[serde(default)]
    pub text: String,
    /// The result as JSON, when the tool has a structured form of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Images for the model to see (MCP image content), in order after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// An image in a tool's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Its MIME type: `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// Its bytes, base64-encoded (standard alphabet, padded).
    pub base64: String,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
            images: Vec::new(),
        }
    }

    /// Adds an image after the text.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Adds a structured form of the result.
    #[must_use]
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// The answer's text and its structured form whole, for clients that read only
    /// the structured form (MCP's `structuredContent`): the tool's object with the
    /// text set as its `text` field, so that both say the same, as
    /// [`ToolSpec::whole_output_schema`] describes. `None` when the tool has no
    /// structured form, or one that is not an object (a number, a list): MCP's
    /// `structuredContent` is an object, and the text already says that value.
    ///
    /// [`ToolSpec::whole_output_schema`]: crate::ToolSpec::whole_output_schema
    pub fn into_whole(self) -> (String, Option<Value>, Vec<Image>) {
        let structured = match self.structured {
            Some(Value::Object(mut map)) => {
                map.insert(
                    crate::WHOLE_TEXT.to_owned(),
                    Value::String(self.text.clone()),
                );
                Some(Value::Object(map))
            }
            _ => None,
        };
        (self.text, structured, self.images)
    }
}

/// Values a tool body may return. `Result<T, E>` turns `Err` into a tool failure the
/// model reads, with `E`'s `Display` text as the message.
pub trait IntoToolOutput {
    /// Converts the value.
    ///
    /// # Errors
    /// When the value stands for a failure (an `Err`), or a structured value that
    /// cannot be encoded as JSON.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;

    /// The JSON Schema of the structured output this type gives, derived from its
    /// type ([`Structured`], [`Json`]); `None` for text, numbers and untyped values.
    /// [`crate::Tool::output_schema`] defaults to it.
    fn output_schema() -> Option<Value>
    where
        Self: Sized,
    {
        None
    }
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(self)
    }
}

impl IntoToolOutput for String {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for &str {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self))
    }
}

impl IntoToolOutput for () {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::default())
    }
}

impl IntoToolOutput for Value {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let text = match &self {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Ok(ToolOutput::text(text).with_structured(self))
    }
}

macro_rules! display_outputs {
    ($($t:ty),*) => {$(
        impl IntoToolOutput for $t {
            fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
                Ok(ToolOutput::text(self.to_string()).with_structured(Value::from(self)))
            }
        }
    )*};
}

display_outputs!(bool, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// Wraps a typed value so a tool can return it: the text is its JSON, the
/// structured output the same value, and the output schema is derived from `T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize + schemars::JsonSchema> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let value = encode(&self.0)?;
        Ok(ToolOutput::text(value.to_string()).with_structured(value))
    }

    fn output_schema() -> Option<Value> {
        Some(crate::schema_for::<T>())
    }
}

/// A result told twice: as text for the model, and as a typed value for programs
/// (MCP's `structuredContent`). The tool's output schema is derived from `T`, so the
/// schema and the values cannot drift apart. What a tool with structured output
/// returns:
///
/// ```
/// use jianmu_tool_core::{IntoToolOutput, Structured};
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Sum {
///     /// The sum.
///     total: i64,
/// }
///
/// let out = Structured::new("1 + 2 = 3", Sum { total: 3 }).into_tool_output().unwrap();
/// assert_eq!(out.structured.unwrap()["total"], 3);
/// let schema = <Structured<Sum> as IntoToolOutput>::output_schema().unwrap();
/// assert_eq!(schema["properties"]["total"]["type"], "integer");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T> {
    /// The text the model reads.
    pub text: String,
    /// The same result, typed.
    pub data: T,
    /// Images for the model to see, in order after the text.
    pub images: Vec<Image>,
}

impl<T> Structured<T> {
    /// `text` for the model, with `data`, the same result, for programs.
    pub fn new(text: impl Into<String>, data: T) -> Self {
        Self {
            text: text.into(),
            data,
            images: Vec::new(),
        }
    }

    /// Adds an image after the text.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }
}

impl<T: Serialize + schemars::JsonSchema> IntoToolOutput for Structured<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            structured: Some(encode(&self.data)?),
            text: self.text,
            images: self.images,
        })
    }

    fn output_schema() -> Option<Value> {
        Some(crate::schema_for::<T>())
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value)
        .map_err(|e| ToolError::failed(format!("the result could not be encoded as JSON: {e}")))
}

impl<T: IntoToolOutput, E: std::fmt::Display> IntoToolOutput for Result<T, E> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        match self {
            Ok(v) => v.into_tool_output(),
            Err(e) => Err(ToolError::failed(e.to_string())),
        }
    }

    fn output_schema() -> Option<Value> {
        T::output_schema()
    }
}

/// `text` split after its first `max` characters: the kept prefix, and how many
/// characters were cut (0 when `text` is that short). Tools use it to cap what they
/// return, each with its own notice.
pub fn cut_chars(text: &str, max: usize) -> (&str, usize) {
    match text.char_indices().nth(max) {
        None => (text, 0),
        Some((at, _)) => (&text[..at], text[at..].chars().count()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cut_chars_counts_characters_not_bytes() {
        assert_eq!(super::cut_chars("héllo", 2), ("hé", 3));
        assert_eq!(super::cut_chars("hé", 2), ("hé", 0));
        assert_eq!(super::cut_chars("", 0), ("", 0));
    }
}
