/// Borrowed argument.
#[jianmu_tool_macros::tool]
fn b(x: &str) -> String {
    x.to_owned()
}

fn main() {}
