//! Short-lived children that share this memory (`clone` with `CLONE_VM |
//! CLONE_VFORK`), the stacks they run on, and the signal mask around them: the
//! lowest layer the namespace and spawn modules build on. System calls only.
#![allow(unsafe_code)]

use std::io;

/// Runs `main(arg)` in a short-lived child that shares this memory (`flags` include
/// `CLONE_VM | CLONE_VFORK`) on the stack whose top is `stack`, with every signal
/// blocked across the clone, and reaps it once it has exited. System calls only, so
/// a child may use it too.
///
/// # Safety
/// `arg` must stay valid while the child runs (it does: `CLONE_VFORK` waits), `main`
/// must make only system calls on prepared data and end with `_exit`, and `stack`
/// must be the top of a mapping the child may use.
pub(crate) unsafe fn run_child(
    main: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: *mut libc::c_void,
    flags: libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<()> {
    // SAFETY: as the caller promises.
    unsafe {
        let pid = with_signals_blocked(|| libc::clone(main, stack, flags, arg));
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, libc::__WALL) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
    }
    Ok(())
}

/// Calls `f` with every signal of this thread blocked, so that no handler runs in a
/// child that shares this memory before it resets them. `errno` is `f`'s (restoring
/// the mask does not set it).
///
/// # Safety
/// `f` must not unwind, and must not wait on anything a signal handler would
/// have to run for.
pub(crate) unsafe fn with_signals_blocked(f: impl FnOnce() -> libc::c_int) -> libc::c_int {
    // SAFETY: masks are zeroed then filled; the old mask is restored.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// A child stack with a guard page below it.
pub(crate) struct Stack {
    base: *mut libc::c_void,
    size: usize,
}

impl Stack {
    pub(crate) fn new(size: usize) -> io::Result<Self> {
        let guard = 4096;
        // SAFETY: a fresh anonymous mapping; the lowest page becomes the guard.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                size + guard,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            libc::mprotect(base, guard, libc::PROT_NONE);
            Ok(Self {
                base,
                size: size + guard,
            })
        }
    }

    pub(crate) fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, 16-byte aligned (page aligned).
        unsafe { self.base.cast::<u8>().add(self.size).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child no longer uses it (it exec'd or
        // exited before `clone` returned).
        unsafe {
            libc::munmap(self.base, self.size);
        }
    }
}
