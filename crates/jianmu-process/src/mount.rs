//! Making a view: a mount namespace whose root holds only what the view's steps say,
//! built once by a short-lived child and kept by a descriptor, which every command of
//! the jail joins (then copies, to mount its own `/proc`).
//!
//! The child works as bubblewrap does: it makes its mounts private, mounts an empty
//! file system on `/tmp` and pivots into it, so that the host's tree is at `/oldroot`
//! and the view is assembled at `/newroot` from binds of `/oldroot/...`; a `/proc`
//! of a PID namespace that is already empty lets commands mount their own (the kernel
//! lets a namespace mount `/proc` only where one is visible already); `/dev` holds the
//! harmless devices, its own pseudo-terminals and shared memory; the root is made
//! read-only, and a second pivot leaves the host's tree behind. After the `clone`,
//! system calls on data prepared here only.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStringExt;

use crate::sys::c;
use crate::userns::Maps;
use crate::view::Step;

/// A made view: its mount namespace, and the user namespace that owns it when the view
/// has one of its own (without a private network).
#[derive(Debug)]
pub(crate) struct MadeView {
    pub(crate) user: Option<OwnedFd>,
    pub(crate) mnt: OwnedFd,
}

/// One system-call step in the child.
#[derive(Debug)]
enum Op {
    Dir(CString),
    File(CString),
    Link(CString, CString),
    /// Source, target, read-only, the targets of what is mounted below the source,
    /// whether the view needs it.
    Bind(CString, CString, bool, Vec<CString>, bool),
    Tmpfs(CString, &'static [u8]),
    MaskDir(CString),
    MaskFile(CString),
    /// The view's `/proc`: of a PID namespace left empty.
    Proc(CString),
    /// A fresh pseudo-terminal file system.
    Devpts(CString),
    /// A read-only remount of a file system the child made.
    ReadOnly(CString),
}

/// Whether a failed step fails the view (else it is skipped: a toolchain that cannot
/// be shown must not cost the whole view).
fn must(op: &Op) -> bool {
    match op {
        Op::Bind(.., needed) => *needed,
        Op::Dir(_) | Op::File(_) | Op::Link(..) | Op::Devpts(_) => false,
        _ => true,
    }
}

const NEW: &str = "/newroot";
const OLD: &str = "/oldroot";

fn under(base: &str, path: &Path) -> CString {
    let mut bytes = base.as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    CString::new(bytes).unwrap_or_default()
}

/// Where something is mounted below `source`, from this process's mount table.
fn mounted_below(table: &[PathBuf], source: &Path) -> Vec<PathBuf> {
    table
        .iter()
        .filter(|m| m.starts_with(source) && m.as_path() != source)
        .cloned()
        .collect()
}

/// The mount points of this process's mount table (`/proc/self/mountinfo`, fifth
/// field, octal escapes decoded).
fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(field) = line.split(|&b| b == b' ').nth(4) else {
            continue;
        };
        let mut path = Vec::with_capacity(field.len());
        let mut i = 0;
        while i < field.len() {
            if field[i] == b'\\'
                && i + 3 < field.len()
                && field[i + 1..i + 4]
                    .iter()
                    .all(|d| (b'0'..=b'7').contains(d))
            {
                let n = field[i + 1..i + 4]
                    .iter()
                    .fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
                path.push(u8::try_from(n).unwrap_or(b'?'));
                i += 4;
            } else {
                path.push(field[i]);
                i += 1;
            }
        }
        out.push(PathBuf::from(std::ffi::OsString::from_vec(path)));
    }
    out
}

/// The system calls that build a view of `steps`.
fn ops(steps: &[Step]) -> Vec<Op> {
    let table = mount_points();
    let mut ops = Vec::with_capacity(steps.len() + 24);
    // The rebuilt folders open around the current step: each is first bound whole,
    // read-only, at `/stage/N` (outside the new root, left behind with the old one), so
    // that its entries are bound from there already read-only, one call each.
    let mut open: Vec<(&Path, String)> = Vec::new();
    let mut staged = 0usize;
    let read_only_below = |source: &Path, target: &Path| -> Vec<CString> {
        mounted_below(&table, source)
            .iter()
            .filter_map(|m| m.strip_prefix(source).ok())
            .map(|rest| under("", &target.join(rest)))
            .collect()
    };
    for step in steps {
        let op = match step {
            Step::Dir(p) => Op::Dir(under(NEW, p)),
            Step::File(p) => Op::File(under(NEW, p)),
            Step::Link(p, target) => Op::Link(
                CString::new(target.as_bytes()).unwrap_or_default(),
                under(NEW, p),
            ),
            Step::Bind {
                source,
                target,
                writable: false,
            } if open
                .last()
                .is_some_and(|(dir, _)| source.parent() == Some(*dir)) =>
            {
                let stage = open.last().map(|(_, s)| s.as_str()).unwrap_or_default();
                let name = source.file_name().unwrap_or_default();
                Op::Bind(
                    under(stage, &Path::new("/").join(name)),
                    under(NEW, target),
                    false,
                    Vec::new(),
                    false,
                )
            }
            Step::Bind {
                source,
                target,
                writable,
            } => {
                let below = if *writable {
                    Vec::new()
                } else {
                    read_only_below(
                        source,
                        &Path::new(NEW).join(target.strip_prefix("/").unwrap_or(target)),
                    )
                };
                Op::Bind(
                    under(OLD, source),
                    under(NEW, target),
                    !writable,
                    below,
                    *writable,
                )
            }
            Step::Tmpfs(p) => Op::Tmpfs(under(NEW, p), b"mode=1777\0"),
            Step::Skeleton(p) => {
                let stage = format!("/stage/{staged}");
                staged += 1;
                if staged == 1 {
                    ops.push(Op::Dir(c("/stage")));
                }
                ops.push(Op::Dir(c(&stage)));
                ops.push(Op::Bind(
                    under(OLD, p),
                    c(&stage),
                    true,
                    read_only_below(p, Path::new(&stage)),
                    true,
                ));
                open.push((p.as_path(), stage));
                Op::Tmpfs(under(NEW, p), b"mode=0755\0")
            }
            Step::Seal(p) => {
                open.pop();
                Op::ReadOnly(under(NEW, p))
            }
            Step::MaskDir(p) => Op::MaskDir(under(NEW, p)),
            Step::MaskFile(p) => Op::MaskFile(under(NEW, p)),
        };
        ops.push(op);
    }
    let dev = |name: &str| c(&format!("{NEW}/dev/{name}"));
    ops.push(Op::Dir(c(&format!("{NEW}/dev"))));
    ops.push(Op::Tmpfs(c(&format!("{NEW}/dev")), b"mode=0755\0"));
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        ops.push(Op::File(dev(name)));
        ops.push(Op::Bind(
            c(&format!("{OLD}/dev/{name}")),
            dev(name),
            false,
            Vec::new(),
            false,
        ));
    }
    ops.push(Op::Dir(dev("pts")));
    ops.push(Op::Devpts(dev("pts")));
    ops.push(Op::Link(c("pts/ptmx"), dev("ptmx")));
    ops.push(Op::Dir(dev("shm")));
    ops.push(Op::Tmpfs(dev("shm"), b"mode=1777\0"));
    ops.push(Op::Link(c("/proc/self/fd"), dev("fd")));
    for (i, name) in ["stdin", "stdout", "stderr"].iter().enumerate() {
        ops.push(Op::Link(c(&format!("/proc/self/fd/{i}")), dev(name)));
    }
    ops.push(Op::ReadOnly(c(&format!("{NEW}/dev"))));
    // Read by tools that count processors or memory; read-only with what is below.
    ops.push(Op::Dir(c(&format!("{NEW}/sys"))));
    ops.push(Op::Bind(
        c(&format!("{OLD}/sys")),
        c(&format!("{NEW}/sys")),
        true,
        read_only_below(Path::new("/sys"), Path::new(&format!("{NEW}/sys"))),
        false,
    ));
    ops.push(Op::Dir(c(&format!("{NEW}/proc"))));
    ops.push(Op::Proc(c(&format!("{NEW}/proc"))));
    ops.push(Op::ReadOnly(c(NEW)));
    ops
}

/// What the maker child needs, and where it reports.
struct Make {
    ops: Vec<Op>,
    /// Join this user namespace; else the child is the first process of a new one and
    /// writes `maps`.
    join_user: RawFd,
    maps: Maps,
    proc_stack: *mut libc::c_void,
    paths: Fixed,
    out: Out,
}

/// What the maker child leaves for its parent.
struct Out {
    user: RawFd,
    mnt: RawFd,
    /// The step that failed (-1: none; ops.len(): the setup or the pivots).
    failed: isize,
    errno: i32,
}

struct Fixed {
    root: CString,
    tmp: CString,
    tmpfs: CString,
    newroot_rel: CString,
    oldroot_rel: CString,
    newroot: CString,
    dot: CString,
    user_ns: CString,
    mnt_ns: CString,
    proc_fs: CString,
    devpts: CString,
    devpts_opts: CString,
    dev_null: CString,
    mask_opts: CString,
    root_opts: CString,
}

/// Makes the view of `steps`, in the user namespace `join_user` (a private network's)
/// or in a new one.
///
/// # Errors
/// A step the view cannot do without failed (what and why in the message).
pub(crate) fn make(steps: &[Step], join_user: Option<RawFd>) -> io::Result<MadeView> {
    let ops = ops(steps);
    let proc_stack = crate::clone::Stack::new(16 * 1024)?;
    let mut make = Make {
        ops,
        join_user: join_user.unwrap_or(-1),
        maps: Maps::current(),
        proc_stack: proc_stack.top(),
        paths: Fixed {
            root: c("/"),
            tmp: c("/tmp"),
            tmpfs: c("tmpfs"),
            newroot_rel: c("newroot"),
            oldroot_rel: c("oldroot"),
            newroot: c(NEW),
            dot: c("."),
            user_ns: c("/proc/self/ns/user"),
            mnt_ns: c("/proc/self/ns/mnt"),
            proc_fs: c("proc"),
            devpts: c("devpts"),
            devpts_opts: c("newinstance,ptmxmode=0666,mode=0620"),
            dev_null: c(&format!("{OLD}/dev/null")),
            mask_opts: c("mode=0555,size=4096,nr_inodes=2"),
            root_opts: c("mode=0755"),
        },
        out: Out {
            user: -1,
            mnt: -1,
            failed: -1,
            errno: 0,
        },
    };
    let stack = crate::clone::Stack::new(128 * 1024)?;
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
    if join_user.is_none() {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: the child runs `make_main` on its own stack with `make`, which outlives
    // it (CLONE_VFORK), and makes system calls on prepared data only.
    unsafe {
        crate::clone::run_child(make_main, stack.top(), flags, (&raw mut make).cast())?;
    }
    // SAFETY: the child opened these in our table and nothing else owns them.
    let take = |fd: RawFd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
    let (user, mnt) = (take(make.out.user), take(make.out.mnt));
    if make.out.failed >= 0 {
        let what = usize::try_from(make.out.failed)
            .ok()
            .and_then(|i| make.ops.get(i))
            .map_or_else(|| "its root".to_owned(), describe);
        return Err(io::Error::new(
            io::Error::from_raw_os_error(make.out.errno).kind(),
            format!(
                "cannot make the view ({what}): {}",
                io::Error::from_raw_os_error(make.out.errno)
            ),
        ));
    }
    match mnt {
        Some(mnt) => Ok(MadeView { user, mnt }),
        None => Err(io::Error::other("cannot make the view: no mount namespace")),
    }
}

fn describe(op: &Op) -> String {
    let show = |c: &CString| c.to_string_lossy().replacen(NEW, "", 1);
    match op {
        Op::Bind(source, target, ..) => format!(
            "showing {} at {}",
            source.to_string_lossy().replacen(OLD, "", 1),
            show(target)
        ),
        Op::Tmpfs(p, _) | Op::Devpts(p) => format!("a file system at {}", show(p)),
        Op::MaskDir(p) | Op::MaskFile(p) => format!("hiding {}", show(p)),
        Op::Proc(p) => format!("{} for the commands' own", show(p)),
        Op::ReadOnly(p) => format!("making {} read-only", show(p)),
        Op::Dir(p) | Op::File(p) | Op::Link(_, p) => format!("making {}", show(p)),
    }
}

extern "C" fn make_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Make` the caller keeps alive while this runs; only system
    // calls on prepared data follow.
    unsafe {
        let Make {
            ops,
            join_user,
            maps,
            proc_stack,
            paths: p,
            out,
        } = &mut *arg.cast::<Make>();
        let errno = || *libc::__errno_location();
        let setup = ops.len() as isize;
        let null = std::ptr::null::<libc::c_char>();
        macro_rules! check {
            ($e:expr, $at:expr) => {
                if $e < 0 {
                    out.failed = $at;
                    out.errno = errno();
                    libc::_exit(1);
                }
            };
        }
        if *join_user >= 0 {
            check!(libc::setns(*join_user, libc::CLONE_NEWUSER), setup);
        } else {
            if let Err(e) = crate::userns::write_own_maps(maps) {
                out.failed = setup;
                out.errno = e.raw_os_error().unwrap_or(libc::EPERM);
                libc::_exit(1);
            }
            out.user = libc::open(p.user_ns.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            check!(out.user, setup);
        }
        check!(libc::unshare(libc::CLONE_NEWNS), setup);
        out.mnt = libc::open(p.mnt_ns.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        check!(out.mnt, setup);
        check!(
            libc::mount(
                null,
                p.root.as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null()
            ),
            setup
        );
        check!(tmpfs(p, &p.tmp, p.root_opts.as_ptr(), 0), setup);
        check!(libc::chdir(p.tmp.as_ptr()), setup);
        check!(libc::mkdir(p.newroot_rel.as_ptr(), 0o755), setup);
        check!(libc::mkdir(p.oldroot_rel.as_ptr(), 0o755), setup);
        check!(
            libc::syscall(libc::SYS_pivot_root, p.dot.as_ptr(), p.oldroot_rel.as_ptr()) as i32,
            setup
        );
        check!(libc::chdir(p.root.as_ptr()), setup);
        check!(tmpfs(p, &p.newroot, p.root_opts.as_ptr(), 0), setup);
        for (i, op) in ops.iter().enumerate() {
            if run(op, p, *proc_stack) < 0 && must(op) {
                out.failed = i as isize;
                out.errno = errno();
                libc::_exit(1);
            }
        }
        check!(libc::chdir(p.newroot.as_ptr()), setup);
        check!(
            libc::syscall(libc::SYS_pivot_root, p.dot.as_ptr(), p.dot.as_ptr()) as i32,
            setup
        );
        check!(libc::umount2(p.dot.as_ptr(), libc::MNT_DETACH), setup);
        check!(libc::chdir(p.root.as_ptr()), setup);
        libc::_exit(0)
    }
}

/// The flags of the mount at `path` a read-only remount must keep (the kernel refuses
/// to drop `nosuid`, `nodev`, `noexec` or the access-time mode a namespace inherited).
///
/// # Safety
/// System calls only: callable in a child that shares this memory.
unsafe fn kept_flags(path: &CString) -> libc::c_ulong {
    // SAFETY: a valid out buffer and C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
            return 0;
        }
        let same = libc::ST_NOSUID
            | libc::ST_NODEV
            | libc::ST_NOEXEC
            | libc::ST_NOATIME
            | libc::ST_NODIRATIME;
        // These ST_ values are their MS_ ones; relatime's is not (ST_RELATIME is
        // MS_BIND's value).
        let relatime = if st.f_flag & libc::ST_RELATIME != 0 {
            libc::MS_RELATIME
        } else {
            0
        };
        (st.f_flag & same) | relatime
    }
}

/// Remounts the bind mount at `path` read-only, keeping the flags it must keep.
///
/// # Safety
/// System calls only: callable in a child that shares this memory, inside the
/// mount namespace being made.
unsafe fn read_only(path: &CString) -> libc::c_int {
    // SAFETY: system calls on a prepared C string.
    unsafe {
        let flags = kept_flags(path);
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            std::ptr::null(),
        )
    }
}

/// Mounts a new, private, in-memory file system at `at` (no set-id programs, no
/// devices, and `extra`) with `opts` (a C string). System calls only.
///
/// # Safety
/// `opts` must point to a NUL-terminated string; inside the mount namespace being
/// made only.
unsafe fn tmpfs(
    p: &Fixed,
    at: &CString,
    opts: *const libc::c_char,
    extra: libc::c_ulong,
) -> libc::c_int {
    // SAFETY: prepared C strings.
    unsafe {
        libc::mount(
            p.tmpfs.as_ptr(),
            at.as_ptr(),
            p.tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | extra,
            opts.cast(),
        )
    }
}

/// Carries out one step; negative on failure (`errno` set).
///
/// # Safety
/// Only in the child making the view (its own mount namespace), with `proc_stack`
/// the top of a stack a nested child may use.
unsafe fn run(op: &Op, p: &Fixed, proc_stack: *mut libc::c_void) -> libc::c_int {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: system calls on prepared C strings.
    unsafe {
        match op {
            Op::Dir(path) => {
                let r = libc::mkdir(path.as_ptr(), 0o755);
                if r < 0 && *libc::__errno_location() == libc::EEXIST {
                    0
                } else {
                    r
                }
            }
            Op::File(path) => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd
            }
            Op::Link(target, at) => libc::symlink(target.as_ptr(), at.as_ptr()),
            Op::Bind(source, target, ro, below, _) => {
                let r = libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                );
                if r < 0 || !*ro {
                    return r;
                }
                // A bind that cannot be made read-only whole is taken away again, so a
                // skipped step never leaves something writable.
                let mut failed = read_only(target) < 0;
                for path in below {
                    // Gone since the table was read: nothing to make read-only.
                    if read_only(path) < 0 && *libc::__errno_location() != libc::ENOENT {
                        failed = true;
                    }
                }
                if failed {
                    let errno = *libc::__errno_location();
                    libc::umount2(target.as_ptr(), libc::MNT_DETACH);
                    *libc::__errno_location() = errno;
                    return -1;
                }
                0
            }
            Op::Tmpfs(path, opts) => tmpfs(p, path, opts.as_ptr().cast(), 0),
            Op::MaskDir(path) => {
                let r = tmpfs(p, path, p.mask_opts.as_ptr(), libc::MS_NOEXEC);
                if r < 0 {
                    return r;
                }
                libc::mount(
                    null,
                    path.as_ptr(),
                    null,
                    libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
                    std::ptr::null(),
                )
            }
            Op::MaskFile(path) => libc::mount(
                p.dev_null.as_ptr(),
                path.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ),
            Op::Proc(path) => {
                let mut at = ProcAt {
                    path: path.as_ptr(),
                    fs: p.proc_fs.as_ptr(),
                    result: -1,
                    errno: 0,
                };
                let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_NEWPID | libc::SIGCHLD;
                if crate::clone::run_child(proc_main, proc_stack, flags, (&raw mut at).cast())
                    .is_err()
                {
                    return -1;
                }
                if at.result < 0 {
                    *libc::__errno_location() = at.errno;
                }
                at.result
            }
            Op::Devpts(path) => libc::mount(
                p.devpts.as_ptr(),
                path.as_ptr(),
                p.devpts.as_ptr(),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                p.devpts_opts.as_ptr().cast(),
            ),
            Op::ReadOnly(path) => libc::mount(
                null,
                path.as_ptr(),
                null,
                libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
                std::ptr::null(),
            ),
        }
    }
}

struct ProcAt {
    path: *const libc::c_char,
    fs: *const libc::c_char,
    result: libc::c_int,
    errno: i32,
}

extern "C" fn proc_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ProcAt` the maker keeps alive while this runs (CLONE_VFORK).
    unsafe {
        let at = &mut *arg.cast::<ProcAt>();
        at.result = libc::mount(
            at.fs,
            at.path,
            at.fs,
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        );
        at.errno = *libc::__errno_location();
        libc::_exit(0)
    }
}

impl MadeView {
    /// The descriptor of the mount namespace, to join.
    pub(crate) fn mnt(&self) -> RawFd {
        self.mnt.as_raw_fd()
    }
}

/// A jail's view: what it holds, and its namespace once made (by the first command).
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) config: crate::view::ViewConfig,
    made: std::sync::Mutex<Option<std::sync::Arc<MadeView>>>,
    failed: std::sync::atomic::AtomicBool,
}

impl View {
    pub(crate) fn new(config: crate::view::ViewConfig) -> Self {
        Self {
            config,
            made: std::sync::Mutex::default(),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether making it failed (commands then run without it).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The made view, made now if it is not yet, in the user namespace `join_user`
    /// (a private network's) or one of its own.
    pub(crate) fn get(&self, join_user: Option<RawFd>) -> io::Result<std::sync::Arc<MadeView>> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(view) = &*made {
            return Ok(std::sync::Arc::clone(view));
        }
        match make(&self.config.layout(), join_user) {
            Ok(view) => {
                let view = std::sync::Arc::new(view);
                *made = Some(std::sync::Arc::clone(&view));
                Ok(view)
            }
            Err(e) => {
                self.failed
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Err(e)
            }
        }
    }
}
