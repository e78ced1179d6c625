//! Jianmu tools in other agent frameworks.
//!
//! Each framework is a feature, so a crate links only the one it uses:
//!
//! - `rig`: every tool of a [`Session`](jianmu_runtime::Session) or a
//!   [`ToolSet`](jianmu_tool_core::ToolSet) as a rig tool
//!   ([`rig_core::tool::PortableDynamicTool`]), which a rig agent takes with
//!   `AgentBuilder::portable_dynamic_tool`. See [`rig`].
//!
//! Calls keep everything the session gives them: its runner stack (policy, timeout,
//! events, the audit log), its sandbox, and the tools' state between calls (shell
//! sessions, jobs, interpreters).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;
