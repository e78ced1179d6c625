//! Jianmu tools in other agent frameworks.
//!
//! Each framework is a feature, so a crate links only the one it uses:
//!
//! - `rig`: every tool of a [`Session`](jianmu_runtime::Session) or a
//!   [`ToolSet`](jianmu_tool_core::ToolSet) as a rig tool
//!   ([`rig_core::tool::PortableDynamicTool`]), which a rig agent takes with
//!   `AgentBuilder::portable_dynamic_tool`. See [`rig`].
//!
//! - `swiftide`: the same as swiftide tools ([`swiftide_core::chat_completion::Tool`]),
//!   and a session as swiftide's [`swiftide_core::ToolExecutor`], so a swiftide agent's
//!   commands run in the session's local jail or Docker container. See [`swiftide`].
//!
//! Calls keep everything the session gives them: its runner stack (policy, timeout,
//! events, the audit log), its sandbox, and the tools' state between calls (shell
//! sessions, jobs, interpreters).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "rig", feature = "swiftide"))]
mod call;

#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;

#[cfg(feature = "swiftide")]
#[cfg_attr(docsrs, doc(cfg(feature = "swiftide")))]
pub mod swiftide;
