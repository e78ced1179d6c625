//! Runnable examples of Jianmu tools used as a library; see `examples/` and run one
//! with `cargo run -p jianmu-examples --example pick_tools`.
