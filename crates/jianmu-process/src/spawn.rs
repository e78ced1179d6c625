//! Starting a command as the init of its own user and PID namespace, with one
//! `clone(CLONE_VM | CLONE_VFORK)` the way `posix_spawn` starts processes: no copy of
//! the caller's address space, and no process in between. When the command exits (or
//! is killed), the kernel kills everything left in its namespace, so nothing it
//! started can outlive it, `setsid` or not.
//!
//! The child shares the caller's memory until it calls `execve` (the calling thread
//! waits meanwhile): it runs on its own stack, only makes system calls on data
//! prepared here, and resets signal handlers before any signal can reach it.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use tokio::io::unix::AsyncFd;

use crate::clone::{Stack, run_child, with_signals_blocked};
use crate::mount::MadeView;
use crate::netns::PrivateNet;
use crate::plan::Plan;
use crate::spec::{Spec, Stdio};

/// What the child needs, all prepared before the clone.
struct Prepared<'a> {
    plan: &'a Plan,
    path: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    /// The descriptors that become 0, 1 and 2.
    stdio: [RawFd; 3],
    /// Where the child reports the `errno` of a failed setup or `execve`.
    report: RawFd,
    /// Whether the child is the first process of a new user namespace and writes its
    /// identity maps (not when it joined a private network's user namespace).
    own_user_ns: bool,
    /// Whether 0, 1 and 2 are a terminal the child makes its controlling one.
    terminal: bool,
    /// The Landlock ruleset to enforce.
    landlock: Option<&'a OwnedFd>,
}

/// The program's path: as given when it has a `/`, else the first executable of that
/// name in an absolute folder of `PATH` (the command's own `PATH` when it sets one).
pub(crate) fn resolve(program: &OsStr, path_var: Option<&OsStr>) -> io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        // Its folder resolved (`a/../b/bin/tool` names a folder a view may not have),
        // its own name kept (a venv's `python` is a link whose name is what counts).
        if path.is_absolute()
            && let (Some(dir), Some(name)) = (path.parent(), path.file_name())
            && let Ok(dir) = std::fs::canonicalize(dir)
        {
            return Ok(dir.join(name));
        }
        return Ok(path);
    }
    let fallback = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let dirs = path_var.unwrap_or(&fallback);
    // An empty or relative entry names the current folder (often the workspace,
    // whose own `git` or `pylsp` must not stand in for the real one): skipped.
    for dir in std::env::split_paths(dirs).filter(|d| d.is_absolute()) {
        let candidate = dir.join(program);
        if let Ok(meta) = std::fs::metadata(&candidate)
            && meta.is_file()
            && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0
        {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("`{}` is not on PATH", program.to_string_lossy()),
    ))
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a command"))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and belong to no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Two connected Unix stream sockets, both close-on-exec (the child's end is placed on
/// its standard stream, which clears the flag there).
pub(crate) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and belong to no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn dev_null() -> io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into())
}

/// `fd` moved to a number above 2, so that placing the child's streams on 0, 1 and 2
/// never overwrites another of them (it can land low when the caller closed one of its
/// own standard streams).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicates an open descriptor; the new one is owned by the result.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `moved` was just made and belongs to no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// A child started by [`spawn`]: its pidfd, and what the caller keeps of its pipes.
#[derive(Debug)]
pub(crate) struct NsChild {
    /// Its process id (in jianmu's PID namespace).
    pub(crate) pid: u32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
    /// The caller's end of the command's terminal.
    pub(crate) terminal: Option<OwnedFd>,
}

/// Starts `spec` under `plan`, as the init of a new PID namespace: in a new user
/// namespace, or, with `net`, in that private network and its user namespace; with
/// `view`, in a copy of the view's mount namespace. `landlock` is the ruleset it
/// enforces.
pub(crate) fn spawn(
    plan: &Plan,
    spec: &Spec,
    net: Option<&PrivateNet>,
    view: Option<&MadeView>,
    landlock: Option<&OwnedFd>,
) -> Result<NsChild, Failure> {
    use Failure::Command as C;
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<io::Result<_>>()
        .map_err(C)?;
    let path_var = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let path = resolve(&spec.program, path_var)
        .and_then(|p| cstring(p.as_os_str().as_bytes()))
        .map_err(C)?;
    let args: Vec<CString> = std::iter::once(spec.program.as_os_str())
        .chain(spec.args.iter().map(OsString::as_os_str))
        .map(|a| cstring(a.as_bytes()))
        .collect::<io::Result<_>>()
        .map_err(C)?;
    let cwd = spec
        .cwd
        .as_ref()
        .map(|c| cstring(c.as_os_str().as_bytes()))
        .transpose()
        .map_err(C)?;

    // The ends the child gets, and the ends the caller keeps.
    let mut theirs: Vec<OwnedFd> = Vec::new();
    let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
    let mut stdio = [-1; 3];
    let mut near = None;
    if let Some(size) = spec.terminal {
        let pair = crate::pty::open(size).map_err(C)?;
        let far = above_stdio(pair.far).map_err(C)?;
        stdio = [far.as_raw_fd(); 3];
        theirs.push(far);
        near = Some(pair.near);
    }
    // On a terminal, all three are its far end (above); else each as asked.
    let streams = [spec.stdin, spec.stdout, spec.stderr];
    let streams: &[Stdio] = if near.is_some() { &[] } else { &streams };
    for (i, &how) in streams.iter().enumerate() {
        let child_end = match how {
            Stdio::Null => dev_null().map_err(C)?,
            Stdio::Piped => {
                let (read, write) = pipe().map_err(C)?;
                let (child_end, our_end) = if i == 0 { (read, write) } else { (write, read) };
                ours[i] = Some(our_end);
                child_end
            }
            Stdio::Socket => {
                let (child_end, our_end) = socket_pair().map_err(C)?;
                ours[i] = Some(our_end);
                child_end
            }
        };
        let child_end = above_stdio(child_end).map_err(C)?;
        stdio[i] = child_end.as_raw_fd();
        theirs.push(child_end);
    }
    let (report_read, report_write) = pipe().map_err(C)?;

    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let prepared = Prepared {
        plan,
        path,
        argv,
        envp,
        cwd,
        stdio,
        report: report_write.as_raw_fd(),
        own_user_ns: net.is_none() && view.is_none(),
        terminal: near.is_some(),
        landlock,
    };
    // The namespaces a first child joins: the private network's user namespace (or
    // the view's own), the network, the view.
    let user = match (net, view) {
        (Some(net), _) => Some(net.user.as_raw_fd()),
        (None, Some(view)) => view.user.as_ref().map(AsRawFd::as_raw_fd),
        (None, None) => None,
    };
    let join = user.map(|user| Join {
        user,
        net: net.map_or(-1, |n| n.net.as_raw_fd()),
        mnt: view.map_or(-1, MadeView::mnt),
    });

    let stack = Stack::new(256 * 1024).map_err(C)?;
    let mut pidfd: libc::c_int = -1;
    let child_pid;
    match join {
        None => {
            let flags = libc::CLONE_VM
                | libc::CLONE_VFORK
                | libc::CLONE_PIDFD
                | libc::CLONE_NEWUSER
                | libc::CLONE_NEWPID
                | libc::SIGCHLD;
            // SAFETY: every signal is blocked across the clone, so no handler runs in
            // the child while it shares this memory; the child runs `child_main` on its
            // own stack with `prepared`, which outlives it (the calling thread waits
            // until it execs or exits: CLONE_VFORK); the pidfd is written to `pidfd`.
            let pid = unsafe {
                with_signals_blocked(|| {
                    libc::clone(
                        child_main,
                        stack.top(),
                        flags,
                        (&raw const prepared).cast_mut().cast(),
                        &raw mut pidfd,
                    )
                })
            };
            if pid < 0 {
                return Err(Failure::Namespaces);
            }
            child_pid = pid.unsigned_abs();
        }
        Some(join) => {
            // A first child joins the namespaces (a process may only do that alone:
            // this thread's process has other threads), then starts the command as
            // this process's own child (CLONE_PARENT) and exits. Sharing this
            // descriptor table, it leaves the command's pidfd here.
            let inner = Stack::new(64 * 1024).map_err(C)?;
            let mut hop = Hop {
                prepared: &prepared,
                join,
                stack: stack.top(),
                pid: -1,
                pidfd: -1,
            };
            let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
            // SAFETY: as above; `hop_main` runs on the small stack with `hop`, which
            // outlives it (CLONE_VFORK), and makes system calls only; the command gets
            // the large one.
            let ran = unsafe { run_child(hop_main, inner.top(), flags, (&raw mut hop).cast()) };
            if ran.is_err() {
                return Err(Failure::Namespaces);
            }
            drop(inner);
            pidfd = hop.pidfd;
            child_pid = hop.pid.unsigned_abs();
        }
    }
    drop(theirs);
    drop(report_write);
    if pidfd < 0 {
        // The first child could not join the network (it reported why on the pipe).
        return Err(Failure::Namespaces);
    }
    // SAFETY: the kernel stored a new pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut report = [0i32; 2];
    // SAFETY: reading into an 8-byte buffer; the write end is closed on both sides
    // (the child's by exec or exit), so this does not block.
    let n = unsafe { libc::read(report_read.as_raw_fd(), report.as_mut_ptr().cast(), 8) };
    if n == 8 {
        // SAFETY: reaps the child that failed to start; `info` is a valid out buffer.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            );
        }
        return Err(if report[0] == Stage::Namespaces as i32 {
            Failure::Namespaces
        } else {
            Failure::Command(io::Error::from_raw_os_error(report[1]))
        });
    }
    // SAFETY: the pidfd is owned by the AsyncFd from here on and stays open with it.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
        .map_err(|e| C(e.into_parts().1))?;
    let [stdin, stdout, stderr] = ours;
    Ok(NsChild {
        pid: child_pid,
        pidfd: Some(pidfd),
        status: None,
        stdin,
        stdout,
        stderr,
        terminal: near,
    })
}

/// The namespaces a first child joins (-1: not that one).
#[derive(Clone, Copy)]
struct Join {
    user: RawFd,
    net: RawFd,
    mnt: RawFd,
}

impl Join {
    /// Joins them, the user namespace first. System calls only.
    ///
    /// # Safety
    /// Only in a first child that shares this memory: it changes the calling
    /// thread's namespaces for good.
    unsafe fn enter(self) -> io::Result<()> {
        // SAFETY: `setns` on descriptors the caller keeps open.
        unsafe {
            for (fd, kind) in [
                (self.user, libc::CLONE_NEWUSER),
                (self.net, libc::CLONE_NEWNET),
                (self.mnt, libc::CLONE_NEWNS),
            ] {
                if fd >= 0 && libc::setns(fd, kind) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// What the first child of a spawn into existing namespaces needs, and where it leaves
/// the command's pid and pidfd.
struct Hop<'a> {
    prepared: &'a Prepared<'a>,
    join: Join,
    /// The top of the command's own stack.
    stack: *mut libc::c_void,
    pid: libc::pid_t,
    pidfd: libc::c_int,
}

extern "C" fn hop_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Hop` the caller keeps alive while this runs; system calls
    // on prepared data only.
    unsafe {
        let hop = &mut *arg.cast::<Hop<'_>>();
        if let Err(e) = hop.join.enter() {
            let report = [
                Stage::Namespaces as i32,
                e.raw_os_error().unwrap_or(libc::EPERM),
            ];
            libc::write(hop.prepared.report, report.as_ptr().cast(), 8);
            libc::_exit(1);
        }
        let flags = libc::CLONE_VM
            | libc::CLONE_VFORK
            | libc::CLONE_PARENT
            | libc::CLONE_PIDFD
            | libc::CLONE_NEWPID
            | libc::SIGCHLD;
        let pid = libc::clone(
            child_main,
            hop.stack,
            flags,
            std::ptr::from_ref(hop.prepared).cast_mut().cast(),
            &raw mut hop.pidfd,
        );
        if pid < 0 {
            let report = [Stage::Namespaces as i32, *libc::__errno_location()];
            libc::write(hop.prepared.report, report.as_ptr().cast(), 8);
            hop.pidfd = -1;
            libc::_exit(1);
        }
        hop.pid = pid;
        libc::_exit(0)
    }
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Prepared` the caller keeps alive while this runs.
    unsafe {
        let prepared = &*(arg as *const Prepared<'_>);
        let (stage, errno) = setup_and_exec(prepared);
        let report = [stage as i32, errno];
        libc::write(prepared.report, report.as_ptr().cast(), 8);
        libc::_exit(127)
    }
}

/// Which part of the child's setup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum Stage {
    /// Entering its namespaces (identity maps, its own `/proc`).
    Namespaces = 1,
    /// Everything after: isolation, streams, directory, `execve`.
    Command = 2,
}

/// Why [`spawn`] failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The namespaces could not be made or entered: run the command another way.
    Namespaces,
    /// The command itself could not start (a missing program, a bad directory).
    Command(io::Error),
}

/// Returns only on failure, with the stage and the `errno` to report.
///
/// # Safety
/// Only in the cloned child, on data prepared before the clone: system calls only,
/// then `exec`.
unsafe fn setup_and_exec(p: &Prepared<'_>) -> (Stage, i32) {
    let errno = || unsafe { *libc::__errno_location() };
    let fail = || (Stage::Command, errno());
    // SAFETY: system calls on prepared data (see the module doc).
    unsafe {
        // Handlers belong to the caller and would run in its memory: defaults here.
        for sig in 1..libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail();
        }
        let maps = if p.own_user_ns {
            crate::userns::write_own_maps(&p.plan.maps)
        } else {
            Ok(())
        };
        let namespaces = maps.and_then(|()| {
            if p.plan.fresh_proc {
                crate::userns::own_proc(&p.plan.paths)
            } else {
                Ok(())
            }
        });
        if let Err(e) = namespaces {
            return (Stage::Namespaces, e.raw_os_error().unwrap_or(libc::EPERM));
        }
        if let Err(e) = crate::isolate::isolate(p.plan, false, p.landlock) {
            return (Stage::Command, e.raw_os_error().unwrap_or(libc::EPERM));
        }
        for (target, &fd) in p.stdio.iter().enumerate() {
            let target = target as RawFd;
            if fd == target {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            } else if libc::dup2(fd, target) < 0 {
                return fail();
            }
        }
        if p.terminal && !crate::pty::take_as_controlling() {
            return fail();
        }
        if let Some(cwd) = &p.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            return fail();
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        fail()
    }
}

impl NsChild {
    /// Waits until the command (and so its whole namespace) is gone.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::other("the command was already reaped"));
        };
        loop {
            let mut ready = pidfd.readable().await?;
            if let Some(status) = reap(pidfd.get_ref(), libc::WNOHANG)? {
                self.status = Some(status);
                return Ok(status);
            }
            ready.clear_ready();
        }
    }

    /// The exit status, if the command has ended (reaping it).
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none()
            && let Some(pidfd) = &self.pidfd
        {
            self.status = reap(pidfd.get_ref(), libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Kills the command; the kernel then kills everything in its namespace.
    pub(crate) fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// Sends `sig` to the command (as its namespace's init, it gets only the signals
    /// it handles, and SIGKILL).
    pub(crate) fn signal(&self, sig: libc::c_int) {
        if self.status.is_none()
            && let Some(pidfd) = &self.pidfd
        {
            // SAFETY: a signal through a pidfd we own.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.get_ref().as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                );
            }
        }
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.kill();
        // Reap it: once its init is killed the namespace empties within moments.
        if let Some(pidfd) = self.pidfd.take() {
            let _ = reap(&pidfd.into_inner(), 0);
        }
    }
}

/// Reaps the process behind `pidfd` if it has exited (`WNOHANG`) or once it does.
fn reap(pidfd: &OwnedFd, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    // SAFETY: `info` is a valid out buffer; the pidfd is open.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | flags,
        );
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        if info.si_pid() == 0 {
            return Ok(None);
        }
        let status = info.si_status();
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => status | 0x80,
            _ => status,
        };
        Ok(Some(ExitStatus::from_raw(raw)))
    }
}
