/// Not a function.
#[jianmu_tool_macros::tool]
struct NotAFunction;

fn main() {}
