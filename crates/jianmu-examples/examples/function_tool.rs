//! Write a tool from a plain function with `#[tool]`, and call it the way a model
//! would, bad arguments included.
//!
//! `cargo run -p jianmu-examples --example function_tool`

use jianmu_tool_core::{ToolError, ToolHandle, ToolSet};
use jianmu_tool_macros::tool;
use serde_json::json;

/// Converts a temperature from Celsius to Fahrenheit.
#[tool(effects = [], parallel_safe = true)]
fn celsius_to_fahrenheit(
    /// Degrees Celsius.
    celsius: f64,
) -> String {
    format!("{:.1} °F", celsius * 9.0 / 5.0 + 32.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ToolError> {
    let tools = ToolSet::from_tools([ToolHandle::new(celsius_to_fahrenheit_tool())?]);
    let spec = tools.tool("celsius_to_fahrenheit")?.spec();
    println!(
        "{}",
        serde_json::to_string_pretty(&spec.parameters()).unwrap_or_default()
    );

    let out = tools
        .execute("celsius_to_fahrenheit", json!({"celsius": 21.5}), None)
        .await?;
    println!("{}", out.text);

    // Every violation is listed with its JSON pointer, before the function runs.
    let err = tools
        .execute("celsius_to_fahrenheit", json!({"celsius": "warm"}), None)
        .await
        .unwrap_err();
    println!("{err}");
    Ok(())
}
