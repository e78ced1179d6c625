//! A private network: a network namespace whose only interface is loopback, owned by a
//! user namespace of its own, shared by the commands of one session.
//!
//! It is made with one `clone` of a short-lived child that writes its identity maps,
//! brings `lo` up, opens its two namespaces into the caller's descriptor table and
//! exits. The namespaces then live as long as those descriptors (or a process inside
//! them): nothing runs to keep them, and nothing is left when the session ends or the
//! process dies. Commands enter them with `setns` (see `spawn`), where every socket
//! family works and nothing is routed outside.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};

use crate::sys::c;
use crate::userns::Maps;

/// A network namespace with loopback up, and the user namespace that owns it.
#[derive(Debug)]
pub(crate) struct PrivateNet {
    pub(crate) user: OwnedFd,
    pub(crate) net: OwnedFd,
}

/// What the child that makes the namespaces needs, and where it reports.
struct Make {
    maps: Maps,
    user_path: CString,
    net_path: CString,
    user: RawFd,
    net: RawFd,
    /// 0, or the `errno` of the step that failed.
    errno: i32,
}

impl PrivateNet {
    /// Makes a fresh one.
    pub(crate) fn new() -> io::Result<Self> {
        let mut make = Make {
            maps: Maps::current(),
            user_path: c("/proc/self/ns/user"),
            net_path: c("/proc/self/ns/net"),
            user: -1,
            net: -1,
            errno: 0,
        };
        let stack = crate::clone::Stack::new(64 * 1024)?;
        // The child shares this memory and descriptor table, so what it opens is ours.
        let flags = libc::CLONE_VM
            | libc::CLONE_VFORK
            | libc::CLONE_FILES
            | libc::CLONE_NEWUSER
            | libc::CLONE_NEWNET
            | libc::SIGCHLD;
        // SAFETY: the child runs `make_main` on its own stack with `make`, which
        // outlives it (CLONE_VFORK), and makes system calls only.
        unsafe {
            crate::clone::run_child(make_main, stack.top(), flags, (&raw mut make).cast())?;
        }
        // SAFETY: the child opened these in our table and nothing else owns them.
        let take = |fd: RawFd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let (user, net) = (take(make.user), take(make.net));
        match (user, net) {
            (Some(user), Some(net)) if make.errno == 0 => Ok(Self { user, net }),
            _ => Err(io::Error::from_raw_os_error(if make.errno == 0 {
                libc::EIO
            } else {
                make.errno
            })),
        }
    }

    /// Enters it: the calling process (single-threaded, its own filesystem context)
    /// joins the user namespace, then the network namespace. System calls only.
    pub(crate) fn enter(&self) -> io::Result<()> {
        // SAFETY: `setns` on descriptors this value owns.
        unsafe {
            if libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER) != 0
                || libc::setns(self.net.as_raw_fd(), libc::CLONE_NEWNET) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

extern "C" fn make_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Make` the caller keeps alive while this runs; only system
    // calls on prepared data follow.
    unsafe {
        let make = &mut *arg.cast::<Make>();
        let errno = || *libc::__errno_location();
        if let Err(e) = crate::userns::write_own_maps(&make.maps) {
            make.errno = e.raw_os_error().unwrap_or(libc::EPERM);
            libc::_exit(1);
        }
        if let Err(e) = crate::sys::loopback_up() {
            make.errno = e.raw_os_error().unwrap_or(libc::EPERM);
            libc::_exit(1);
        }
        make.user = libc::open(make.user_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if make.user < 0 {
            make.errno = errno();
            libc::_exit(1);
        }
        make.net = libc::open(make.net_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if make.net < 0 {
            make.errno = errno();
        }
        libc::_exit(0)
    }
}

/// The private network the commands of one session share: made on their first command
/// (never by listing or building tools), released when the last holder drops it and the
/// last process inside it is gone.
///
/// Tools that run commands take one from the state their session shares, so that a
/// server one command starts (a background job) is reachable from the session's later
/// commands, and from no other session's.
#[derive(Debug, Default)]
pub struct Network {
    made: Mutex<Option<Arc<PrivateNet>>>,
}

impl Network {
    /// A network not made yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The namespaces, made on first use.
    pub(crate) fn get(&self) -> io::Result<Arc<PrivateNet>> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(net) = &*made {
            return Ok(Arc::clone(net));
        }
        let net = Arc::new(PrivateNet::new()?);
        *made = Some(Arc::clone(&net));
        Ok(net)
    }

    /// Makes it now rather than at the first command.
    ///
    /// # Errors
    /// The kernel refused to make it (no network namespaces here, or a limit).
    pub fn make(&self) -> io::Result<()> {
        self.get().map(drop)
    }

    /// A handle that opens sockets inside it (made now if not yet): what the
    /// session's doors to the outside are built on.
    ///
    /// # Errors
    /// As [`Network::make`].
    pub fn inside(&self) -> io::Result<Inside> {
        self.get().map(|net| Inside { net })
    }
}

/// Opens sockets inside a session's private network, for jianmu's own use: a socket
/// belongs to the network it was made in, so one made here and used by jianmu's
/// process listens or connects inside the session, with no process of jianmu's in it.
#[derive(Debug, Clone)]
pub struct Inside {
    net: Arc<PrivateNet>,
}

impl From<Arc<PrivateNet>> for Inside {
    fn from(net: Arc<PrivateNet>) -> Self {
        Self { net }
    }
}

/// What the child that makes a socket inside needs, and where it reports.
struct MakeSocket {
    user: RawFd,
    net: RawFd,
    domain: libc::c_int,
    fd: RawFd,
    errno: i32,
}

impl Inside {
    /// A new TCP socket (non-blocking, close-on-exec) of `domain` (`AF_INET` or
    /// `AF_INET6`) in the session's network, neither bound nor connected: bind and
    /// listen on it to serve inside, or connect it to reach a server inside.
    ///
    /// # Errors
    /// The namespaces cannot be joined, or the socket cannot be made.
    pub fn socket(&self, v6: bool) -> io::Result<OwnedFd> {
        let mut make = MakeSocket {
            user: self.net.user.as_raw_fd(),
            net: self.net.net.as_raw_fd(),
            domain: if v6 { libc::AF_INET6 } else { libc::AF_INET },
            fd: -1,
            errno: 0,
        };
        let stack = crate::clone::Stack::new(64 * 1024)?;
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
        // SAFETY: the child runs `socket_main` on its own stack with `make`, which
        // outlives it (CLONE_VFORK), and makes system calls only.
        unsafe {
            crate::clone::run_child(socket_main, stack.top(), flags, (&raw mut make).cast())?;
        }
        if make.fd < 0 {
            return Err(io::Error::from_raw_os_error(if make.errno == 0 {
                libc::EIO
            } else {
                make.errno
            }));
        }
        // SAFETY: the child opened it in our table and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(make.fd) })
    }
}

extern "C" fn socket_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `MakeSocket` the caller keeps alive while this runs; only
    // system calls on prepared data follow.
    unsafe {
        let make = &mut *arg.cast::<MakeSocket>();
        if libc::setns(make.user, libc::CLONE_NEWUSER) != 0
            || libc::setns(make.net, libc::CLONE_NEWNET) != 0
        {
            make.errno = *libc::__errno_location();
            libc::_exit(1);
        }
        make.fd = libc::socket(
            make.domain,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if make.fd < 0 {
            make.errno = *libc::__errno_location();
        }
        libc::_exit(0)
    }
}

/// What a session's network adds to each command started in it: environment
/// variables (a proxy's address, a certificate file's path). Called at every spawn
/// into a private network, with the network and the jail's private temporary
/// directory (where a file the variables name can be written).
pub trait NetworkEnv: Send + Sync + std::fmt::Debug {
    /// The variables to set.
    ///
    /// # Errors
    /// What the network's doors need cannot be set up; the command is not started.
    fn env(
        &self,
        inside: &Inside,
        tmp: Option<&std::path::Path>,
    ) -> io::Result<Vec<(std::ffi::OsString, std::ffi::OsString)>>;
}
