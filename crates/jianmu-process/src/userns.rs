//! User and PID namespaces: the identity maps a jailed command writes for itself, its
//! own `/proc`, and the probe that tells whether they work here. After `fork` or
//! `clone`, system calls on prepared data only.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;

use crate::sys::c;
use crate::sys::check_int;

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
    pub(crate) children: CString,
    proc_dir: CString,
    proc_fs: CString,
    root: CString,
    /// Parts of the own `/proc` made read-only: kernel settings and triggers, which a
    /// command whose user is root outside (mapped to itself) could otherwise write.
    read_only: [CString; 5],
}

impl Paths {
    pub(crate) fn new() -> Self {
        Self {
            children: c("/proc/thread-self/children"),
            proc_dir: c("/proc"),
            proc_fs: c("proc"),
            root: c("/"),
            read_only: [
                c("/proc/sys"),
                c("/proc/sysrq-trigger"),
                c("/proc/irq"),
                c("/proc/bus"),
                c("/proc/fs"),
            ],
        }
    }
}

/// Writes `data` to the file at `path` (after fork: system calls only).
///
/// # Safety
/// System calls only: callable after `fork` or in a child that shares this memory.
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
///
/// # Safety
/// Only in a child process of its own (after `fork`): it changes the process's
/// namespaces for good.
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
        for path in &paths.read_only {
            if libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                if *libc::__errno_location() == libc::ENOENT {
                    continue;
                }
                return Err(io::Error::last_os_error());
            }
            check_int(libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT
                    | libc::MS_BIND
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV
                    | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
        }
    }
    Ok(())
}

/// Whether the namespaces work here, and whether private networks can be made too: a
/// forked probe enters a user and PID namespace, tries a network namespace with
/// loopback up, and mounts a `/proc` (one probe for both, as each costs a process).
pub(crate) fn probe() -> (bool, bool) {
    let maps = Maps::current();
    let paths = Paths::new();
    // SAFETY: the forked children only make system calls on data prepared above, then
    // exit; the parent waits for its child.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return (false, false);
        }
        if pid == 0 {
            if enter_namespaces(&maps).is_err() {
                libc::_exit(1);
            }
            let no_network =
                libc::unshare(libc::CLONE_NEWNET) != 0 || crate::sys::loopback_up().is_err();
            let init = libc::fork();
            if init == 0 {
                libc::_exit(i32::from(own_proc(&paths).is_err()));
            }
            let mut status = 0;
            if init < 0 || libc::waitpid(init, &mut status, 0) != init {
                libc::_exit(1);
            }
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                libc::_exit(1);
            }
            libc::_exit(if no_network { 2 } else { 0 });
        }
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid || !libc::WIFEXITED(status) {
            return (false, false);
        }
        match libc::WEXITSTATUS(status) {
            0 => (true, true),
            2 => (true, false),
            _ => (false, false),
        }
    }
}
