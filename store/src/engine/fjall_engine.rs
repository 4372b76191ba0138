//! The durable engine: fjall, one database with one keyspace per [`Space`].
//!
//! Atomicity comes from fjall's cross-keyspace write batches (journaled as
//! one record, so a crash never exposes half a batch). Durability is ours:
//! batches are written to the journal with `PersistMode::Buffer` and, in
//! [`Durability::Sync`], a group commit then fsyncs the journal once for every
//! batch that reached it.
//!
//! **Why the group commit fsyncs its own descriptor.** fjall's
//! `Database::persist` fsyncs while holding its journal lock, so every writer
//! that arrives during the fsync sleeps on that lock before it
//! can even append, and the next fsync cannot start until they have. The
//! group commit instead opens the active journal file itself ([`JournalFile`])
//! and fdatasyncs that descriptor with no fjall lock held: writers keep
//! appending while a sync runs, and the next sync takes all of them. This
//! leans on two facts of fjall 3.1's journal (checked when upgrading fjall):
//! the active journal is the highest-numbered `<id>.jnl` in the database
//! folder, and a journal is fsynced before the next one is created. A batch
//! that reached journal `k` is therefore durable once `k` is fsynced or once
//! `k + 1` exists. If no journal file is found, the sync falls back to
//! fjall's own `persist`.
//!
//! **Why batches pass a gate.** In [`Durability::Sync`] a thread keeps the
//! active journal zero-filled ahead of fjall's writer, so a commit's
//! fdatasync writes data, not block allocations
//! ([`journal_fill`](super::journal_fill)). Batches are appended holding the
//! gate shared; the zeros go in holding it exclusively.

use std::fs::File;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::config::{BlockSizePolicy, HashRatioPolicy};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use parking_lot::{Condvar, Mutex};

use super::journal_fill::{JournalFill, JournalGate};
use super::{Bytes, Durability, Engine, KvIter, Mutation, Space};
use crate::error::{Result, StoreError};

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        use lsm_tree::Error as Lsm;
        match e {
            // TolerateCorruptTail (fjall's only mode) recovers a torn last
            // batch; anything it refuses is damage.
            fjall::Error::JournalRecovery(r) => StoreError::Corrupt(format!(
                "a journal batch fails its check ({r:?}): the journal is damaged, not just torn at its end"
            )),
            fjall::Error::Storage(Lsm::ChecksumMismatch { .. }) => {
                StoreError::Corrupt("a block of a table file fails its checksum".into())
            }
            fjall::Error::Storage(
                e @ (Lsm::Decompress(_)
                | Lsm::InvalidTag(_)
                | Lsm::InvalidTrailer
                | Lsm::InvalidHeader(_)
                | Lsm::Unrecoverable
                | Lsm::Utf8(_)),
            ) => StoreError::Corrupt(format!("a table file does not decode: {e}")),
            e @ (fjall::Error::Decompress(_)
            | fjall::Error::InvalidTrailer
            | fjall::Error::InvalidTag(_)
            | fjall::Error::Unrecoverable) => {
                StoreError::Corrupt(format!("a table file does not decode: {e}"))
            }
            // Poisoned without a failure this layer saw: a background
            // flush or compaction failed a write. Same latch as a failed
            // commit; fjall logged the cause.
            fjall::Error::Poisoned => StoreError::WritesStopped {
                cause: "the storage engine stopped itself after a background write \
                        (flush or compaction) failed; its log line names the cause"
                    .into(),
                disk_full: false,
            },
            e => StoreError::Engine(e.to_string()),
        }
    }
}

/// A failed commit or sync: an I/O error is a journal write the engine
/// could not make (fjall poisons itself after it); anything else is passed
/// on.
fn write_failure(what: &str, e: fjall::Error) -> StoreError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return super::health::write_failure(what, io);
        }
        cause = c.source();
    }
    e.into()
}

/// Free space under which a failed background write is taken for a full
/// disk: a flush writes up to a memtable, a compaction more.
const LOW_SPACE_BYTES: u64 = 64 << 20;

/// Data block size of the entities keyspace. fjall's default is 4 KiB;
/// 16 KiB blocks cost a full scan and a 100-row range less server CPU:
/// fewer blocks to find, load and start iterating per entity.
/// Deliberately not larger: a point read whose block is not cached reads
/// the whole block from disk.
const ENTITY_BLOCK_BYTES: u32 = 16 * 1024;

/// Hash index in each entities data block (fjall's `hash_ratio`: one-byte
/// buckets per entity), so a point read finds its restart interval inside
/// a block with one probe instead of a binary search over the restart keys.
/// With 16 KiB blocks it makes a point lookup cheaper (without the larger
/// blocks it made no difference); costs 0.75 bytes per entity.
const ENTITY_BLOCK_HASH_RATIO: f32 = 0.75;

/// How the entities keyspace is laid out on disk. fjall stores these with
/// the keyspace when it is created: a data directory keeps the layout it
/// was created with.
fn entity_keyspace_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .data_block_size_policy(BlockSizePolicy::all(ENTITY_BLOCK_BYTES))
        .data_block_hash_ratio_policy(HashRatioPolicy::all(ENTITY_BLOCK_HASH_RATIO))
}

/// fjall behind the [`Engine`] trait. Its journal is not compressed:
/// fjall lz4-compresses journal values of 4 KiB and more by default, in the
/// writing thread, and the packed layout's chunks (up to 8 KiB) are such
/// values. Data blocks on disk stay compressed.
pub(crate) struct FjallEngine {
    /// Declared first so it stops before the database closes.
    fill: Option<JournalFill>,
    /// The database's folder.
    dir: std::path::PathBuf,
    /// Held shared while fjall appends a batch to its journal, exclusively
    /// while the fill writes zeros past it ([`journal_fill`](super::journal_fill)).
    gate: Arc<JournalGate>,
    db: Database,
    entities: Keyspace,
    meta: Keyspace,
    stats: Keyspace,
    durability: Durability,
    /// Number of batches handed to the journal so far (a ticket per batch).
    written: AtomicU64,
    /// The group commit's state; `sync_done` wakes the writers waiting for
    /// a sync in progress, all at once.
    sync: Mutex<SyncState>,
    sync_done: Condvar,
    /// The active journal, as the group commit's leader fsyncs it (only
    /// the leader takes this lock).
    journal: Mutex<JournalFile>,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Highest ticket known to be on disk.
    synced: u64,
    /// A leader is fsyncing.
    syncing: bool,
    /// An fsync failed. Linux may drop the unwritten pages of a failed
    /// fsync and report the next one as a success, so from then on no
    /// write is acknowledged (as PostgreSQL, which panics): restarting
    /// recovers what the journal holds.
    failed: bool,
}

/// The database's active journal file, opened read-only by the group
/// commit so it can fdatasync it without fjall's journal lock (see the
/// module documentation for the two facts about fjall this relies on).
#[derive(Debug)]
struct JournalFile {
    dir: PathBuf,
    /// Id and descriptor of the newest journal seen.
    current: Option<(u64, File)>,
}

/// The highest journal id in the database folder `dir`.
pub(super) fn newest_journal(dir: &Path) -> std::io::Result<Option<u64>> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let id = name
            .to_str()
            .and_then(|n| n.strip_suffix(".jnl"))
            .and_then(|n| n.parse::<u64>().ok());
        newest = newest.max(id);
    }
    Ok(newest)
}

/// The newest journal at or after journal `id`, found by probing the next
/// ids one at a time (cheaper than listing the folder).
pub(super) fn follow_rotations(dir: &Path, mut id: u64) -> std::io::Result<u64> {
    while dir.join(format!("{}.jnl", id + 1)).try_exists()? {
        id += 1;
    }
    Ok(id)
}

impl JournalFile {
    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}.jnl"))
    }

    /// Makes every batch appended to the journal before this call durable.
    /// `Ok(false)`: no journal file found (the caller must sync another way).
    fn sync(&mut self) -> std::io::Result<bool> {
        let mut id = match &self.current {
            Some((id, _)) => *id,
            None => match newest_journal(&self.dir)? {
                Some(id) => id,
                None => return Ok(false),
            },
        };
        // Rotations since the last sync: the journals they sealed were
        // fsynced by fjall before their successor was created.
        id = follow_rotations(&self.dir, id)?;
        if self.current.as_ref().is_none_or(|(cur, _)| *cur != id) {
            self.current = Some((id, File::open(self.path(id))?));
        }
        let (_, file) = self.current.as_ref().expect("opened above");
        file.sync_data()?;
        Ok(true)
    }
}

impl std::fmt::Debug for FjallEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallEngine")
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl FjallEngine {
    /// Opens or creates the database in `path`, recovering its journal.
    #[cfg(test)]
    pub(crate) fn open(path: &Path, durability: Durability, cache_bytes: u64) -> Result<Self> {
        Self::open_with(path, durability, cache_bytes, true, None)
    }

    /// Opens or creates the database in `path`, recovering its journal,
    /// with `memtable_bytes` for the keyspaces it creates (fjall keeps each keyspace's size with it: an existing data
    /// directory keeps its own). Small memtables rotate the journal and
    /// flush table files often, which the crash tests want.
    pub(crate) fn open_sized(
        path: &Path,
        durability: Durability,
        cache_bytes: u64,
        memtable_bytes: Option<u64>,
    ) -> Result<Self> {
        Self::open_with(path, durability, cache_bytes, true, memtable_bytes)
    }

    /// [`open`](Self::open); `zero_fill: false` leaves the journal sparse
    /// (tests that drive a [`Filler`](super::journal_fill::Filler) by hand:
    /// there must never be two fillers for one journal).
    fn open_with(
        path: &Path,
        durability: Durability,
        cache_bytes: u64,
        zero_fill: bool,
        memtable_bytes: Option<u64>,
    ) -> Result<Self> {
        let db = Database::builder(path)
            .cache_size(cache_bytes)
            .manual_journal_persist(true)
            .journal_compression(CompressionType::None)
            .open()?;
        let sized = |o: KeyspaceCreateOptions| match memtable_bytes {
            Some(n) => o.max_memtable_size(n),
            None => o,
        };
        let ks = |name: &str| db.keyspace(name, || sized(KeyspaceCreateOptions::default()));
        let entities = db.keyspace("entities", || sized(entity_keyspace_options()))?;
        let meta = ks("meta")?;
        let stats = ks("stats")?;
        let gate = Arc::new(JournalGate::new(()));
        // Only synced commits wait for fdatasync; buffered ones gain nothing.
        let fill = match durability {
            Durability::Sync if zero_fill => JournalFill::start(path, Arc::clone(&gate))
                .inspect_err(|e| tracing::warn!("journal zero-fill not started: {e}"))
                .ok(),
            _ => None,
        };
        Ok(FjallEngine {
            dir: path.to_path_buf(),
            fill,
            gate,
            db,
            entities,
            meta,
            stats,
            durability,
            written: AtomicU64::new(0),
            sync: Mutex::new(SyncState::default()),
            sync_done: Condvar::new(),
            journal: Mutex::new(JournalFile {
                dir: path.to_path_buf(),
                current: None,
            }),
        })
    }

    fn keyspace(&self, space: Space) -> &Keyspace {
        match space {
            Space::Entities => &self.entities,
            Space::Meta => &self.meta,
            Space::Stats => &self.stats,
        }
    }

    /// Group commit: returns once the journal is on disk at least up to
    /// batch `ticket`. One writer at a time leads (fsyncs for every batch
    /// written so far); the others wait for it and return if it covered
    /// them, or lead the next sync.
    fn sync_through(&self, ticket: u64) -> Result<()> {
        let mut state = self.sync.lock();
        loop {
            if state.failed {
                return Err(StoreError::WritesStopped {
                    cause: "an earlier journal fsync failed".into(),
                    disk_full: false,
                });
            }
            if state.synced >= ticket {
                return Ok(());
            }
            if !state.syncing {
                break;
            }
            self.sync_done.wait(&mut state);
        }
        state.syncing = true;
        drop(state);
        // Every ticket up to `upto` was handed to the OS before its number
        // was taken, so the fsync we start now covers them all.
        let upto = self.written.load(Ordering::Acquire);
        let synced = self.sync_journal();
        let mut state = self.sync.lock();
        state.syncing = false;
        match synced {
            Ok(()) => state.synced = state.synced.max(upto),
            Err(_) => state.failed = true,
        }
        drop(state);
        self.sync_done.notify_all();
        if let Some(fill) = &self.fill {
            fill.nudge();
        }
        synced
    }

    /// A background flush or compaction that failed while the disk is
    /// (nearly) full failed for want of space: say so, as a journal write
    /// that fails with ENOSPC does (53100, not a disk error).
    fn full_disk_if_so(&self, e: StoreError) -> StoreError {
        let StoreError::WritesStopped {
            cause,
            disk_full: false,
        } = &e
        else {
            return e;
        };
        if !cause.contains("background write") {
            return e;
        }
        match rustix::fs::statvfs(&self.dir) {
            Ok(s) if s.f_bavail.saturating_mul(s.f_frsize) < LOW_SPACE_BYTES => {
                StoreError::WritesStopped {
                    cause: format!(
                        "No space left on device: a background flush or compaction could not write ({} bytes free in {})",
                        s.f_bavail.saturating_mul(s.f_frsize),
                        self.dir.display()
                    ),
                    disk_full: true,
                }
            }
            _ => e,
        }
    }

    fn sync_journal(&self) -> Result<()> {
        let mut journal = self.journal.lock();
        match journal.sync() {
            Ok(true) => Ok(()),
            Ok(false) => self
                .db
                .persist(PersistMode::SyncData)
                .map_err(|e| write_failure("journal fsync", e)),
            Err(e) => Err(super::health::write_failure("journal fsync", &e)),
        }
    }
}

impl Engine for FjallEngine {
    // Every read goes through a snapshot: `Keyspace::get` and `range` read
    // each key's newest version, including those of a batch still being
    // inserted (its items go into the memtable one by one before its
    // sequence number is published), so a read could see part of a batch,
    // and a scan the later keys of one committed while it ran.
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.db.snapshot().get(self.keyspace(space), key)?)
    }

    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        let iter = self.db.snapshot().range(self.keyspace(space), (start, end));
        Box::new(iter.map(|guard| {
            let (k, v) = guard.into_inner()?;
            Ok((k, v))
        }))
    }

    fn last_in(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<Option<(Bytes, Bytes)>> {
        match self
            .db
            .snapshot()
            .range(self.keyspace(space), (start, end))
            .next_back()
        {
            Some(guard) => Ok(Some(guard.into_inner()?)),
            None => Ok(None),
        }
    }

    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        let mut wb = self.db.batch().durability(Some(PersistMode::Buffer));
        for m in batch {
            match m {
                Mutation::Put { space, key, value } => wb.insert(self.keyspace(space), key, value),
                Mutation::Delete { space, key } => wb.remove(self.keyspace(space), key),
            }
        }
        {
            let _shared = self.gate.read();
            wb.commit()
                .map_err(|e| self.full_disk_if_so(write_failure("journal write", e)))?;
        }
        let ticket = self.written.fetch_add(1, Ordering::AcqRel) + 1;
        match self.durability {
            Durability::Sync if !crate::api::sync_deferred_here() => self.sync_through(ticket),
            _ => Ok(()),
        }
    }

    fn sync(&self) -> Result<()> {
        match self.durability {
            Durability::Sync => self
                .sync_through(self.written.load(Ordering::Acquire))
                .map_err(|e| self.full_disk_if_so(e)),
            Durability::Buffered => Ok(()),
        }
    }

    fn disk_space(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fjall answers `Poisoned` after a background flush fails; the health
    /// layer latches only `WritesStopped`, so the mapping is what makes
    /// such a failure visible in `tablegate.health`.
    #[test]
    fn a_poisoned_engine_is_a_stopped_engine() {
        let e = StoreError::from(fjall::Error::Poisoned);
        assert!(
            matches!(&e, StoreError::WritesStopped { disk_full: false, cause } if cause.contains("background write")),
            "{e:?}"
        );
    }

    fn put(i: u32) -> Mutation {
        Mutation::Put {
            space: Space::Entities,
            key: format!("k{i:06}").into_bytes(),
            value: i.to_be_bytes().to_vec(),
        }
    }

    /// Inside a deferral a batch is applied (readable) without its fsync;
    /// `sync` then covers every batch written so far, and outside a
    /// deferral each batch waits for its own as before.
    #[test]
    fn deferred_batches_wait_for_one_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = FjallEngine::open(dir.path(), Durability::Sync, 1 << 20).expect("open");
        let synced = || engine.sync.lock().synced;
        crate::api::with_deferral(true, || {
            for i in 0..10 {
                engine.apply(vec![put(i)]).expect("write");
            }
        });
        assert_eq!(synced(), 0, "no batch of the deferral waited for an fsync");
        assert!(
            engine
                .get(Space::Entities, b"k000009")
                .expect("read")
                .is_some()
        );
        engine.sync().expect("sync");
        assert_eq!(synced(), 10);
        engine.apply(vec![put(10)]).expect("write");
        assert_eq!(synced(), 11, "outside a deferral a batch syncs");
        crate::api::with_deferral(true, || engine.apply(vec![put(11)])).expect("write");
        assert_eq!(synced(), 11);
        // The flag does not outlive its scope.
        assert!(!crate::api::sync_deferred_here());
    }

    /// The group commit's coupling to fjall: the database keeps its active
    /// journal as `<id>.jnl` in its folder. If an fjall upgrade moves it,
    /// this fails instead of every sync silently taking the slow path.
    #[test]
    fn fjall_keeps_its_journal_where_the_group_commit_looks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = FjallEngine::open(dir.path(), Durability::Sync, 1 << 20).expect("open");
        engine.apply(vec![put(1)]).expect("write");
        let newest = newest_journal(dir.path()).expect("listed");
        assert!(newest.is_some(), "no <id>.jnl in the database folder");
        let current = engine.journal.lock().current.as_ref().map(|(id, _)| *id);
        assert_eq!(current, newest, "the sync opened the newest journal");
    }

    /// The leader follows rotations (the newest journal wins, gaps are
    /// followed one id at a time) and ignores other files.
    #[test]
    fn journal_file_follows_rotations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut j = JournalFile {
            dir: dir.path().to_path_buf(),
            current: None,
        };
        assert!(!j.sync().expect("empty folder"), "nothing to sync");
        for name in ["3.jnl", "4.jnl", "lock", "x.jnl", "version"] {
            std::fs::write(dir.path().join(name), b"").expect("file");
        }
        assert!(j.sync().expect("synced"));
        assert_eq!(j.current.as_ref().map(|(id, _)| *id), Some(4));
        std::fs::write(dir.path().join("5.jnl"), b"").expect("file");
        std::fs::write(dir.path().join("6.jnl"), b"").expect("file");
        assert!(j.sync().expect("synced"));
        assert_eq!(j.current.as_ref().map(|(id, _)| *id), Some(6));
    }

    /// The journal zero-fill stays ahead of fjall's writer and never
    /// touches a batch: it fills a fresh database's journal past fjall's
    /// position, every batch written in between is there after a reopen,
    /// and a journal fjall reopened for appending is left alone.
    #[test]
    fn zero_fill_runs_ahead_of_the_journal_without_touching_batches() {
        use super::super::journal_fill::{CHUNK, Filler, LOOKAHEAD};
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let value = |i: u32| vec![u8::try_from(i % 251).expect("byte"); 8 * 1024];
        let n = 800u32; // ~6.4 MiB of journal: crosses several chunks
        let journal_bytes = |id: u64| {
            let m = std::fs::metadata(dir.path().join(format!("{id}.jnl"))).expect("journal");
            (m.len(), m.blocks() * 512)
        };
        {
            let engine = FjallEngine::open_with(dir.path(), Durability::Sync, 1 << 20, false, None)
                .expect("open");
            let id = newest_journal(dir.path())
                .expect("listed")
                .expect("a journal");
            let (len, allocated_before) = journal_bytes(id);
            let mut filler = Filler::new(dir.path(), Arc::clone(&engine.gate));
            let mut filled = 0;
            for i in 0..n {
                engine
                    .apply(vec![Mutation::Put {
                        space: Space::Entities,
                        key: format!("k{i:06}").into_bytes(),
                        value: value(i),
                    }])
                    .expect("write");
                if i % 50 == 0 {
                    filler.step();
                    filled = filler.zeroed_to().expect("a fresh journal is filled");
                }
            }
            let (_, allocated) = journal_bytes(id);
            assert!(
                filled >= LOOKAHEAD.min(len) && filled <= len,
                "filled to {filled} (journal length {len})"
            );
            assert!(
                allocated >= allocated_before + CHUNK && allocated >= filled,
                "blocks written ahead: {allocated} bytes allocated, filled to {filled}"
            );
        }
        let engine = FjallEngine::open_with(dir.path(), Durability::Sync, 1 << 20, false, None)
            .expect("reopen");
        for i in 0..n {
            let got = engine.get(Space::Entities, format!("k{i:06}").as_bytes());
            let got = got.expect("read").map(|v| v.to_vec());
            assert!(got == Some(value(i)), "key {i} lost or changed");
        }
        // fjall reopened the journal in append mode: its writes would land
        // after any zeros, so the fill keeps out.
        let mut filler = Filler::new(dir.path(), Arc::clone(&engine.gate));
        filler.step();
        assert_eq!(filler.zeroed_to(), None);
    }

    /// Many writers share fsyncs: every write returns, and every
    /// acknowledged write is there after a reopen.
    #[test]
    fn concurrent_synced_writers_all_land() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (threads, per) = (8u32, 50u32);
        {
            let engine = FjallEngine::open(dir.path(), Durability::Sync, 1 << 20).expect("open");
            std::thread::scope(|s| {
                for t in 0..threads {
                    let engine = &engine;
                    s.spawn(move || {
                        for i in 0..per {
                            engine.apply(vec![put(t * per + i)]).expect("write");
                        }
                    });
                }
            });
            assert_eq!(engine.sync.lock().synced, u64::from(threads * per));
        }
        let engine = FjallEngine::open(dir.path(), Durability::Sync, 1 << 20).expect("reopen");
        for i in 0..threads * per {
            let got = engine.get(Space::Entities, format!("k{i:06}").as_bytes());
            assert_eq!(
                got.expect("read").map(|v| v.to_vec()),
                Some(i.to_be_bytes().to_vec()),
                "key {i}"
            );
        }
    }
}
