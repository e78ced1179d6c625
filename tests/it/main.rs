//! Workspace-level tests: the layers working together, and the tidy checks that keep
//! the repository honest.

mod call_path;
mod export;
mod hostile;
mod lsp;
mod outputs;
mod properties;
mod script;
mod spill;
mod tidy;
