/// Generic.
#[jianmu_tool_macros::tool]
fn g<T: ToString>(x: T) -> String {
    x.to_string()
}

fn main() {}
