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
    /// the structured form (MCP's `structuredContent`): the tool's value with the
    /// text set as its `text` field, so that both say the same, as
    /// [`ToolSpec::whole_output_schema`] describes. `None` when the tool has no
    /// structured form.
    ///
    /// [`ToolSpec::whole_output_schema`]: crate::ToolSpec::whole_output_schema
    pub fn into_whole(self) -> (String, Option<Value>, Vec<Image>) {
        let structured = self.structured.map(|mut value| {
            if let Value::Object(map) = &mut value {
                map.insert(
                    crate::WHOLE_TEXT.to_owned(),
                    Value::String(self.text.clone()),
                );
            }
            value
        });
        (self.text, structured, self.images)
    }

    /// Adds `data` as the structured form of the result. A tool that does this derives
    /// its output schema from the same type (`schema_for::<T>()`), so the two cannot
    /// drift apart. A value that cannot be encoded (a map with non-string keys) is
    /// left out.
    #[must_use]
    pub fn with_data<T: Serialize>(mut self, data: &T) -> Self {
        self.structured = serde_json::to_value(data).ok();
        self
    }
}

/// Values a tool body may return. `Result<T, E>` turns `Err` into a tool failure the
/// model reads, with `E`'s `Display` text as the message.
pub trait IntoToolOutput {
    /// Converts the value.
    ///
    /// # Errors
    /// When the value stands for a failure (an `Err`).
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;
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

/// Wraps any `Serialize` value so a tool can return it: the text is its JSON, the
/// structured output the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        let value = serde_json::to_value(&self.0).map_err(|e| {
            ToolError::failed(format!("the result could not be encoded as JSON: {e}"))
        })?;
        Ok(ToolOutput::text(value.to_string()).with_structured(value))
    }
}

impl<T: IntoToolOutput, E: std::fmt::Display> IntoToolOutput for Result<T, E> {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        match self {
            Ok(v) => v.into_tool_output(),
            Err(e) => Err(ToolError::failed(e.to_string())),
        }
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
