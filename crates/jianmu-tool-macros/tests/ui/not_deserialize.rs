struct Opaque;

/// Argument type without serde support.
#[jianmu_tool_macros::tool]
fn o(x: Opaque) -> i32 {
    let _ = x;
    1
}

fn main() {}
