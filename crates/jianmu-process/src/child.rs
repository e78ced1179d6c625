//! Work that may crash, run away or exhaust memory, done in a forked copy of this
//! process: parsers of hostile documents whose failures (a panic, a stack overflow, an
//! endless loop, an allocation without end) must end one call, never the process.
//!
//! The child is a copy of the caller made by `fork`, so the work is an ordinary Rust
//! closure, in every program that links this crate (there is no helper binary to
//! find). It runs on a thread with a large stack of its own, under an address-space
//! limit, and writes its result to a pipe the parent reads, bounded; the parent kills
//! it at the deadline and always reaps it. The child also dies with the thread that
//! forked it. Children at once share one memory budget ([`CHILDREN_MEMORY`]): one
//! that would take more waits, within its deadline, for others to end.
//!
//! A forked child of a multithreaded process may find a lock held by a thread that
//! does not exist in it. The allocator is made safe for this by the C library (glibc
//! and musl both reset their allocator's locks in the child); any other lock the work
//! could wait on forever is covered by the deadline. Only use this for computation on
//! memory: no I/O besides the writer, no runtime, no locks of the caller's.
#![allow(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::sys::check_int;

/// The bounds of one piece of work in a child.
#[derive(Debug, Clone, Copy)]
pub struct ChildLimits {
    /// When the child is killed.
    pub timeout: Duration,
    /// How long the child may go without writing before it is killed (work that
    /// reports progress, such as one line a page, is killed when stuck on one step).
    pub idle: Option<Duration>,
    /// The memory the work may allocate beyond what the caller has mapped, in bytes.
    pub memory: u64,
    /// The most bytes of output kept; the child is killed when it writes more.
    pub output: usize,
    /// The stack of the thread the work runs on, in bytes.
    pub stack: usize,
}

impl Default for ChildLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            idle: None,
            memory: 1 << 30,
            output: 16 << 20,
            stack: 256 << 20,
        }
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// The work returned.
    Finished,
    /// The work panicked, overflowed its stack, ran out of memory or was killed by a
    /// signal: what it wrote before that is kept.
    Crashed,
    /// The deadline passed; the child was killed.
    TimedOut,
    /// It wrote nothing for longer than [`ChildLimits::idle`]; the child was killed.
    Stalled,
    /// It wrote more than the output limit; the child was killed.
    OutputFull,
}

/// What a child wrote, and how it ended.
#[derive(Debug)]
pub struct ChildRun {
    /// Its output, at most the limit.
    pub output: Vec<u8>,
    /// How it ended.
    pub end: ChildEnd,
}

/// The pipe the work writes its result to.
#[derive(Debug)]
pub struct ChildWriter {
    fd: OwnedFd,
}

impl Write for ChildWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            // SAFETY: writes from a live buffer to a descriptor this value owns.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The memory all children of this process may take at once, in bytes: a child whose
/// limit does not fit beside the others' waits (one larger than this waits for all
/// the others and runs alone).
pub const CHILDREN_MEMORY: u64 = 4 << 30;

/// Memory reserved by children running now.
static RESERVED: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
static RELEASED: std::sync::Condvar = std::sync::Condvar::new();

/// A child's share of [`CHILDREN_MEMORY`], given back when dropped.
struct Share(u64);

impl Share {
    /// Waits until `memory` (at most all of it) fits, or answers `None` at `deadline`.
    fn take(memory: u64, deadline: Instant) -> Option<Self> {
        let want = memory.min(CHILDREN_MEMORY);
        let mut reserved = RESERVED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *reserved + want > CHILDREN_MEMORY {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            reserved = RELEASED
                .wait_timeout(reserved, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        *reserved += want;
        Some(Self(want))
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut reserved = RESERVED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *reserved = reserved.saturating_sub(self.0);
        RELEASED.notify_all();
    }
}

/// Runs `work` in a forked child within `limits` and returns what it wrote. Blocks
/// the calling thread until the child has ended and been reaped; call it from a
/// thread that may block.
///
/// # Errors
/// The pipe or the fork could not be made.
pub fn run_in_child<F>(mut limits: ChildLimits, work: F) -> io::Result<ChildRun>
where
    F: FnOnce(&mut ChildWriter) + Send,
{
    // Its share of the memory all children may take at once, waited for within the
    // deadline; the wait counts toward it.
    let started = Instant::now();
    let Some(_share) = Share::take(limits.memory, started + limits.timeout) else {
        return Ok(ChildRun {
            output: Vec::new(),
            end: ChildEnd::TimedOut,
        });
    };
    limits.timeout = limits.timeout.saturating_sub(started.elapsed());
    let mut fds = [0; 2];
    // SAFETY: `pipe2` fills the two-element array.
    check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just made and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: see the module doc; the child only runs `child_main`, which never returns.
    let pid = check_int(unsafe { libc::fork() })?;
    if pid == 0 {
        drop(read);
        child_main(parent, limits, ChildWriter { fd: write }, work);
    }
    drop(write);
    let reaper = Reaper { pid, reaped: false };
    let (output, end) = collect(&read, &limits);
    if end != ChildEnd::Finished {
        reaper.kill();
    }
    let status = reaper.wait();
    let end = match end {
        ChildEnd::Finished if !exited_cleanly(status) => ChildEnd::Crashed,
        other => other,
    };
    Ok(ChildRun { output, end })
}

/// Reads the child's output until it closes the pipe, the deadline or the limit.
/// `Finished` here only means the pipe closed; the exit status decides the rest.
fn collect(read: &OwnedFd, limits: &ChildLimits) -> (Vec<u8>, ChildEnd) {
    let deadline = Instant::now() + limits.timeout;
    let mut output = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut last = Instant::now();
    loop {
        let now = Instant::now();
        let mut left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return (output, ChildEnd::TimedOut);
        }
        if let Some(idle) = limits.idle {
            let quiet = (last + idle).saturating_duration_since(now);
            if quiet.is_zero() {
                return (output, ChildEnd::Stalled);
            }
            left = left.min(quiet);
        }
        let mut poll = libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: polls one valid descriptor through a live struct.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (output, ChildEnd::Crashed);
        }
        if ready == 0 {
            continue;
        }
        // SAFETY: reads into a live buffer of the given length.
        let n = unsafe { libc::read(read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (output, ChildEnd::Crashed);
        }
        if n == 0 {
            return (output, ChildEnd::Finished);
        }
        last = Instant::now();
        let n = n as usize;
        if output.len() + n > limits.output {
            let room = limits.output - output.len();
            output.extend_from_slice(&buf[..room]);
            return (output, ChildEnd::OutputFull);
        }
        output.extend_from_slice(&buf[..n]);
    }
}

fn exited_cleanly(status: libc::c_int) -> bool {
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Kills and reaps the child however the parent leaves.
struct Reaper {
    pid: libc::pid_t,
    reaped: bool,
}

impl Reaper {
    fn kill(&self) {
        // SAFETY: signals our own unreaped child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
    }

    fn wait(mut self) -> libc::c_int {
        self.reaped = true;
        reap(self.pid)
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
            reap(self.pid);
        }
    }
}

fn reap(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child through a live status word.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return status;
        }
    }
}

/// The child: bounds itself, runs the work on a thread with a large stack, and exits
/// without running any of the caller's destructors or exit handlers.
fn child_main<F>(parent: libc::pid_t, limits: ChildLimits, mut out: ChildWriter, work: F) -> !
where
    F: FnOnce(&mut ChildWriter) + Send,
{
    // SAFETY: system calls with no memory passed, then `_exit`.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
    limit_memory(limits.memory.saturating_add(limits.stack as u64));
    // A panic is reported by the exit status; nothing is printed on the caller's stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let ok = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(limits.stack)
            .spawn_scoped(scope, || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mut out))).is_ok()
            })
            .ok()
            .and_then(|t| t.join().ok())
            .unwrap_or(false)
    });
    // SAFETY: ends this process at once, as a forked child must.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// Caps this process's address space at what it has mapped now plus `extra` bytes.
fn limit_memory(extra: u64) {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return;
    };
    let Some(pages) = statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u64>().ok())
    else {
        return;
    };
    // SAFETY: no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let cap = pages.saturating_mul(page).saturating_add(extra);
    let limit = libc::rlimit {
        rlim_cur: cap,
        rlim_max: cap,
    };
    // SAFETY: sets a limit from a live struct.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &limit);
    }
}
