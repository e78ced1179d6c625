//! Landlock: the ruleset that confines a jailed command's file access (and, from ABI 4,
//! its TCP binds and connects; from ABI 6, abstract Unix sockets and signals).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::sys::check;

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

/// What a ruleset leaves to other confinement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Net {
    /// TCP binds and connects are not handled (open, or confined by a namespace).
    pub(crate) tcp: bool,
    /// Abstract Unix sockets are not scoped to the domain (a private network namespace
    /// keeps them within the session).
    pub(crate) abstract_sockets: bool,
}

/// A ruleset: read and execute everywhere (or, with `reads`, beneath each path whose
/// flag is set, and only listing beneath the others), everything below `writable`,
/// the harmless devices; no TCP unless `net.tcp`; no signals outside the domain, nor
/// abstract sockets unless `net.abstract_sockets`.
pub(crate) fn landlock_ruleset(
    abi: u32,
    writable: &[std::path::PathBuf],
    reads: Option<&[(std::path::PathBuf, bool)]>,
    net: Net,
) -> io::Result<OwnedFd> {
    let all = fs_rights(abi);
    let ruleset = new_ruleset(abi, all, net)?;
    let file_rights =
        FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (all & (FS_TRUNCATE | FS_IOCTL_DEV));
    let read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
    match reads {
        None => allow(&ruleset, Path::new("/"), read, file_rights)?,
        Some(reads) => {
            for (path, whole) in reads {
                let rights = if *whole { read } else { FS_READ_DIR };
                allow(&ruleset, path, rights, file_rights)?;
            }
            for path in ["/proc", "/dev", "/sys"] {
                allow(
                    &ruleset,
                    Path::new(path),
                    FS_READ_FILE | FS_READ_DIR,
                    file_rights,
                )?;
            }
        }
    }
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

/// The ruleset of commands in a view, which confines their files itself (a ruleset
/// that handled any file right would also refuse every rename into another folder,
/// since rules on host paths do not reach the view's own folders): no TCP unless
/// `net.tcp`, the same scoping as [`landlock_ruleset`]. `None` when that leaves
/// nothing to enforce.
pub(crate) fn scope_ruleset(abi: u32, net: Net) -> io::Result<Option<OwnedFd>> {
    let attr = attr(abi, 0, net);
    if attr.handled_access_net == 0 && attr.scoped == 0 {
        return Ok(None);
    }
    new_ruleset(abi, 0, net).map(Some)
}

fn attr(abi: u32, handled_fs: u64, net: Net) -> RulesetAttr {
    RulesetAttr {
        handled_access_fs: handled_fs,
        handled_access_net: if abi >= 4 && !net.tcp {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: match (abi >= 6, net.abstract_sockets) {
            (false, _) => 0,
            (true, false) => SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL,
            (true, true) => SCOPE_SIGNAL,
        },
    }
}

fn new_ruleset(abi: u32, handled_fs: u64, net: Net) -> io::Result<OwnedFd> {
    let attr = attr(abi, handled_fs, net);
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
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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
