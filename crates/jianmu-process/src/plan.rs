//! What a jailed command's setup needs after `fork` or `clone`, prepared before it.

use std::os::fd::OwnedFd;

use crate::userns::{Maps, Paths};

/// What a jailed command's setup needs after `fork`, prepared before it: nothing here
/// allocates or locks in the child.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Whether commands start as the init of their own user and PID namespace.
    pub(crate) namespaces: bool,
    /// The identity maps such a command writes for itself.
    pub(crate) maps: Maps,
    /// Whether it mounts its own `/proc` (isolated, in namespaces).
    pub(crate) fresh_proc: bool,
    /// Set when entering the namespaces failed although the probe said they work
    /// (a policy that refuses them to this process): commands then go through the
    /// supervisor.
    pub(crate) namespaces_failed: std::sync::atomic::AtomicBool,
    /// The Landlock ruleset to enforce.
    pub(crate) landlock: Option<OwnedFd>,
    /// The seccomp program to install.
    pub(crate) seccomp: Option<Vec<libc::sock_filter>>,
    /// The data limit (`RLIMIT_DATA`) of each process, in bytes.
    pub(crate) memory: Option<u64>,
    /// `/proc/thread-self/children`, `/proc`, `proc`, `/`.
    pub(crate) paths: Paths,
}
