//! Bounded capture of a child's output: the first and last bytes are kept, the middle
//! is counted and dropped, and the pipe is always drained, so neither `yes` nor
//! gigabytes of output can exhaust memory or stall the child.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use jianmu_workspace::{Saver, SpillFile};

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes and lines read so far from a command's streams, for progress reports.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    bytes: AtomicU64,
    lines: AtomicU64,
}

impl Counter {
    pub(crate) fn add(&self, data: &[u8]) {
        self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        let lines = memchr::memchr_iter(b'\n', data).count() as u64;
        if lines > 0 {
            self.lines.fetch_add(lines, Ordering::Relaxed);
        }
    }

    /// Bytes and lines so far.
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.lines.load(Ordering::Relaxed),
        )
    }
}

/// What was kept of one stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    keep_head: usize,
    keep_tail: usize,
    spiller: Option<Saver>,
    /// Once the stream outgrew what is kept: the file it all goes to (or why not).
    spilled: Option<Result<SpillFile, String>>,
}

impl Captured {
    pub(crate) fn new(keep_head: usize, keep_tail: usize) -> Self {
        Self {
            keep_head,
            keep_tail,
            ..Self::default()
        }
    }

    /// The same, saving the whole stream with `spiller` once it is too long to keep.
    pub(crate) fn spilling(mut self, spiller: Option<Saver>) -> Self {
        self.spiller = spiller;
        self
    }

    /// Bytes pushed so far, kept or not.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Takes what was kept, leaving an empty capture with the same limits.
    pub(crate) fn take(&mut self) -> Captured {
        let fresh = Captured::new(self.keep_head, self.keep_tail).spilling(self.spiller.clone());
        std::mem::replace(self, fresh)
    }

    /// [`Captured::push`], counting `data` in `counter` too, when there is one.
    pub(crate) fn push_counted(&mut self, data: &[u8], counter: Option<&Counter>) {
        if let Some(counter) = counter {
            counter.add(data);
        }
        self.push(data);
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        let keep = (self.keep_head + self.keep_tail) as u64;
        if self.spilled.is_none()
            && self.total + data.len() as u64 > keep
            && let Some(spiller) = &self.spiller
        {
            // Nothing was dropped yet: head and tail hold all of it so far.
            let mut file = spiller.create();
            if let Ok(f) = &mut file {
                f.write(&self.head);
                let (a, b) = self.tail.as_slices();
                f.write(a);
                f.write(b);
            }
            self.spilled = Some(file.map_err(|e| e.0));
        }
        if let Some(Ok(file)) = &mut self.spilled {
            file.write(data);
        }
        self.total += data.len() as u64;
        let room = self.keep_head.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        if data.is_empty() || self.keep_tail == 0 {
            return;
        }
        if data.len() >= self.keep_tail {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.keep_tail..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.keep_tail);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    /// When the middle was left out: how many bytes the stream had in all, and the
    /// path (relative to the workspace) of the file holding it whole, if it was saved
    /// whole.
    pub(crate) fn cut(&self) -> Option<crate::StreamCut> {
        let kept = self.head.len() as u64 + self.tail.len() as u64;
        (kept < self.total).then(|| crate::StreamCut {
            total_bytes: self.total,
            saved: match &self.spilled {
                Some(Ok(file)) if file.is_whole() => Some(file.path.clone()),
                _ => None,
            },
        })
    }

    /// The kept text (lossy UTF-8), with a line saying how much was cut between head
    /// and tail.
    pub(crate) fn text(&self) -> String {
        let kept = self.head.len() as u64 + self.tail.len() as u64;
        let head = String::from_utf8_lossy(&self.head);
        if kept == self.total {
            let mut all = self.head.clone();
            all.extend(self.tail.iter());
            return String::from_utf8_lossy(&all).into_owned();
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let saved = match &self.spilled {
            Some(Ok(file)) => format!("; {}", file.describe()),
            Some(Err(why)) => format!("; {why}"),
            None => String::new(),
        };
        format!(
            "{head}\n... ({} bytes cut from the middle; {} bytes in all{saved}) ...\n{}",
            self.total - kept,
            self.total,
            String::from_utf8_lossy(&tail)
        )
    }
}

/// Reads `stream` to its end, keeping `keep_head` + `keep_tail` bytes at most and
/// counting what passes in `counter`, if any.
pub(crate) async fn drain<R: AsyncRead + Unpin>(
    stream: R,
    keep_head: usize,
    keep_tail: usize,
    counter: Option<&Counter>,
    spiller: Option<Saver>,
) -> Captured {
    let mut captured = Captured::new(keep_head, keep_tail).spilling(spiller);
    feed(stream, |data| captured.push_counted(data, counter)).await;
    captured
}

/// Reads `stream` to its end, handing each chunk to `sink`.
pub(crate) async fn feed<R: AsyncRead + Unpin>(mut stream: R, mut sink: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        sink(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::Captured;

    #[test]
    fn keeps_head_and_tail() {
        let mut c = Captured::new(4, 3);
        for chunk in [&b"ab"[..], b"cdef", b"ghij", b"k"] {
            c.push(chunk);
        }
        assert_eq!(
            c.text(),
            "abcd\n... (4 bytes cut from the middle; 11 bytes in all) ...\nijk"
        );
        let mut small = Captured::new(4, 3);
        small.push(b"abcdefg");
        assert_eq!(small.text(), "abcdefg");
    }
}
