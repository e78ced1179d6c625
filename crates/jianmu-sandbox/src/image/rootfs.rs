//! The files of the image's root filesystem: the runner (stripped), Python with its
//! standard library, busybox's applets, the shared libraries a binary links, and the
//! tar they are packed into.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The runner without its debug info when `strip` is installed (a third of the size:
/// a smaller image builds faster and its pages load faster in a new container);
/// else as it is.
pub(super) fn read_stripped(runner: &Path) -> std::io::Result<Vec<u8>> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!(".jianmu-runner-{}-{n}", std::process::id()));
    let stripped = jianmu_process::std_command("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&tmp)
        .arg(runner)
        .output()
        .is_ok_and(|out| out.status.success());
    let data = if stripped {
        std::fs::read(&tmp)
    } else {
        std::fs::read(runner)
    };
    let _ = std::fs::remove_file(&tmp);
    data
}

/// `path` inside `rootfs/`.
pub(super) fn rootfs_path(path: &Path) -> String {
    path.strip_prefix("/")
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Parts of the standard library an agent's scripts do not need (tests, GUIs, the
/// installer, third-party packages, the static library).
pub(super) fn skipped_in_stdlib(name: &str) -> bool {
    matches!(
        name,
        "test"
            | "idlelib"
            | "tkinter"
            | "turtledemo"
            | "ensurepip"
            | "lib2to3"
            | "site-packages"
            | "dist-packages"
    ) || name.starts_with("config-")
}

/// Copies `python` (the interpreter it points to, and a link at its own path) and
/// its standard library into `files`; returns the shared libraries they load.
pub(super) fn add_python(files: &mut Files, python: &Path) -> std::io::Result<Vec<PathBuf>> {
    let real = python.canonicalize().map_err(|e| {
        std::io::Error::other(format!("cannot find Python at {}: {e}", python.display()))
    })?;
    let out = jianmu_process::std_command(&real)
        .args([
            "-I",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "cannot ask {} for its standard library",
            real.display()
        )));
    }
    let stdlib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let rel = rootfs_path(&real);
    files.parents(&rel);
    files.file(&rel, std::fs::read(&real)?, 0o755);
    if real != python {
        let link = rootfs_path(python);
        files.parents(&link);
        files.symlink(&link, &real.to_string_lossy());
    }
    let mut libs = shared_libraries(&real)?;
    let mut stack = vec![stdlib.clone()];
    files.parents(&rootfs_path(&stdlib.join("x")));
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if dir == stdlib && skipped_in_stdlib(&name) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)?;
            let rel = rootfs_path(&path);
            if meta.is_dir() {
                files.dir(&rel, 0o755);
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                files.symlink(&rel, &std::fs::read_link(&path)?.to_string_lossy());
            } else if meta.is_file() {
                use std::os::unix::fs::PermissionsExt as _;
                files.file(
                    &rel,
                    std::fs::read(&path)?,
                    meta.permissions().mode() & 0o755,
                );
                if name.ends_with(".so") {
                    libs.extend(shared_libraries(&path)?);
                }
            }
        }
    }
    Ok(libs)
}

pub(super) fn busybox_applets(busybox: &Path) -> std::io::Result<Vec<String>> {
    let out = jianmu_process::std_command(busybox)
        .arg("--list")
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "`{} --list` failed: {}",
            busybox.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('/'))
        .map(str::to_owned)
        .collect())
}

/// The shared libraries `binary` loads, its loader included, as `ldd` lists them;
/// none for a static binary.
pub(super) fn shared_libraries(binary: &Path) -> std::io::Result<Vec<PathBuf>> {
    let out = jianmu_process::std_command("ldd")
        .arg(binary)
        .output()
        .map_err(|e| std::io::Error::other(format!("cannot run `ldd` on the runner: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let all = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
        if all.contains("not a dynamic executable") || all.contains("statically linked") {
            return Ok(Vec::new());
        }
        return Err(std::io::Error::other(format!(
            "`ldd` failed on the runner: {}",
            all.trim()
        )));
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, right)) => right.trim().split(' ').next().unwrap_or_default(),
            None => line.split(' ').next().unwrap_or_default(),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The files of `rootfs/`, in order, with a digest over paths, modes and contents.
#[derive(Default)]
pub(super) struct Files {
    entries: Vec<(String, Entry)>,
    seen: HashMap<String, usize>,
}

enum Entry {
    Dir(u32),
    File(Vec<u8>, u32),
    Symlink(String),
}

impl Files {
    fn push(&mut self, path: &str, entry: Entry) {
        if let Some(&i) = self.seen.get(path) {
            self.entries[i].1 = entry;
        } else {
            self.seen.insert(path.to_owned(), self.entries.len());
            self.entries.push((path.to_owned(), entry));
        }
    }
    /// Every folder above `path`, outermost first.
    pub(super) fn parents(&mut self, path: &str) {
        let mut parents = Vec::new();
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            parents.push(p.to_string_lossy().into_owned());
            parent = p.parent();
        }
        for p in parents.iter().rev() {
            self.dir(p, 0o755);
        }
    }

    pub(super) fn dir(&mut self, path: &str, mode: u32) {
        if !self.seen.contains_key(path) {
            self.push(path, Entry::Dir(mode));
        }
    }
    pub(super) fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.push(path, Entry::File(data, mode));
    }
    pub(super) fn symlink(&mut self, path: &str, target: &str) {
        self.push(path, Entry::Symlink(target.to_owned()));
    }

    /// 64-bit FNV-1a over every entry; a cache key, not a security measure.
    pub(super) fn digest(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (path, entry) in &self.entries {
            eat(path.as_bytes());
            match entry {
                Entry::Dir(mode) => eat(&[b'd', (*mode >> 8) as u8, *mode as u8]),
                Entry::File(data, mode) => {
                    eat(&[b'f', (*mode >> 8) as u8, *mode as u8]);
                    eat(&(data.len() as u64).to_le_bytes());
                    eat(data);
                }
                Entry::Symlink(target) => {
                    eat(b"l");
                    eat(target.as_bytes());
                }
            }
        }
        format!("{h:016x}")
    }

    pub(super) fn into_tar(self, dockerfile: &str) -> std::io::Result<Vec<u8>> {
        let mut tar = tar::Builder::new(Vec::new());
        let header = |kind: tar::EntryType, mode: u32, size: u64| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h
        };
        let mut h = header(tar::EntryType::Regular, 0o644, dockerfile.len() as u64);
        tar.append_data(&mut h, "Dockerfile", dockerfile.as_bytes())?;
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        tar.append_data(&mut h, "rootfs/", std::io::empty())?;
        for (path, entry) in self.entries {
            let path = format!("rootfs/{path}");
            match entry {
                Entry::Dir(mode) => {
                    let mut h = header(tar::EntryType::Directory, mode, 0);
                    tar.append_data(&mut h, format!("{path}/"), std::io::empty())?;
                }
                Entry::File(data, mode) => {
                    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
                    tar.append_data(&mut h, path, data.as_slice())?;
                }
                Entry::Symlink(target) => {
                    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                    tar.append_link(&mut h, path, target)?;
                }
            }
        }
        tar.into_inner()
    }
}
