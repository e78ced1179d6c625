//! The supervisor, where namespaces do not work: `std` forks a child that becomes the
//! supervisor (a subreaper), which forks the worker that execs the command, then kills
//! and reaps everything below it when the worker ends or it is told to stop.
//!
//! Everything here runs between `fork` and `exec`: it only makes system calls on data
//! prepared before the fork (no allocation, no locks), as a forked child of a
//! multithreaded process requires.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::isolate::isolate;
use crate::plan::Plan;
use crate::sys::check_int;
use crate::userns::Paths;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Runs in the child `std` forked for a jailed command where namespaces do not work,
/// before `exec`: becomes the supervisor, forks the worker and returns in the worker
/// only (which then execs).
pub(crate) fn enter(
    plan: &Plan,
    parent: libc::pid_t,
    net: Option<&crate::netns::PrivateNet>,
    terminal: bool,
) -> io::Result<()> {
    // The supervisor and everything below it live in the session's private network.
    if let Some(net) = net {
        net.enter()?;
    }
    // SAFETY: system calls on data prepared before the fork (see the module doc).
    unsafe {
        // Hold the stop signals until the handlers are in place.
        let mut stop: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut stop);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut stop, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &stop, std::ptr::null_mut());
        // Some kernels do not implement subreapers (gVisor's, as Debian packages it):
        // there the worker leads a process group of its own, and the group is what
        // gets ended; a process that leaves the group (`setsid`) is reparented to
        // the system's init instead, beyond the supervisor's reach.
        let subreaper = libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
        // The caller's death stops the supervisor (which still cleans up).
        check_int(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        let worker = check_int(libc::fork())?;
        if worker == 0 {
            // On a terminal the worker leads a session of its own (and so a group).
            if terminal {
                if !crate::pty::take_as_controlling() {
                    return Err(io::Error::last_os_error());
                }
            } else if !subreaper {
                libc::setpgid(0, 0);
            }
            return setup_worker(plan);
        }
        if !subreaper && !terminal {
            // Both sides set it, so neither races the other.
            libc::setpgid(worker, worker);
        }
        supervise(worker, &plan.paths, subreaper)
    }
}

/// The worker's setup before `exec`.
///
/// # Safety
/// Only in the forked worker, before `exec`: it changes this process's signal
/// state and isolation for good.
unsafe fn setup_worker(plan: &Plan) -> io::Result<()> {
    // SAFETY: system calls on data prepared before the fork.
    unsafe {
        check_int(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    isolate(plan, false, plan.landlock.as_ref())
}

/// The supervisor: waits for the worker, then kills and reaps everything left below
/// it, and exits as the worker did. Never returns.
///
/// # Safety
/// Only in the forked supervisor process, with `worker` its child: it exits the
/// process.
unsafe fn supervise(worker: libc::pid_t, paths: &Paths, subreaper: bool) -> ! {
    // SAFETY: system calls only; the process exits at the end.
    unsafe {
        // Nothing of the caller's: not the command's pipes (their readers see the end
        // as soon as the command's processes are gone) and not the spawn's error pipe.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        for s in 1..32 {
            if s != libc::SIGKILL && s != libc::SIGSTOP {
                libc::signal(s, libc::SIG_DFL);
            }
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        for s in STOP_SIGNALS {
            libc::sigaction(s, &action, std::ptr::null_mut());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());

        let mut killed = false;
        let mut worker_status: Option<libc::c_int> = None;
        loop {
            if STOP.load(Ordering::SeqCst) && !killed {
                libc::kill(worker, libc::SIGKILL);
                if !subreaper {
                    libc::kill(-worker, libc::SIGKILL);
                }
                killed = true;
            }
            let mut status = 0;
            let r = libc::waitpid(-1, &mut status, libc::__WALL);
            if r == worker {
                worker_status = Some(status);
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        if !subreaper {
            libc::kill(-worker, libc::SIGKILL);
        }
        sweep(paths);
        match worker_status {
            Some(s) if libc::WIFEXITED(s) => libc::_exit(libc::WEXITSTATUS(s)),
            Some(s) if libc::WIFSIGNALED(s) => {
                let sig = libc::WTERMSIG(s);
                libc::signal(sig, libc::SIG_DFL);
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig)
            }
            _ => libc::_exit(125),
        }
    }
}

/// Kills every process below the supervisor until none is left. Orphans of killed
/// processes are reparented to the supervisor (a subreaper), so each pass finds them.
///
/// # Safety
/// Only in the supervisor process (a subreaper): it kills every process below it.
unsafe fn sweep(paths: &Paths) {
    // SAFETY: system calls on a stack buffer and prepared C strings.
    unsafe {
        let mut buf = [0u8; 4096];
        for _ in 0..100_000 {
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) > 0 {}
            let mut found = 0usize;
            let fd = libc::open(paths.children.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return;
            }
            {
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                let mut pid: libc::pid_t = 0;
                for &b in &buf[..usize::try_from(n).unwrap_or(0)] {
                    if b.is_ascii_digit() {
                        pid = pid
                            .saturating_mul(10)
                            .saturating_add(libc::pid_t::from(b - b'0'));
                    } else {
                        if pid > 0 {
                            libc::kill(pid, libc::SIGKILL);
                            found += 1;
                        }
                        pid = 0;
                    }
                }
            }
            if found == 0 {
                // Nothing listed: done once no child is left to reap.
                if libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) < 0 {
                    return;
                }
                continue;
            }
            // Wait for one to go, then look again.
            libc::waitpid(-1, &mut status, libc::__WALL);
        }
    }
}
