//! Small system-call helpers the other modules share: this process's id, signals,
//! and turning a negative return into the OS error.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;

/// This process's id.
pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// This process's effective user id.
pub(crate) fn geteuid() -> libc::uid_t {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether this process may read `path` (`access(R_OK)`).
pub(crate) fn readable(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::R_OK) == 0 }
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

pub(crate) fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn check_int(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Sets the soft `RLIMIT_NOFILE` to the hard one; returns it.
pub(crate) fn raise_open_files_limit() -> io::Result<u64> {
    // SAFETY: get and set a resource limit through a valid, zeroed struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        check_int(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit))?;
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            check_int(libc::setrlimit(libc::RLIMIT_NOFILE, &limit))?;
        }
        Ok(limit.rlim_cur)
    }
}

/// A path as a C string (empty when it holds a NUL).
pub(crate) fn c(path: &str) -> CString {
    CString::new(path).unwrap_or_default()
}

/// Brings the calling process's `lo` up. System calls only.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: an ioctl pair on a socket made here, with a zeroed request naming `lo`.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        let mut r = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        }
        let result = if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        libc::close(sock);
        result
    }
}
