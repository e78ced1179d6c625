//! seccomp: the filter that keeps a jailed command off the network.
#![allow(unsafe_code)]

/// Whether this kernel takes seccomp filters.
pub(crate) fn seccomp_available() -> bool {
    // SAFETY: a query without memory.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// The socket families of commands without a network: Unix sockets only.
pub(crate) const NO_NETWORK: &[libc::c_int] = &[libc::AF_UNIX];

/// The socket families of commands in a private network: those a network namespace
/// confines (Unix, IPv4, IPv6, netlink); the others reach past it (vsock to a virtual
/// machine's host, Bluetooth, CAN, ...).
pub(crate) const PRIVATE_NETWORK: &[libc::c_int] = &[
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// A filter that refuses system calls of a foreign ABI (`ENOSYS`); the kernel's
/// keyrings (`EPERM`: they are not namespaced, so a command would share jianmu's
/// session keyring and the keys in it, as Docker's default profile also refuses);
/// with `families`, sockets of other families and io_uring, which could open them
/// (`EACCES`); with `no_mounts`, every call that changes the mount tree (`EPERM`), so
/// that a command cannot undo its view. `None` on architectures it is not written
/// for.
pub(crate) fn filter(
    families: Option<&[libc::c_int]>,
    no_mounts: bool,
) -> Option<Vec<libc::sock_filter>> {
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
        let mut program = vec![
            stmt(ld, 4), // arch
            jump(jeq, AUDIT_ARCH, 1, 0),
            stmt(ret, errno(libc::ENOSYS)),
            stmt(ld, 0),                  // syscall number
            jump(jge, 0x4000_0000, 0, 1), // the x32 ABI
            stmt(ret, errno(libc::ENOSYS)),
        ];
        let mut calls = vec![libc::SYS_add_key, libc::SYS_keyctl, libc::SYS_request_key];
        if no_mounts {
            calls.extend([
                libc::SYS_mount,
                libc::SYS_umount2,
                libc::SYS_pivot_root,
                libc::SYS_move_mount,
                libc::SYS_open_tree,
                libc::SYS_fsopen,
                libc::SYS_fsconfig,
                libc::SYS_fsmount,
                libc::SYS_fspick,
                libc::SYS_mount_setattr,
                // open_tree_attr (Linux 6.15), the same number on both architectures.
                467,
            ]);
        }
        let m = u8::try_from(calls.len()).ok()?;
        for (i, call) in calls.iter().enumerate() {
            // To the refusal: over the calls after this one and the jump.
            program.push(jump(jeq, *call as u32, m - u8::try_from(i).ok()?, 0));
        }
        program.push(stmt(libc::BPF_JMP | libc::BPF_JA, 1));
        program.push(stmt(ret, errno(libc::EPERM)));
        let Some(allowed) = families else {
            program.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
            return Some(program);
        };
        let n = u8::try_from(allowed.len()).ok()?;
        program.extend([
            jump(jeq, libc::SYS_socket as u32, 2, 0),
            // io_uring: to the refusal after the family checks.
            jump(jeq, libc::SYS_io_uring_setup as u32, 2 + n, 0),
            stmt(ret, libc::SECCOMP_RET_ALLOW),
            stmt(ld, 16), // args[0], the address family (low half)
        ]);
        // Each allowed family jumps over the ones after it and the refusal.
        for (i, family) in allowed.iter().enumerate() {
            program.push(jump(jeq, *family as u32, n - u8::try_from(i).ok()?, 0));
        }
        program.push(stmt(ret, errno(libc::EACCES)));
        program.push(stmt(ret, libc::SECCOMP_RET_ALLOW));
        Some(program)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}
