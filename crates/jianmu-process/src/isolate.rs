//! Applying a [`Plan`]'s isolation to the calling process before `exec`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::plan::Plan;
use crate::sys::{check, check_int};
use crate::userns::own_proc;

/// Applies the isolation to the calling process before `exec`: its own `/proc` (when
/// `fresh_proc`, in its own PID namespace), the Landlock ruleset `landlock` and the
/// seccomp filter. System calls on prepared data only.
pub(crate) fn isolate(plan: &Plan, fresh_proc: bool, landlock: Option<&OwnedFd>) -> io::Result<()> {
    // SAFETY: system calls on data prepared before the fork or clone.
    unsafe {
        if fresh_proc {
            own_proc(&plan.paths)?;
        }
        if let Some(bytes) = plan.memory {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            check_int(libc::setrlimit(libc::RLIMIT_DATA, &limit))?;
        }
        if landlock.is_some() || plan.seccomp.is_some() {
            check_int(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        if let Some(ruleset) = landlock {
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                ruleset.as_raw_fd(),
                0u32,
            ))?;
        }
        if let Some(filter) = &plan.seccomp {
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            check_int(libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const program,
                0,
                0,
            ))?;
        }
    }
    Ok(())
}
