//! Workspace-level tests live in `it/`.
