//! The system calls behind [`crate::Jail`]: the supervisor, the namespaces, Landlock and
//! seccomp.
//!
//! Everything that runs between `fork` and `exec` ([`enter`] and what it calls) only
//! makes system calls on data prepared before the fork: no allocation, no locks, as a
//! forked child of a multithreaded process requires.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::jail::{Plan, c};

/// This process's id.
pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// Asks a supervisor to stop (it kills and reaps its tree, then exits).
pub(crate) fn terminate(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: no memory is passed.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

/// Sends SIGKILL to `pid`.
pub(crate) fn kill(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: a plain system call.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn check_int(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

// ---------------------------------------------------------------- Landlock

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version this kernel offers (0: none).
pub(crate) fn landlock_abi() -> u32 {
    // SAFETY: a null attribute with size 0 and the version flag only queries.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).unwrap_or(0)
}

/// Every filesystem right the ABI knows.
fn fs_rights(abi: u32) -> u64 {
    match abi {
        0 => 0,
        1 => (1 << 13) - 1,
        2 => (1 << 14) - 1,
        3 | 4 => (1 << 15) - 1,
        _ => (1 << 16) - 1,
    }
}

/// A ruleset: read and execute everywhere, everything below `writable`, the harmless
/// devices; no TCP unless `network`; no signals or abstract sockets outside the domain.
pub(crate) fn landlock_ruleset(
    abi: u32,
    writable: &[std::path::PathBuf],
    network: bool,
) -> io::Result<OwnedFd> {
    let all = fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: all,
        handled_access_net: if abi >= 4 && !network {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    let size = if abi >= 6 {
        24usize
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least `size` bytes.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            size,
            0u32,
        )
    })?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let file_rights =
        FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (all & (FS_TRUNCATE | FS_IOCTL_DEV));
    allow(
        &ruleset,
        Path::new("/"),
        FS_EXECUTE | FS_READ_FILE | FS_READ_DIR,
        file_rights,
    )?;
    for dir in writable {
        allow(&ruleset, dir, all, file_rights)?;
    }
    for dev in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ] {
        allow(
            &ruleset,
            Path::new(dev),
            FS_READ_FILE | FS_WRITE_FILE | (all & (FS_TRUNCATE | FS_IOCTL_DEV)),
            file_rights,
        )?;
    }
    Ok(ruleset)
}

/// Adds a rule for `path` (skipped when it does not exist).
fn allow(ruleset: &OwnedFd, path: &Path, rights: u64, file_rights: u64) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    let rule = PathBeneath {
        allowed_access: if is_dir { rights } else { rights & file_rights },
        parent_fd: file.as_raw_fd(),
    };
    // SAFETY: `rule` is a valid path-beneath attribute; both descriptors are open.
    check(unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        )
    })?;
    Ok(())
}

// ---------------------------------------------------------------- seccomp

/// Whether this kernel takes seccomp filters.
pub(crate) fn seccomp_available() -> bool {
    // SAFETY: a query without memory.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// A filter that refuses sockets other than Unix ones (and io_uring, which could open
/// them) with `EACCES`, and system calls of a foreign ABI with `ENOSYS`. `None` on
/// architectures it is not written for.
pub(crate) fn no_network_filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let stmt = |code: u32, k: u32| libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        };
        let jump = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        };
        let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
        let ret = libc::BPF_RET | libc::BPF_K;
        let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
        let jge = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
        let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & 0xffff);
        Some(vec![
            stmt(ld, 4), // arch
            jump(jeq, AUDIT_ARCH, 1, 0),
            stmt(ret, errno(libc::ENOSYS)),
            stmt(ld, 0),                  // syscall number
            jump(jge, 0x4000_0000, 0, 1), // the x32 ABI
            stmt(ret, errno(libc::ENOSYS)),
            jump(jeq, libc::SYS_socket as u32, 2, 0),
            jump(jeq, libc::SYS_io_uring_setup as u32, 3, 0),
            stmt(ret, libc::SECCOMP_RET_ALLOW),
            stmt(ld, 16), // args[0], the address family (low half)
            jump(jeq, libc::AF_UNIX as u32, 1, 0),
            stmt(ret, errno(libc::EACCES)),
            stmt(ret, libc::SECCOMP_RET_ALLOW),
        ])
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

// ---------------------------------------------------------------- namespaces

/// The identity maps of a user namespace that keeps this process's ids, and the paths
/// they are written to.
#[derive(Debug)]
pub(crate) struct Maps {
    setgroups: CString,
    uid_map: CString,
    gid_map: CString,
    uid_line: Vec<u8>,
    gid_line: Vec<u8>,
}

impl Maps {
    pub(crate) fn current() -> Self {
        // SAFETY: no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Self {
            setgroups: c("/proc/self/setgroups"),
            uid_map: c("/proc/self/uid_map"),
            gid_map: c("/proc/self/gid_map"),
            uid_line: format!("{uid} {uid} 1\n").into_bytes(),
            gid_line: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

#[cfg(test)]
impl Maps {
    /// Maps the kernel refuses (not a mapping at all).
    pub(crate) fn refused() -> Self {
        Self {
            uid_line: b"not a map\n".to_vec(),
            ..Self::current()
        }
    }
}

/// Paths used after the fork.
#[derive(Debug)]
pub(crate) struct Paths {
    children: CString,
    proc_dir: CString,
    proc_fs: CString,
    root: CString,
}

impl Paths {
    pub(crate) fn new() -> Self {
        Self {
            children: c("/proc/thread-self/children"),
            proc_dir: c("/proc"),
            proc_fs: c("proc"),
            root: c("/"),
        }
    }
}

/// Writes `data` to the file at `path` (after fork: system calls only).
unsafe fn write_file(path: &CString, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid C string; `data` is valid for its length.
    unsafe {
        let fd = check_int(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if n < 0 || n as usize != data.len() {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes the identity maps of the caller's new user namespace (after fork or clone:
/// system calls only).
pub(crate) fn write_own_maps(maps: &Maps) -> io::Result<()> {
    // SAFETY: system calls on prepared data.
    unsafe {
        write_file(&maps.setgroups, b"deny")?;
        write_file(&maps.uid_map, &maps.uid_line)?;
        write_file(&maps.gid_map, &maps.gid_line)?;
    }
    Ok(())
}

/// Enters a new user and PID namespace (the caller's next child is its init).
unsafe fn enter_namespaces(maps: &Maps) -> io::Result<()> {
    // SAFETY: system calls on prepared data.
    unsafe {
        check_int(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID))?;
    }
    write_own_maps(maps)
}

/// A mount namespace of the init of a new PID namespace, with its own `/proc` (after
/// fork or clone: system calls only).
pub(crate) fn own_proc(paths: &Paths) -> io::Result<()> {
    // SAFETY: system calls on prepared C strings.
    unsafe {
        check_int(libc::unshare(libc::CLONE_NEWNS))?;
        check_int(libc::mount(
            std::ptr::null(),
            paths.root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check_int(libc::mount(
            paths.proc_fs.as_ptr(),
            paths.proc_dir.as_ptr(),
            paths.proc_fs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
    }
    Ok(())
}

/// Whether the namespaces work here: a forked probe enters them and mounts a `/proc`.
pub(crate) fn namespaces_work() -> bool {
    let maps = Maps::current();
    let paths = Paths::new();
    // SAFETY: the forked children only make system calls on data prepared above, then
    // exit; the parent waits for its child.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            if enter_namespaces(&maps).is_err() {
                libc::_exit(1);
            }
            let init = libc::fork();
            if init == 0 {
                libc::_exit(i32::from(own_proc(&paths).is_err()));
            }
            let mut status = 0;
            if init < 0 || libc::waitpid(init, &mut status, 0) != init {
                libc::_exit(1);
            }
            libc::_exit(i32::from(
                !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0),
            ));
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0) == pid
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
    }
}

// ---------------------------------------------------------------- the supervisor

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Runs in the child `std` forked for a jailed command where namespaces do not work,
/// before `exec`: becomes the supervisor, forks the worker and returns in the worker
/// only (which then execs).
pub(crate) fn enter(plan: &Plan, parent: libc::pid_t) -> io::Result<()> {
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
            if !subreaper {
                libc::setpgid(0, 0);
            }
            return setup_worker(plan);
        }
        if !subreaper {
            // Both sides set it, so neither races the other.
            libc::setpgid(worker, worker);
        }
        supervise(worker, &plan.paths, subreaper)
    }
}

/// The worker's setup before `exec`.
unsafe fn setup_worker(plan: &Plan) -> io::Result<()> {
    // SAFETY: system calls on data prepared before the fork.
    unsafe {
        check_int(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    isolate(plan, false)
}

/// Applies the isolation to the calling process before `exec`: its own `/proc` (when
/// `fresh_proc`, in its own PID namespace), Landlock and the seccomp filter. System
/// calls on prepared data only.
pub(crate) fn isolate(plan: &Plan, fresh_proc: bool) -> io::Result<()> {
    // SAFETY: system calls on data prepared before the fork or clone.
    unsafe {
        if fresh_proc {
            own_proc(&plan.paths)?;
        }
        if plan.landlock.is_some() || plan.seccomp.is_some() {
            check_int(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        if let Some(ruleset) = &plan.landlock {
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

/// The supervisor: waits for the worker, then kills and reaps everything left below
/// it, and exits as the worker did. Never returns.
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
