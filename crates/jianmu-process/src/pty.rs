//! Pseudo-terminals: a command started with [`Spec::terminal`](crate::Spec::terminal)
//! gets the terminal's far end as its standard streams and controlling terminal; the
//! caller keeps the near end as a [`Terminal`].
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;

/// A terminal's size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// The two ends of a new terminal: the caller's (`near`) and the command's (`far`).
pub(crate) struct Pair {
    pub(crate) near: OwnedFd,
    pub(crate) far: OwnedFd,
}

/// Opens a new pseudo-terminal of `size`; both ends close on exec.
pub(crate) fn open(size: Size) -> io::Result<Pair> {
    // SAFETY: plain system calls; every descriptor made is owned at once.
    unsafe {
        let near = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if near < 0 {
            return Err(io::Error::last_os_error());
        }
        let near = OwnedFd::from_raw_fd(near);
        if libc::grantpt(near.as_raw_fd()) != 0 || libc::unlockpt(near.as_raw_fd()) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The far end through the near one, not by its path: the path may be another
        // terminal in another mount of devpts.
        let far = libc::ioctl(
            near.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if far < 0 {
            return Err(io::Error::last_os_error());
        }
        let far = OwnedFd::from_raw_fd(far);
        resize(near.as_raw_fd(), size)?;
        Ok(Pair { near, far })
    }
}

fn resize(fd: RawFd, size: Size) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: `winsize` is a valid, initialized argument for TIOCSWINSZ.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &raw const winsize) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the calling process (a child about to exec, with the terminal's far end on
/// its standard input) a session leader with the terminal as its controlling one.
///
/// # Safety
/// Between fork (or clone) and exec: system calls only.
pub(crate) unsafe fn take_as_controlling() -> bool {
    // SAFETY: system calls on no memory.
    unsafe { libc::setsid() >= 0 && libc::ioctl(0, libc::TIOCSCTTY, 0) == 0 }
}

/// The caller's end of a command's terminal: what the command writes is read here
/// (`&Terminal` is an `AsyncRead`, which ends once every process holding the terminal
/// is gone), and what is written here is the command's typing.
#[derive(Debug)]
pub struct Terminal {
    fd: AsyncFd<OwnedFd>,
}

impl Terminal {
    pub(crate) fn new(near: OwnedFd) -> io::Result<Self> {
        // SAFETY: flags of a descriptor we own.
        unsafe {
            let flags = libc::fcntl(near.as_raw_fd(), libc::F_GETFL);
            if flags < 0
                || libc::fcntl(near.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: the descriptor is owned by the AsyncFd from here on and stays open
        // with it.
        let fd = unsafe { AsyncFd::register(near) }.map_err(|e| e.into_parts().1)?;
        Ok(Self { fd })
    }

    /// Types `data` into the terminal.
    ///
    /// # Errors
    /// Writing failed (the command is gone).
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.fd.writable().await?;
            // SAFETY: writing from `data`, valid for its length.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
            if n >= 0 {
                data = &data[n.unsigned_abs()..];
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => ready.clear_ready(),
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(())
    }

    /// Changes the terminal's size (the command gets `SIGWINCH`).
    ///
    /// # Errors
    /// The terminal refused it.
    pub fn resize(&self, size: Size) -> io::Result<()> {
        resize(self.fd.as_raw_fd(), size)
    }

    /// The process group the terminal's typing goes to, as this process sees ids.
    fn foreground(&self) -> Option<libc::pid_t> {
        let mut group: libc::pid_t = 0;
        // SAFETY: TIOCGPGRP writes one pid_t.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::TIOCGPGRP, &raw mut group) };
        (r == 0 && group > 0).then_some(group)
    }

    /// A best guess at whether the program in the foreground waits for typing: no
    /// process of the terminal's foreground group is running, and one is asleep
    /// reading the terminal, or waiting on descriptors (`poll`, `select`, ...) with
    /// the terminal as its standard input. False when it cannot be told.
    pub fn waiting_for_input(&self) -> bool {
        let Some(group) = self.foreground() else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        let mut waiting = false;
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // After the command name (in parentheses): state, parent, group.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let (Some(state), _, Some(pgrp)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            if pgrp.parse::<libc::pid_t>().ok() != Some(group) {
                continue;
            }
            match state {
                "S" => waiting |= waits_on_terminal(pid).unwrap_or(false),
                // Stopped or dead processes neither run nor read.
                "T" | "t" | "Z" | "X" => {}
                _ => return false,
            }
        }
        waiting
    }
}

impl tokio::io::AsyncRead for &Terminal {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        loop {
            let mut ready = match self.fd.poll_read_ready(cx) {
                Poll::Ready(ready) => ready?,
                Poll::Pending => return Poll::Pending,
            };
            let unfilled = buf.initialize_unfilled();
            let read = ready.try_io(|fd| {
                // SAFETY: reading into `unfilled`, which is valid for its length.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n.unsigned_abs())
                }
            });
            match read {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // The far end is closed everywhere: the end of the stream.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Not ready after all (its readiness is cleared): wait again.
                Err(_would_block) => {}
            }
        }
    }
}

/// Whether sleeping process `pid` is in a read of a terminal, or in a wait on
/// descriptors with a terminal as its standard input.
fn waits_on_terminal(pid: libc::pid_t) -> Option<bool> {
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let mut fields = syscall.split_whitespace();
    let number: libc::c_long = fields.next()?.parse().ok()?;
    let first = fields
        .next()
        .and_then(|a| i64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    let is_terminal = |fd: i64| {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .is_ok_and(|p| p.starts_with("/dev/pts") || p == std::path::Path::new("/dev/tty"))
    };
    if number == libc::SYS_read {
        return Some(first.is_some_and(is_terminal));
    }
    #[cfg(target_arch = "x86_64")]
    let waits = [
        libc::SYS_pselect6,
        libc::SYS_ppoll,
        libc::SYS_epoll_pwait,
        libc::SYS_select,
        libc::SYS_poll,
        libc::SYS_epoll_wait,
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let waits = [libc::SYS_pselect6, libc::SYS_ppoll, libc::SYS_epoll_pwait];
    Some(waits.contains(&number) && is_terminal(0))
}
