//! The stat cache: what each file's stat data was when it was last hashed, and its
//! blob, so an unchanged file is neither read nor hashed again. Kept in the store as
//! `stat-cache`, a small binary file; a missing or damaged cache is simply empty.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use cap_std::fs::Dir;

use crate::object::Oid;

/// The file's name in the store.
pub(crate) const FILE: &str = "stat-cache";
const MAGIC: &[u8] = b"JIANMU-STAT-CACHE-1\n";
/// Far above a real cache (50,000 entries take about 4 MB); a larger file is ignored.
const MAX_BYTES: u64 = 256 << 20;

/// What `lstat` says of a file, as far as a change would alter it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    /// Nanoseconds since the epoch.
    pub(crate) mtime: i64,
    pub(crate) ctime: i64,
    /// The whole `st_mode`: type and permission bits.
    pub(crate) mode: u32,
}

impl Stat {
    pub(crate) fn of(m: &impl std::os::unix::fs::MetadataExt) -> Stat {
        Stat {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: ns(m.mtime(), m.mtime_nsec()),
            ctime: ns(m.ctime(), m.ctime_nsec()),
            mode: m.mode(),
        }
    }

    pub(crate) fn of_cap(m: &cap_std::fs::Metadata) -> Stat {
        use cap_std::fs::MetadataExt;
        Stat {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: ns(m.mtime(), m.mtime_nsec()),
            ctime: ns(m.ctime(), m.ctime_nsec()),
            mode: m.mode(),
        }
    }
}

impl Stat {
    /// From a raw `stat` (whose field types differ between architectures).
    pub(crate) fn of_raw(st: &rustix::fs::Stat) -> Stat {
        Stat {
            dev: num(st.st_dev),
            ino: num(st.st_ino),
            size: num(st.st_size),
            mtime: ns(num(st.st_mtime), num(st.st_mtime_nsec)),
            ctime: ns(num(st.st_ctime), num(st.st_ctime_nsec)),
            mode: num(st.st_mode),
        }
    }
}

/// A number of one integer type as another (0 if it does not fit, which a stat
/// field never does).
fn num<T: TryInto<U>, U: Default>(v: T) -> U {
    v.try_into().unwrap_or_default()
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// One file's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) stat: Stat,
    pub(crate) id: Oid,
    /// Stat'ed so soon after a change that a second change could have kept the same
    /// stat data: hash it again next time.
    pub(crate) racy: bool,
}

/// Path to entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Cache {
    pub(crate) entries: HashMap<String, Entry>,
}

impl Cache {
    /// The blob of `path` if its stat data is unchanged and trustworthy.
    pub(crate) fn hit(&self, path: &str, stat: &Stat) -> Option<Oid> {
        self.entries
            .get(path)
            .filter(|e| !e.racy && e.stat == *stat)
            .map(|e| e.id)
    }

    /// Reads the cache from the store; empty when missing, too large or damaged.
    pub(crate) fn load(store: &Dir) -> Cache {
        Self::try_load(store).unwrap_or_default()
    }

    fn try_load(store: &Dir) -> Option<Cache> {
        let meta = store.metadata(FILE).ok()?;
        if meta.len() > MAX_BYTES {
            return None;
        }
        let data = store.read(FILE).ok()?;
        let mut rest = data.strip_prefix(MAGIC)?;
        let mut entries = HashMap::new();
        while !rest.is_empty() {
            let len = u32::from_le_bytes(take(&mut rest)?) as usize;
            let path = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
            rest = &rest[len..];
            let stat = Stat {
                dev: u64::from_le_bytes(take(&mut rest)?),
                ino: u64::from_le_bytes(take(&mut rest)?),
                size: u64::from_le_bytes(take(&mut rest)?),
                mtime: i64::from_le_bytes(take(&mut rest)?),
                ctime: i64::from_le_bytes(take(&mut rest)?),
                mode: u32::from_le_bytes(take(&mut rest)?),
            };
            let [racy] = take::<1>(&mut rest)?;
            let id = Oid(take(&mut rest)?);
            entries.insert(
                path,
                Entry {
                    stat,
                    id,
                    racy: racy != 0,
                },
            );
        }
        Some(Cache { entries })
    }

    /// Writes the cache to the store atomically.
    pub(crate) fn save(&self, store: &Dir) -> io::Result<()> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.entries.len() * 100);
        out.extend_from_slice(MAGIC);
        for (path, e) in &self.entries {
            let Ok(len) = u32::try_from(path.len()) else {
                continue;
            };
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(path.as_bytes());
            out.extend_from_slice(&e.stat.dev.to_le_bytes());
            out.extend_from_slice(&e.stat.ino.to_le_bytes());
            out.extend_from_slice(&e.stat.size.to_le_bytes());
            out.extend_from_slice(&e.stat.mtime.to_le_bytes());
            out.extend_from_slice(&e.stat.ctime.to_le_bytes());
            out.extend_from_slice(&e.stat.mode.to_le_bytes());
            out.push(u8::from(e.racy));
            out.extend_from_slice(&e.id.0);
        }
        crate::index::write_atomic(store, Path::new(FILE), &out)
    }
}

/// The next `N` bytes of `rest`.
fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
    let (head, tail) = rest.split_first_chunk::<N>()?;
    *rest = tail;
    Some(*head)
}
