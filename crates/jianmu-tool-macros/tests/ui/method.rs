struct S;

impl S {
    /// A method.
    #[jianmu_tool_macros::tool]
    fn m(&self, x: i32) -> i32 {
        x
    }
}

fn main() {}
