//! The tool declarations a client sends for the built-in tool types it executes
//! with [`crate::Native`].

use serde_json::{Value, json};

/// Anthropic's declarations: `bash_20250124`, `text_editor_20250728` (with
/// `max_characters` when given) and `memory_20250818`.
pub fn anthropic_tools(max_characters: Option<usize>) -> Value {
    let mut editor = json!({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"});
    if let Some(max) = max_characters {
        editor["max_characters"] = max.into();
    }
    json!([
        {"type": "bash_20250124", "name": "bash"},
        editor,
        {"type": "memory_20250818", "name": "memory"},
    ])
}

/// Anthropic's agent toolset, as an agent's `tools` list declares it: `bash`,
/// `read`, `write`, `edit`, `glob` and `grep`, run by the client.
pub fn anthropic_agent_toolset() -> Value {
    json!([{"type": "agent_toolset_20260401"}])
}

/// OpenAI Responses' declarations of the built-in `shell` and `apply_patch` tools.
pub fn openai_tools() -> Value {
    json!([{"type": "shell"}, {"type": "apply_patch"}])
}

/// OpenAI Responses' client-executed `tool_search` tool, which `jianmu native openai`
/// answers with the session's matching tools (declare them with `defer_loading`).
pub fn openai_tool_search() -> Value {
    crate::openai::tool_search_declaration()
}

/// OpenAI Responses' `shell`, and `apply_patch` declared as a freeform tool whose
/// input is a whole patch, constrained by a Lark grammar of the patch format.
pub fn openai_freeform_tools() -> Value {
    json!([
        {"type": "shell"},
        {
            "type": "custom",
            "name": "apply_patch",
            "description": FREEFORM_DESCRIPTION,
            "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
        },
    ])
}

const FREEFORM_DESCRIPTION: &str = "Edits files with a patch: the whole input is one patch, \
from `*** Begin Patch` to `*** End Patch`. Each file operation is `*** Add File: PATH` \
followed by its lines, each prefixed with `+`; `*** Delete File: PATH`; or `*** Update \
File: PATH` (optionally followed by `*** Move to: NEW_PATH`) and hunks: an optional `@@ \
LINE` naming a line the hunk comes after, then lines prefixed with ` ` (unchanged \
context, about 3 before and after each change), `-` (removed) or `+` (added), and \
`*** End of File` when the hunk ends at the end of the file. A hunk of only `+` lines \
goes at the end of the file whatever its `@@` line: to insert lines elsewhere, give \
unchanged context lines around them. Paths are relative to the \
workspace root. No line numbers. Every file changes or none does.";

/// The patch format as a Lark grammar.
pub const PATCH_GRAMMAR: &str = r#"start: "*** Begin Patch" LF operation+ "*** End Patch" LF?

operation: add_file | delete_file | update_file

add_file: "*** Add File: " path LF added*
delete_file: "*** Delete File: " path LF
update_file: "*** Update File: " path LF moved? hunk*

moved: "*** Move to: " path LF
hunk: anchor? body_line+ end_of_file?
anchor: "@@" (" " /[^\r\n]*/)? LF
body_line: (" " | "-" | "+") /[^\r\n]*/ LF
added: "+" /[^\r\n]*/ LF
end_of_file: "*** End of File" LF

path: /[^\r\n]+/

%import common.LF
"#;
