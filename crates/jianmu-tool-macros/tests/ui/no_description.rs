#[jianmu_tool_macros::tool]
fn undocumented() -> i32 {
    1
}

fn main() {}
