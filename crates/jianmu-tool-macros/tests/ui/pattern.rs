/// Pattern argument.
#[jianmu_tool_macros::tool]
fn p((a, b): (i32, i32)) -> i32 {
    a + b
}

fn main() {}
