//! Zero-fills fjall's active journal ahead of fjall's writer, so that a
//! commit's fdatasync only writes data.
//!
//! **Why.** fjall creates a journal as a sparse 64 MiB file (`set_len`) and
//! writes it from offset 0. Every commit's fdatasync then also allocates the
//! blocks its data landed in and writes that allocation (extent tree, block
//! bitmap, inode) before it returns. PostgreSQL's WAL avoids this by writing
//! its segments full of zeros before using them. On ext4 an fdatasync of
//! data appended to a zero-filled file is measurably cheaper than to a
//! sparse one, and so are the server's one-row UPDATEs (figures in
//! `bench/results/packed-layout.md`).
//!
//! **How, and why it is safe.** A background thread ([`JournalFill`]) keeps
//! the journal zero-filled [`LOOKAHEAD`] bytes beyond fjall's write position,
//! one [`CHUNK`] at a time, through its own descriptor, never beyond the
//! file's length (it never extends the file). fjall's position is the file
//! offset of fjall's own descriptor for the journal, read from
//! `/proc/self/fdinfo`: every batch is written with `PersistMode::Buffer`,
//! which flushes fjall's buffer, so between batches that offset is where
//! the next batch goes. The zeros are written while holding the engine's
//! journal gate exclusively; every batch is appended while holding it
//! shared ([`FjallEngine::apply`](super::fjall_engine)), and all of the
//! engine's journal writes are batches. So no batch is being written while
//! the zeros go in, and the zeros only cover bytes past the last batch: the
//! file's content is exactly what it would be without them (the sparse
//! file reads as zeros there too), and fjall's recovery, which stops at the
//! first invalid entry, sees the same bytes. Then the thread fdatasyncs its
//! zeros outside the gate.
//!
//! **Where it deliberately does nothing**: a journal fjall opened in append
//! mode (the active journal after a restart, until fjall's next rotation
//! makes a new one): its writes extend the file and would land after any
//! zeros. Also when `/proc/self/fdinfo` or fjall's descriptor cannot be
//! found or read (another OS, a future fjall): the fill is an optimization,
//! never needed for correctness, so any doubt skips it. The descriptor is
//! matched by device and inode against the journal file the thread holds open, so a
//! descriptor number reused after fjall closes its journal never matches.
//! fjall's is found as the one writable descriptor of the journal before
//! the thread opens its own: this needs one filler per journal, which one
//! engine per database folder gives (fjall locks the folder). A second
//! filler would take the first one's descriptor, whose offset never moves,
//! for fjall's, and zero batches: the test that drives a filler by hand
//! opens its engine without one.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

/// How far ahead of fjall's position the journal is kept zero-filled.
/// Even a bulk COPY appends only a small part of this between two looks
/// (one every [`PAUSE`]), so this is many looks' worth.
pub(crate) const LOOKAHEAD: u64 = 8 << 20;

/// Bytes zero-filled per look. Writers wait for the gate while a chunk is
/// written into the page cache, not while it is synced. That stall is paid
/// once per chunk of journal (~200 transactions of 100 INSERTs), and is
/// smaller than what their fdatasyncs save together.
/// Deliberately not tuned further: a smaller chunk lowers the worst stall
/// but not the total.
pub(crate) const CHUNK: u64 = 2 << 20;

/// The least time between two looks, so a busy group commit (thousands of
/// syncs a second) does not wake the thread thousands of times.
const PAUSE: Duration = Duration::from_millis(5);

/// `O_APPEND` and the access-mode bits of the `flags:` line of fdinfo.
const O_APPEND: u32 = 0o2000;
const O_ACCMODE: u32 = 0o3;

/// Serializes zero-filling against journal writes: writers hold it shared
/// while fjall appends a batch, the fill holds it exclusively while its
/// zeros go in.
pub(crate) type JournalGate = RwLock<()>;

/// The zero-filling thread; stopping it is dropping this.
pub(crate) struct JournalFill {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Set by [`JournalFill::nudge`], taken by the thread.
    pending: AtomicBool,
    stop: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl JournalFill {
    /// Starts the thread for the journals in `dir`.
    pub(crate) fn start(dir: &Path, gate: Arc<JournalGate>) -> std::io::Result<JournalFill> {
        let shared = Arc::new(Shared {
            pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut filler = Filler::new(dir, gate);
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tablegate-journal".into())
            .spawn(move || {
                loop {
                    {
                        let mut guard = s.lock.lock();
                        while !s.pending.load(Ordering::Acquire) && !s.stop.load(Ordering::Acquire)
                        {
                            s.wake.wait(&mut guard);
                        }
                    }
                    if s.stop.load(Ordering::Acquire) {
                        return;
                    }
                    s.pending.store(false, Ordering::Release);
                    filler.step();
                    std::thread::sleep(PAUSE);
                }
            })?;
        Ok(JournalFill {
            shared,
            thread: Some(thread),
        })
    }

    /// Tells the thread the journal grew. Cheap when it already knows.
    pub(crate) fn nudge(&self) {
        if !self.shared.pending.swap(true, Ordering::AcqRel) {
            let _guard = self.shared.lock.lock();
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for JournalFill {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _guard = self.shared.lock.lock();
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The journal being filled.
struct Target {
    id: u64,
    /// Our descriptor for it (read-write, not append); holding it open
    /// also keeps its inode number from being reused.
    file: File,
    /// The journal's device and inode: fjall's descriptor number is
    /// checked against both, since after a rotation the number may name
    /// another file, and inode numbers repeat across devices.
    dev: u64,
    ino: u64,
    len: u64,
    /// fjall's descriptor number for the same file.
    fjall_fd: u64,
    /// Everything below this offset is data or zeros we have synced.
    zeroed_to: u64,
}

/// One look at the journal at a time (the thread's state).
pub(crate) struct Filler {
    dir: PathBuf,
    gate: Arc<JournalGate>,
    /// `None`: no journal yet. `Some(Err(id))`: journal `id` is not ours
    /// to fill (append mode, fjall's descriptor not found, an error).
    target: Option<Result<Target, u64>>,
    zeros: Vec<u8>,
}

/// What fdinfo says about one descriptor.
#[derive(Debug, PartialEq, Eq)]
struct FdInfo {
    pos: u64,
    flags: u32,
    ino: u64,
}

impl Filler {
    pub(crate) fn new(dir: &Path, gate: Arc<JournalGate>) -> Filler {
        Filler {
            dir: dir.to_path_buf(),
            gate,
            target: None,
            zeros: Vec::new(),
        }
    }

    /// Bytes zero-filled (and synced) so far in the journal being filled.
    #[cfg(test)]
    pub(crate) fn zeroed_to(&self) -> Option<u64> {
        match &self.target {
            Some(Ok(t)) => Some(t.zeroed_to),
            _ => None,
        }
    }

    /// Follows rotations and fills one chunk if fjall is within
    /// [`LOOKAHEAD`] of the zeros. Errors disable filling for this journal.
    pub(crate) fn step(&mut self) {
        let current = match &self.target {
            Some(Ok(t)) => Some(t.id),
            Some(Err(id)) => Some(*id),
            None => None,
        };
        // The folder is listed once; after that, rotations are followed
        // the way the group commit follows them.
        let newest = match current {
            Some(id) => super::fjall_engine::follow_rotations(&self.dir, id).ok(),
            None => super::fjall_engine::newest_journal(&self.dir)
                .ok()
                .flatten(),
        };
        let Some(newest) = newest else { return };
        if current != Some(newest) {
            self.target = Some(self.open(newest).ok_or(newest));
        }
        if let Some(Ok(t)) = &mut self.target
            && fill(t, &self.gate, &mut self.zeros).is_err()
        {
            tracing::debug!(journal = t.id, "journal zero-fill stopped for this journal");
            self.target = Some(Err(t.id));
        }
    }

    fn open(&self, id: u64) -> Option<Target> {
        let path = self.dir.join(format!("{id}.jnl"));
        // Find fjall's descriptor before opening ours, so that the only
        // writable descriptor of this file is fjall's (the group commit's
        // is read-only).
        let meta = std::fs::metadata(&path).ok()?;
        let fjall_fd = find_fjall_fd(meta.dev(), meta.ino())?;
        let file = OpenOptions::new().write(true).open(&path).ok()?;
        let info = fd_info(fjall_fd)?;
        let ino = file.metadata().ok()?.ino();
        if ino != meta.ino() || info.ino != ino || info.flags & O_APPEND != 0 {
            return None;
        }
        Some(Target {
            id,
            file,
            dev: meta.dev(),
            ino,
            len: meta.len(),
            fjall_fd,
            zeroed_to: info.pos,
        })
    }
}

/// Fills one chunk if fjall's position is within [`LOOKAHEAD`] of the
/// zeros. `Err`: stop filling this journal.
fn fill(t: &mut Target, gate: &JournalGate, zeros: &mut Vec<u8>) -> Result<(), ()> {
    if t.zeroed_to >= t.len {
        return Ok(());
    }
    let peek = fd_info(t.fjall_fd).ok_or(())?;
    if peek.ino != t.ino || !names_file(t.fjall_fd, t.dev, t.ino) {
        // fjall closed this journal (it rotated); the next look follows.
        return Ok(());
    }
    if t.zeroed_to.saturating_sub(peek.pos) >= LOOKAHEAD {
        return Ok(());
    }
    let end = {
        let _exclusive = gate.write();
        // No batch is being appended now: fjall's offset is where the next
        // one starts, and nothing at or past it has been written.
        let now = fd_info(t.fjall_fd).ok_or(())?;
        if now.ino != t.ino || now.flags & O_APPEND != 0 || !names_file(t.fjall_fd, t.dev, t.ino) {
            return Ok(());
        }
        let start = t.zeroed_to.max(now.pos);
        let end = (start + CHUNK).min(t.len);
        if start >= end {
            t.zeroed_to = t.len;
            return Ok(());
        }
        let n = usize::try_from(end - start).map_err(|_| ())?;
        if zeros.len() < n {
            zeros.resize(n, 0);
        }
        t.file.write_all_at(&zeros[..n], start).map_err(|_| ())?;
        end
    };
    // Allocates and writes the zeros now, not in a commit's fdatasync.
    t.file.sync_data().map_err(|_| ())?;
    t.zeroed_to = end;
    Ok(())
}

/// Whether descriptor `fd` of this process is open on the file `(dev, ino)`.
fn names_file(fd: u64, dev: u64, ino: u64) -> bool {
    std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The descriptor of this process that has the file `(dev, ino)` open for
/// writing: fjall's journal writer.
fn find_fjall_fd(dev: u64, ino: u64) -> Option<u64> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if meta.dev() != dev || meta.ino() != ino {
            continue;
        }
        let Some(info) = fd_info(fd) else { continue };
        if info.flags & O_ACCMODE != 0 {
            return Some(fd);
        }
    }
    None
}

fn fd_info(fd: u64) -> Option<FdInfo> {
    parse_fd_info(&std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?)
}

fn parse_fd_info(text: &str) -> Option<FdInfo> {
    let (mut pos, mut flags, mut ino) = (None, None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "pos" => pos = value.parse().ok(),
            "flags" => flags = u32::from_str_radix(value, 8).ok(),
            "ino" => ino = value.parse().ok(),
            _ => {}
        }
    }
    Some(FdInfo {
        pos: pos?,
        flags: flags?,
        ino: ino?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_lines_parse() {
        let text = "pos:\t11563685\nflags:\t02100002\nmnt_id:\t27\nino:\t10010691\n";
        assert_eq!(
            parse_fd_info(text),
            Some(FdInfo {
                pos: 11_563_685,
                flags: 0o2100002,
                ino: 10_010_691
            })
        );
        // Without the inode line (older kernels) nothing is filled.
        assert_eq!(parse_fd_info("pos:\t0\nflags:\t02\n"), None);
    }

    #[test]
    fn this_kernel_reports_what_the_fill_needs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").expect("write");
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        std::io::Write::write_all(&mut f, b"ab").expect("append");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let info = fd_info(u64::try_from(fd).expect("fd")).expect("fdinfo readable");
        assert_eq!(info.pos, 12);
        assert_ne!(info.flags & O_APPEND, 0);
        assert_eq!(info.ino, f.metadata().expect("meta").ino());
    }
}
