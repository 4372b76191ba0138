//! The store's public boundary: an async, page-based trait.
//!
//! Everything above the store (catalog, planner, gateway) talks to a
//! `dyn TableStore`. Implementations: [`LocalStore`] (the embedded engine),
//! the partition layer wrapping it, and the Azure Table backend
//! (`tablegate-azure`, over REST). Nothing in the trait mentions the engine.

use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;

use crate::entity::Entity;
use crate::error::Result;
use crate::local::LocalStore;
use crate::ops::{OpOutcome, Operation};
use crate::query::{Page, PageRequest, Query};

/// A table as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// Name with its original case.
    pub name: String,
}

/// Cheap, always-current table counts for the planner's estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Entities in the table.
    pub entities: u64,
    /// Distinct PartitionKeys with at least one entity.
    pub partitions: u64,
    /// Bytes the entities take, keys and values as the store encodes them
    /// ([`crate::stored_len`]); `None` where the store does not count them
    /// (a data directory written before it did).
    pub bytes: Option<u64>,
}

/// What a scan would read, estimated from statistics and bounded probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanEstimate {
    /// Entities the scan would read (scanned, not returned).
    pub scanned: u64,
    /// PartitionKeys it would touch.
    pub partitions: u64,
    /// Entities in the largest partition it touches.
    pub largest_partition: u64,
    /// Entities it would read from the one partition it reads most from
    /// (what the per-partition target bounds).
    pub largest_scanned: u64,
}

/// Entity count of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// The PartitionKey.
    pub partition_key: String,
    /// Entities in it.
    pub entities: u64,
}

/// A partitioned table store with Azure Table semantics.
#[async_trait]
pub trait TableStore: Send + Sync + std::fmt::Debug {
    /// Creates a table; names are unique case-insensitively.
    async fn create_table(&self, name: &str) -> Result<TableInfo>;
    /// Drops a table and its data.
    async fn drop_table(&self, name: &str) -> Result<()>;
    /// Every table.
    async fn list_tables(&self) -> Result<Vec<TableInfo>>;
    /// Point read.
    async fn get(&self, table: &str, partition_key: &str, row_key: &str) -> Result<Option<Entity>>;
    /// One page of a query.
    async fn query(&self, table: &str, query: &Query, page: &PageRequest) -> Result<Page>;
    /// An entity-group transaction (a single write is a batch of one).
    /// Shared, not owned: a caller that retries a throttled batch sends the
    /// same operations again, and copying every entity's properties for
    /// the first attempt showed in a 100-row INSERT's server CPU.
    async fn execute(&self, table: &str, ops: Arc<[Operation]>) -> Result<Vec<OpOutcome>>;
    /// Table counts.
    async fn table_stats(&self, table: &str) -> Result<TableStats>;
    /// Partition counts for PartitionKeys within bounds, at most `limit`.
    async fn partition_stats(
        &self,
        table: &str,
        lo: Bound<String>,
        hi: Bound<String>,
        limit: usize,
    ) -> Result<Vec<PartitionStats>>;
    /// Makes every write acknowledged so far durable: the end of a
    /// [`deferring_sync`] scope. A store whose every write is durable when
    /// it returns (a remote service) has nothing to do.
    async fn sync(&self) -> Result<()> {
        Ok(())
    }
}

tokio::task_local! {
    /// Set inside [`deferring_sync`].
    static DEFER_SYNC: bool;
}

thread_local! {
    /// [`DEFER_SYNC`] of the task whose write runs on this thread.
    static DEFERRED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the store's writes applied without waiting for their
/// fsync: the caller calls [`TableStore::sync`] before it acknowledges any
/// of them (and before it reports any as applied). A bulk load of many
/// entity-group transactions (COPY) then waits for one fsync per flush,
/// not one per transaction. Its writes are visible to other sessions
/// before that sync, as a batch already is for the length of its own.
pub async fn deferring_sync<F: std::future::Future>(f: F) -> F::Output {
    DEFER_SYNC.scope(true, f).await
}

/// Whether the write running on this thread may skip its fsync (see
/// [`deferring_sync`]).
pub(crate) fn sync_deferred_here() -> bool {
    DEFERRED_HERE.with(std::cell::Cell::get)
}

/// Runs `f` with [`sync_deferred_here`] answering `defer`.
pub(crate) fn with_deferral<T>(defer: bool, f: impl FnOnce() -> T) -> T {
    with_flag(&DEFERRED_HERE, defer, f)
}

/// Runs `f` with the thread-local `flag` set to `value`, then puts back
/// what it was (also when `f` panics).
fn with_flag<T>(
    flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    value: bool,
    f: impl FnOnce() -> T,
) -> T {
    struct Reset(&'static std::thread::LocalKey<std::cell::Cell<bool>>, bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            self.0.with(|d| d.set(self.1));
        }
    }
    let _reset = Reset(flag, flag.with(|d| d.replace(value)));
    f()
}

tokio::task_local! {
    /// The statement the current task runs (see [`statement_scope`]).
    static STATEMENT: u64;
}

/// Runs `f` as the statement tagged `tag` (non-zero): the partition
/// layer's key visualizer counts the traffic `f` causes against it, so a
/// hot key can be traced to the statements that made it hot. Work `f`
/// hands to the store's blocking pool or its scan tasks keeps the tag;
/// tasks spawned outside the store (the analytics engine's) do not.
pub async fn statement_scope<F: std::future::Future>(tag: u64, f: F) -> F::Output {
    STATEMENT.scope(tag, f).await
}

/// [`statement_scope`] for synchronous work (on the blocking pool).
pub fn in_statement<R>(tag: u64, f: impl FnOnce() -> R) -> R {
    STATEMENT.sync_scope(tag, f)
}

/// The tag of the statement running here, 0 outside one.
pub fn statement_tag() -> u64 {
    STATEMENT.try_with(|t| *t).unwrap_or(0)
}

/// Runs blocking store work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let tag = statement_tag();
    tokio::task::spawn_blocking(move || in_statement(tag, f))
        .await
        .unwrap_or_else(|e| Err(crate::StoreError::Engine(format!("store task failed: {e}"))))
}

thread_local! {
    /// Whether this thread serves one client and nothing else (see
    /// [`write_on_this_thread`]).
    static WRITES_INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that serves a single client and runs
/// nothing else (the gateway's thread per connection): the store's writes
/// called from it then run on it, waiting out the group commit there, as a
/// PostgreSQL backend waits for its commit. Elsewhere a write goes to the
/// blocking pool and back, two more thread wake-ups per statement; on a
/// thread of a shared runtime, blocking would stall every task on it.
///
/// Deliberately only writes: their work is bounded by the batch limits and
/// their wait is one fsync. A scan page may take up to its time budget, and
/// it stays on the pool so that a cancel or statement_timeout is answered
/// while it runs.
pub fn write_on_this_thread() {
    WRITES_INLINE.with(|w| w.set(true));
}

/// [`write_on_this_thread`] for the length of `f` only: for a thread of a
/// blocking pool that serves one client's work while `f` runs (a COPY's
/// flush) and other work afterwards.
pub fn writing_on_this_thread<T>(f: impl FnOnce() -> T) -> T {
    with_flag(&WRITES_INLINE, true, f)
}

/// Runs a write: on this thread if [`write_on_this_thread`] marked it,
/// otherwise on the blocking pool.
pub(crate) async fn blocking_write<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let defer = DEFER_SYNC.try_with(|d| *d).unwrap_or(false);
    if WRITES_INLINE.with(std::cell::Cell::get) {
        // One turn back to the runtime first: a statement whose write takes
        // several calls (entity-group transactions) still sees a cancel or
        // its statement_timeout between them, as it did from the pool.
        tokio::task::yield_now().await;
        with_deferral(defer, f)
    } else {
        blocking(move || with_deferral(defer, f)).await
    }
}

/// Implements [`TableStore`] for a store whose work is synchronous
/// (`*_blocking` methods): scans, writes and DDL run on the blocking pool,
/// point reads, statistics and pages bounded by their size inline (they are
/// short, and a thread hand-off would cost more than the read), and writes
/// too on a thread marked by [`write_on_this_thread`].
macro_rules! table_store_over_blocking {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl $crate::api::TableStore for $ty {
            async fn create_table(&self, name: &str) -> $crate::Result<$crate::TableInfo> {
                let (s, name) = (self.clone(), name.to_owned());
                $crate::api::blocking(move || s.create_table_blocking(&name)).await
            }

            async fn drop_table(&self, name: &str) -> $crate::Result<()> {
                let (s, name) = (self.clone(), name.to_owned());
                $crate::api::blocking(move || s.drop_table_blocking(&name)).await
            }

            async fn list_tables(&self) -> $crate::Result<Vec<$crate::TableInfo>> {
                Ok(self.list_tables_blocking())
            }

            async fn get(
                &self,
                table: &str,
                partition_key: &str,
                row_key: &str,
            ) -> $crate::Result<Option<$crate::Entity>> {
                self.get_blocking(table, partition_key, row_key)
            }

            async fn query(
                &self,
                table: &str,
                query: &$crate::Query,
                page: &$crate::PageRequest,
            ) -> $crate::Result<$crate::Page> {
                // A page whose work its size bounds (a RowKey range, a whole
                // partition without a filter) costs less than the hand-off to
                // the blocking pool and back; anything that may scan far for
                // few results goes there.
                if query.bounded_by_page() {
                    return self.query_blocking(table, query, page);
                }
                let (s, t, q, p) = (self.clone(), table.to_owned(), query.clone(), page.clone());
                $crate::api::blocking(move || s.query_blocking(&t, &q, &p)).await
            }

            async fn execute(
                &self,
                table: &str,
                ops: std::sync::Arc<[$crate::Operation]>,
            ) -> $crate::Result<Vec<$crate::OpOutcome>> {
                let (s, t) = (self.clone(), table.to_owned());
                $crate::api::blocking_write(move || s.execute_blocking(&t, &ops)).await
            }

            async fn table_stats(&self, table: &str) -> $crate::Result<$crate::TableStats> {
                self.table_stats_blocking(table)
            }

            async fn sync(&self) -> $crate::Result<()> {
                let s = self.clone();
                $crate::api::blocking_write(move || s.sync_blocking()).await
            }

            async fn partition_stats(
                &self,
                table: &str,
                lo: std::ops::Bound<String>,
                hi: std::ops::Bound<String>,
                limit: usize,
            ) -> $crate::Result<Vec<$crate::PartitionStats>> {
                let (s, t) = (self.clone(), table.to_owned());
                $crate::api::blocking(move || {
                    s.partition_stats_blocking(
                        &t,
                        lo.as_ref().map(String::as_str),
                        hi.as_ref().map(String::as_str),
                        limit,
                    )
                })
                .await
            }
        }
    };
}
pub(crate) use table_store_over_blocking;

table_store_over_blocking!(LocalStore);

#[cfg(test)]
mod tests {
    use super::*;

    fn ran_on(marked: bool) -> (std::thread::ThreadId, std::thread::ThreadId) {
        std::thread::spawn(move || {
            if marked {
                write_on_this_thread();
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            let ran = runtime
                .block_on(blocking_write(|| Ok(std::thread::current().id())))
                .expect("write");
            (std::thread::current().id(), ran)
        })
        .join()
        .expect("thread")
    }

    /// A write runs on the caller's thread only where the caller asked for
    /// it (the gateway's connection threads); anywhere else it must not
    /// block the runtime's thread.
    #[test]
    fn writes_run_inline_only_on_a_marked_thread() {
        let (caller, ran) = ran_on(true);
        assert_eq!(caller, ran, "a marked thread runs its writes");
        let (caller, ran) = ran_on(false);
        assert_ne!(caller, ran, "an unmarked thread hands them to the pool");
    }
}
