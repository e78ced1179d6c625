/// Misspelt key.
#[jianmu_tool_macros::tool(nmae = "x")]
fn k() -> i32 {
    1
}

fn main() {}
