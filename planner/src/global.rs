//! Global secondary indexes at run time (`CREATE INDEX … GLOBAL`, the
//! seeds' Index Table pattern): the maintainer that carries queued changes
//! into the index tables, the build, and the lookups that read them.
//!
//! **The queue.** A write to a table with a global index leaves, in the
//! same entity-group transaction, a queue entry next to each row it
//! changes ([`layout::queue_key`]), so the change and the promise to index
//! it are atomic; after the commit it tells this gateway's [`Maintainer`]
//! which partitions have work ([`Maintainer::enqueue`]).
//!
//! **The maintainer** (one task per gateway) takes one partition at a
//! time, oldest first, and for each queue entry: reads the row, compares
//! the forward entry the row calls for with the one its reverse entry
//! names, deletes the old forward entry, writes the new one, updates the
//! reverse entry, then deletes the queue entry If-Match the ETag it read (a
//! write meanwhile left a newer one, done next round). Each step is
//! idempotent and they run in an order that a crash at any point leaves
//! for the next run to finish: on start, the maintainer scans every table
//! with a global index for queue entries ([`Maintainer::run`]).
//!
//! **Staleness.** A read through a global index first waits until this
//! gateway has applied every change acknowledged before the read began
//! ([`Maintainer::caught_up`], at most [`CATCH_UP_WAIT`]; past it the
//! query scans instead), and every row an entry names is read and tested
//! against the whole filter again, so an entry of a row changed since
//! never returns a wrong row. Writes through another gateway sharing the
//! store reach the index when that gateway's maintainer applies them: the
//! `pending` and `lag` of `tablegate.indexes` show how far behind it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tablegate_catalog::index::{
    self as layout, BASE_PK_PROPERTY, BASE_PROPERTY, FORWARD_PK_PROPERTY, FORWARD_RK_PROPERTY,
    QUEUE_ROW_PREFIX,
};
use tablegate_catalog::{Catalog, IndexDef, QueueListener, TableDef};
use tablegate_store::retry::{RetryStats, with_retry};
use tablegate_store::{
    Entity, EntityWrite, IfMatch, KeyBox, KeyInterval, Operation, PageRequest, Query, RetryPolicy,
    StoreError, TableStore, Value, limits,
};

use crate::error::Result;

/// How long a read through a global index waits for this gateway's
/// pending changes before it scans the table instead.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// Partitions waiting for the maintainer, and what readers wait for.
#[derive(Debug, Default)]
struct State {
    /// Bumped by every [`Maintainer::enqueue`].
    seq: u64,
    /// Waiting partitions in turn: (turn, table, PartitionKey). A partition
    /// that failed goes to the back, so it cannot hold up the others.
    order: BTreeSet<(u64, String, String)>,
    /// Bumped for each place in [`State::order`].
    turn: u64,
    /// (table, PartitionKey) → (seq, since, turn) of each waiting
    /// partition: readers wait by seq, the maintainer goes by turn.
    waiting: HashMap<(String, String), (u64, Instant, u64)>,
    /// The partition being applied: (seq, table, PartitionKey, since).
    running: Option<(u64, String, String, Instant)>,
    /// Per table, the seqs of its waiting and running partitions (a
    /// multiset: one enqueue may name several partitions).
    by_table: HashMap<String, BTreeMap<u64, usize>>,
    /// The start-up scan for queue entries left by an earlier run is done.
    recovered: bool,
    /// Rows applied, per table.
    applied: HashMap<String, u64>,
}

impl State {
    fn count(&mut self, table: &str, seq: u64, add: bool) {
        let seqs = self.by_table.entry(table.to_owned()).or_default();
        let n = seqs.entry(seq).or_default();
        if add {
            *n += 1;
        } else {
            *n -= 1;
            if *n == 0 {
                seqs.remove(&seq);
            }
        }
    }

    /// Adds a waiting partition at the back, keeping the older of two
    /// seqs (and its place, if it was waiting already).
    fn wait(&mut self, table: &str, pk: &str, seq: u64, since: Instant) {
        let key = (table.to_owned(), pk.to_owned());
        if let Some(&(s, t, turn)) = self.waiting.get(&key) {
            if s <= seq {
                return;
            }
            self.count(table, s, false);
            self.count(table, seq, true);
            self.waiting.insert(key, (seq, since.min(t), turn));
            return;
        }
        self.turn += 1;
        let turn = self.turn;
        self.waiting.insert(key.clone(), (seq, since, turn));
        self.order.insert((turn, key.0, key.1));
        self.count(table, seq, true);
    }
}

/// The changes of global indexes still to apply on this gateway, and the
/// task that applies them.
#[derive(Debug)]
pub struct Maintainer {
    state: parking_lot::Mutex<State>,
    wake: tokio::sync::Notify,
    /// Bumped whenever a partition is done (readers re-check).
    done: tokio::sync::watch::Sender<u64>,
}

/// How far behind one table's global indexes are on this gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lag {
    /// Partitions with queue entries not yet applied.
    pub partitions: u64,
    /// Since when the oldest of them has waited.
    pub oldest: Option<Duration>,
    /// Rows applied since the gateway started.
    pub applied: u64,
}

impl Maintainer {
    /// A maintainer for `catalog`'s tables, its task started: it scans for
    /// queue entries left by an earlier run, then applies what writes
    /// enqueue until the catalog is dropped.
    pub fn start(catalog: &Arc<Catalog>) -> Arc<Maintainer> {
        let m = Arc::new(Maintainer {
            state: parking_lot::Mutex::default(),
            wake: tokio::sync::Notify::new(),
            done: tokio::sync::watch::Sender::new(0),
        });
        let weak = Arc::downgrade(&m);
        catalog.on_queued(QueueListener(Arc::new(move |table, pks| {
            if let Some(m) = weak.upgrade() {
                m.enqueue(table, pks);
            }
        })));
        tokio::spawn(run(Arc::downgrade(&m), Arc::downgrade(catalog)));
        m
    }

    /// Partitions `pks` of `table` hold queue entries to apply.
    pub fn enqueue(&self, table: &str, pks: &[String]) {
        if pks.is_empty() {
            return;
        }
        let table = table.to_ascii_lowercase();
        let mut s = self.state.lock();
        s.seq += 1;
        let (seq, now) = (s.seq, Instant::now());
        for pk in pks {
            s.wait(&table, pk, seq, now);
        }
        drop(s);
        self.wake.notify_one();
    }

    /// Waits until every change of `table` enqueued before now is applied
    /// (and the start-up scan is done), at most `wait`; whether it was.
    pub async fn caught_up(&self, table: &str, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.done.subscribe();
        let target = self.state.lock().seq;
        loop {
            if self.clear(table, target) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.clear(table, target),
            }
        }
    }

    fn clear(&self, table: &str, target: u64) -> bool {
        let s = self.state.lock();
        let lower = table.to_ascii_lowercase();
        s.recovered
            && s.by_table
                .get(&lower)
                .and_then(|m| m.keys().next())
                .is_none_or(|&oldest| oldest > target)
    }

    /// How far behind `table`'s global indexes are here.
    pub fn lag(&self, table: &str) -> Lag {
        let s = self.state.lock();
        let lower = table.to_ascii_lowercase();
        let mut lag = Lag {
            applied: s.applied.get(&lower).copied().unwrap_or(0),
            ..Lag::default()
        };
        let mut oldest: Option<Instant> = None;
        for ((t, _), (_, since, _)) in &s.waiting {
            if *t == lower {
                lag.partitions += 1;
                oldest = Some(oldest.map_or(*since, |o| o.min(*since)));
            }
        }
        if let Some((_, t, _, since)) = &s.running
            && *t == lower
        {
            lag.partitions += 1;
            oldest = Some(oldest.map_or(*since, |o| o.min(*since)));
        }
        lag.oldest = oldest.map(|o| o.elapsed());
        lag
    }

    fn take(&self) -> Option<(u64, String, String, Instant)> {
        let mut s = self.state.lock();
        let (_, table, pk) = s.order.pop_first()?;
        let (seq, since, _) = s
            .waiting
            .remove(&(table.clone(), pk.clone()))
            .expect("waiting and order agree");
        s.running = Some((seq, table.clone(), pk.clone(), since));
        Some((seq, table, pk, since))
    }

    fn finish(&self, rows: Option<u64>) {
        let mut s = self.state.lock();
        if let Some((seq, table, pk, since)) = s.running.take() {
            s.count(&table, seq, false);
            match rows {
                Some(n) => *s.applied.entry(table).or_default() += n,
                // Failed: waits again, as old as it was.
                None => s.wait(&table, &pk, seq, since),
            }
        }
        drop(s);
        self.done.send_modify(|n| *n += 1);
    }
}

/// The maintainer's task. It holds the catalog (and through it the store)
/// only while it works: a planner dropped lets its store close (the demo
/// reopens the data directory it loaded).
async fn run(m: Weak<Maintainer>, catalog: Weak<Catalog>) {
    let retry = RetryPolicy::default();
    // Queue entries left by an earlier run (a crash before they were
    // applied): seq 0, so every reader waits for them.
    loop {
        let Some(c) = catalog.upgrade() else { return };
        let found = recover(&c, &retry).await;
        drop(c);
        match found {
            Ok(found) => {
                let Some(m) = m.upgrade() else { return };
                let mut s = m.state.lock();
                let now = Instant::now();
                for (table, pk) in found {
                    s.wait(&table, &pk, 0, now);
                }
                s.recovered = true;
                drop(s);
                m.done.send_modify(|n| *n += 1);
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot scan for global index queue entries; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    loop {
        let Some(m) = m.upgrade() else { return };
        let Some((_, table, pk, _)) = m.take() else {
            // Woken by an enqueue, or now and then to see whether the
            // planner is gone.
            let _ = tokio::time::timeout(Duration::from_secs(1), m.wake.notified()).await;
            continue;
        };
        let Some(c) = catalog.upgrade() else { return };
        let applied = apply_partition(&c, &**c.data(), &table, &pk, &retry).await;
        drop(c);
        match applied {
            Ok(n) => m.finish(Some(n)),
            Err(e) => {
                tracing::warn!(table, partition = pk, error = %e, "cannot apply global index changes; trying again");
                m.finish(None);
                drop(m);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The partitions of every table with a global index that hold queue
/// entries.
async fn recover(catalog: &Catalog, retry: &RetryPolicy) -> Result<Vec<(String, String)>> {
    let store = &**catalog.data();
    let mut found = Vec::new();
    for t in catalog.tables() {
        if !t.indexes.iter().any(|i| i.global) {
            continue;
        }
        let pks = queued_partitions(store, &t.name, retry).await?;
        found.extend(pks.into_iter().map(|pk| (t.name.to_ascii_lowercase(), pk)));
    }
    Ok(found)
}

/// The PartitionKeys of `table` that hold queue entries.
pub async fn queued_partitions(
    store: &dyn TableStore,
    table: &str,
    retry: &RetryPolicy,
) -> Result<BTreeSet<String>> {
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk: layout::queue_entries(),
    }])
    .with_projection(Vec::new());
    let mut pks = BTreeSet::new();
    let mut req = PageRequest::default();
    loop {
        let mut stats = RetryStats::default();
        let page = match with_retry(retry, &mut stats, || store.query(table, &q, &req)).await {
            Ok(p) => p,
            Err(StoreError::TableNotFound { .. }) => return Ok(pks),
            Err(e) => return Err(e.into()),
        };
        pks.extend(page.entities.into_iter().map(|e| e.partition_key));
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return Ok(pks),
        }
    }
}

/// Applies the queue entries of partition `pk` of `table`; the rows done.
async fn apply_partition(
    catalog: &Catalog,
    store: &dyn TableStore,
    table: &str,
    pk: &str,
    retry: &RetryPolicy,
) -> Result<u64> {
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::point(pk),
        rk: layout::queue_entries(),
    }])
    .with_projection(Vec::new());
    let mut req = PageRequest::default();
    let mut rows = 0;
    loop {
        // The definition as of now: an index created or dropped meanwhile.
        let Ok(def) = catalog.table(table) else {
            return Ok(rows);
        };
        let mut stats = RetryStats::default();
        let page = match with_retry(retry, &mut stats, || store.query(&def.name, &q, &req)).await {
            Ok(p) => p,
            Err(StoreError::TableNotFound { .. }) => return Ok(rows),
            Err(e) => return Err(e.into()),
        };
        let mut done = Vec::with_capacity(page.entities.len());
        for entry in &page.entities {
            let base_rk = &entry.row_key[QUEUE_ROW_PREFIX.len()..];
            let mut row =
                with_retry(retry, &mut stats, || store.get(&def.name, pk, base_rk)).await?;
            // Another gateway's maintainer may apply the same row with an
            // older state of it meanwhile: what was applied stands only if
            // the row did not change while it was applied.
            let mut tries = 0;
            loop {
                for ix in def.indexes.iter().filter(|i| i.global) {
                    apply_row(store, &def, ix, pk, base_rk, row.as_ref(), retry).await?;
                }
                let now =
                    with_retry(retry, &mut stats, || store.get(&def.name, pk, base_rk)).await?;
                if now.as_ref().map(Entity::etag) == row.as_ref().map(Entity::etag) {
                    break;
                }
                tries += 1;
                if tries >= 8 {
                    return Err(crate::PlanError::CommitConflict {
                        detail: format!(
                            "row ('{pk}', '{base_rk}') of \"{}\" kept changing while its global index entries were applied",
                            def.name
                        ),
                    });
                }
                row = now;
            }
            done.push(Operation::Delete {
                partition_key: pk.to_owned(),
                row_key: entry.row_key.clone(),
                if_match: IfMatch::ETag(entry.etag()),
            });
            rows += 1;
        }
        delete_queue_entries(store, &def.name, done, retry).await?;
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return Ok(rows),
        }
    }
}

/// Deletes applied queue entries, each If-Match the ETag that was read: a
/// write since left a newer entry, which stays for the next round.
async fn delete_queue_entries(
    store: &dyn TableStore,
    table: &str,
    ops: Vec<Operation>,
    retry: &RetryPolicy,
) -> Result<()> {
    let mut stats = RetryStats::default();
    for chunk in ops.chunks(limits::MAX_BATCH_OPERATIONS) {
        let chunk: Arc<[Operation]> = chunk.to_vec().into();
        match with_retry(retry, &mut stats, || store.execute(table, chunk.clone())).await {
            Ok(_) => {}
            Err(e) if changed(&e) => {
                for op in chunk.iter() {
                    let one: Arc<[Operation]> = vec![op.clone()].into();
                    match with_retry(retry, &mut stats, || store.execute(table, one.clone())).await
                    {
                        Ok(_) => {}
                        Err(e) if changed(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The entity changed or went away since it was read.
fn changed(e: &StoreError) -> bool {
    matches!(
        e.root(),
        StoreError::ETagMismatch { .. } | StoreError::EntityNotFound { .. }
    )
}

/// Brings index `ix`'s entries for base row (`pk`, `base_rk`) in line with
/// `row`, its state now. The order (old forward entry out, new one in,
/// then the reverse entry) leaves nothing a second run cannot finish.
async fn apply_row(
    store: &dyn TableStore,
    def: &TableDef,
    ix: &IndexDef,
    pk: &str,
    base_rk: &str,
    row: Option<&Entity>,
    retry: &RetryPolicy,
) -> Result<()> {
    let hidden = ix.global_table(&def.name);
    let want = match row {
        Some(r) => match ix.global_entry(def, &r.properties, pk, base_rk) {
            Ok(k) => Some(k),
            // The write refused such a row; one written before the index
            // existed fails its build instead.
            Err(e) => {
                tracing::warn!(index = ix.name, error = %e, "row without a global index entry");
                None
            }
        },
        None => None,
    };
    let (rev_pk, rev_rk) = layout::reverse_key(pk, base_rk);
    let mut stats = RetryStats::default();
    let reverse = match with_retry(retry, &mut stats, || store.get(&hidden, &rev_pk, &rev_rk)).await
    {
        Ok(r) => r,
        // Not created yet (CREATE INDEX records the index first, then
        // creates its table and queues every row itself), or dropped.
        Err(StoreError::TableNotFound { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let has = reverse.as_ref().and_then(|r| {
        match (
            r.properties.get(FORWARD_PK_PROPERTY),
            r.properties.get(FORWARD_RK_PROPERTY),
        ) {
            (Some(Value::String(a)), Some(Value::String(b))) => Some((a.clone(), b.clone())),
            _ => None,
        }
    });
    if has == want && reverse.is_some() == want.is_some() {
        return Ok(());
    }
    let one = |op: Operation| -> Arc<[Operation]> { vec![op].into() };
    if let Some((fpk, frk)) = has.as_ref().filter(|h| Some(*h) != want.as_ref()) {
        delete_if_there(store, &hidden, fpk, frk, retry).await?;
    }
    match &want {
        Some((fpk, frk)) => {
            let forward = one(Operation::InsertOrReplace(
                EntityWrite::new(fpk.clone(), frk.clone())
                    .with(BASE_PK_PROPERTY, Value::String(pk.to_owned()))
                    .with(BASE_PROPERTY, Value::String(base_rk.to_owned())),
            ));
            with_retry(retry, &mut stats, || {
                store.execute(&hidden, forward.clone())
            })
            .await?;
            let rev = one(Operation::InsertOrReplace(
                EntityWrite::new(rev_pk.clone(), rev_rk.clone())
                    .with(FORWARD_PK_PROPERTY, Value::String(fpk.clone()))
                    .with(FORWARD_RK_PROPERTY, Value::String(frk.clone())),
            ));
            with_retry(retry, &mut stats, || store.execute(&hidden, rev.clone())).await?;
        }
        None => delete_if_there(store, &hidden, &rev_pk, &rev_rk, retry).await?,
    }
    Ok(())
}

/// Deletes one entity of the index table; one already gone is fine.
async fn delete_if_there(
    store: &dyn TableStore,
    table: &str,
    pk: &str,
    rk: &str,
    retry: &RetryPolicy,
) -> Result<()> {
    let op: Arc<[Operation]> = vec![Operation::Delete {
        partition_key: pk.to_owned(),
        row_key: rk.to_owned(),
        if_match: IfMatch::Any,
    }]
    .into();
    let mut stats = RetryStats::default();
    match with_retry(retry, &mut stats, || store.execute(table, op.clone())).await {
        Ok(_) => Ok(()),
        Err(e) if changed(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The queue entry operation for base row (`pk`, `rk`): an upsert, so a
/// second change before the maintainer comes is one entry (with a new
/// ETag, so the maintainer's delete of the older one fails).
pub fn queue_write(pk: &str, rk: &str) -> Operation {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    Operation::InsertOrReplace(
        EntityWrite::new(pk, layout::queue_key(rk)).with("tg_queued", Value::Int64(now)),
    )
}

/// Puts every row of `table` in the queue (CREATE INDEX … GLOBAL on a
/// table with rows), one partition's entries per transaction, and tells
/// the maintainer; checks each row's entry of `ix` fits the keys.
/// `progress(rows queued)`.
pub async fn enqueue_all(
    store: &dyn TableStore,
    catalog: &Catalog,
    table: &TableDef,
    ix: &IndexDef,
    retry: &RetryPolicy,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<u64> {
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk: layout::user_rows(),
    }])
    .with_projection(ix.columns.clone());
    let mut req = PageRequest::default();
    let mut read = 0u64;
    let mut pending: Vec<Operation> = Vec::new();
    let flush = |pending: Vec<Operation>| async move {
        let Some(pk) = pending.first().map(|o| o.keys().0.to_owned()) else {
            return Ok::<_, crate::PlanError>(());
        };
        let ops: Arc<[Operation]> = pending.into();
        let mut stats = RetryStats::default();
        with_retry(retry, &mut stats, || {
            store.execute(&table.name, ops.clone())
        })
        .await?;
        catalog.queued(&table.name, &[pk]);
        Ok(())
    };
    loop {
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(&table.name, &q, &req)).await?;
        for e in page.entities {
            read += 1;
            ix.global_entry(table, &e.properties, &e.partition_key, &e.row_key)?;
            if pending.first().is_some_and(|f| {
                f.keys().0 != e.partition_key || pending.len() >= limits::MAX_BATCH_OPERATIONS
            }) {
                flush(std::mem::take(&mut pending)).await?;
                progress(read);
            }
            pending.push(queue_write(&e.partition_key, &e.row_key));
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => break,
        }
    }
    flush(pending).await?;
    progress(read);
    Ok(read)
}

/// Reads the forward entries of a global index in `span` of its table:
/// the base rows they name, in key order.
pub async fn probe(
    store: &dyn TableStore,
    table: &TableDef,
    ix: &IndexDef,
    span: &KeyBox,
    retry: &RetryPolicy,
) -> Result<crate::index::Found> {
    let hidden = ix.global_table(&table.name);
    let q = Query::spans(vec![span.clone()])
        .with_projection(vec![BASE_PK_PROPERTY.to_owned(), BASE_PROPERTY.to_owned()]);
    let mut found = crate::index::Found::default();
    let mut req = PageRequest::default();
    loop {
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(&hidden, &q, &req)).await?;
        found.requests += 1;
        for e in page.entities {
            found.entries += 1;
            if let (Some(Value::String(pk)), Some(Value::String(rk))) = (
                e.properties.get(BASE_PK_PROPERTY),
                e.properties.get(BASE_PROPERTY),
            ) {
                found.keys.push((pk.clone(), rk.clone()));
            }
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => break,
        }
    }
    found.keys.sort();
    found.keys.dedup();
    Ok(found)
}

/// Every entity of a store table in `span`.
async fn read_span(
    store: &dyn TableStore,
    table: &str,
    span: KeyBox,
    retry: &RetryPolicy,
) -> Result<Vec<Entity>> {
    let q = Query::spans(vec![span]);
    let mut out = Vec::new();
    let mut req = PageRequest::default();
    loop {
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(table, &q, &req)).await?;
        out.extend(page.entities);
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return Ok(out),
        }
    }
}

/// Compares a global index's table with the entries its rows call for
/// (forward and reverse) and, with `repair`, rewrites it to match. Meant
/// for a table no one writes meanwhile, with no queue entries left; holds
/// the wanted entries in memory.
pub async fn verify(
    store: &dyn TableStore,
    table: &TableDef,
    ix: &IndexDef,
    repair: bool,
    retry: &RetryPolicy,
) -> Result<crate::index::Check> {
    let mut check = crate::index::Check::default();
    let rows = KeyBox {
        pk: KeyInterval::all(),
        rk: layout::user_rows(),
    };
    // (PartitionKey, RowKey) → the properties the entity should have.
    let mut want: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    let mut partitions = BTreeSet::new();
    for e in read_span(store, &table.name, rows.clone(), retry).await? {
        check.rows += 1;
        partitions.insert(e.partition_key.clone());
        let (fpk, frk) = ix.global_entry(table, &e.properties, &e.partition_key, &e.row_key)?;
        let rev = layout::reverse_key(&e.partition_key, &e.row_key);
        want.insert(rev, (fpk.clone(), frk.clone()));
        want.insert((fpk, frk), (e.partition_key, e.row_key));
    }
    check.partitions = partitions.len() as u64;
    let hidden = ix.global_table(&table.name);
    let all = KeyBox {
        pk: KeyInterval::all(),
        rk: KeyInterval::all(),
    };
    let mut ops: Vec<Operation> = Vec::new();
    let mut seen = BTreeSet::new();
    let stored = match read_span(store, &hidden, all, retry).await {
        Ok(v) => v,
        // A build a crash interrupted before it made the table.
        Err(crate::PlanError::Store(StoreError::TableNotFound { .. })) => {
            if repair {
                store.create_table(&hidden).await?;
            }
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    for e in stored {
        check.entries += 1;
        let key = (e.partition_key.clone(), e.row_key.clone());
        let reverse = e.row_key.starts_with(layout::INDEX_ROW_PREFIX);
        let (a, b) = if reverse {
            (FORWARD_PK_PROPERTY, FORWARD_RK_PROPERTY)
        } else {
            (BASE_PK_PROPERTY, BASE_PROPERTY)
        };
        let has = match (e.properties.get(a), e.properties.get(b)) {
            (Some(Value::String(x)), Some(Value::String(y))) => Some((x.clone(), y.clone())),
            _ => None,
        };
        match want.get(&key) {
            Some(w) if has.as_ref() == Some(w) => {
                seen.insert(key);
            }
            Some(_) => {}
            None => {
                check.stale += 1;
                if check.examples.len() < 10 {
                    check.examples.push(format!(
                        "stale: global index {} entry ('{}', '{}')",
                        ix.name, e.partition_key, e.row_key
                    ));
                }
                ops.push(Operation::Delete {
                    partition_key: e.partition_key,
                    row_key: e.row_key,
                    if_match: IfMatch::Any,
                });
            }
        }
    }
    for ((pk, rk), (x, y)) in &want {
        if seen.contains(&(pk.clone(), rk.clone())) {
            continue;
        }
        check.missing += 1;
        if check.examples.len() < 10 {
            check.examples.push(format!(
                "missing: global index {} entry ('{pk}', '{rk}')",
                ix.name
            ));
        }
        let (a, b) = if rk.starts_with(layout::INDEX_ROW_PREFIX) {
            (FORWARD_PK_PROPERTY, FORWARD_RK_PROPERTY)
        } else {
            (BASE_PK_PROPERTY, BASE_PROPERTY)
        };
        ops.push(Operation::InsertOrReplace(
            EntityWrite::new(pk.clone(), rk.clone())
                .with(a, Value::String(x.clone()))
                .with(b, Value::String(y.clone())),
        ));
    }
    if repair {
        let mut stats = RetryStats::default();
        for op in ops {
            let one: Arc<[Operation]> = vec![op].into();
            with_retry(retry, &mut stats, || store.execute(&hidden, one.clone())).await?;
            check.repaired += 1;
        }
    }
    Ok(check)
}

/// The global index lookup for `access` on `table`, if one applies: the
/// probe (as a local one would be), and the part of the index table to
/// read. Only for a query that would read many partitions (a full scan
/// or a PartitionKey range), and only where no local index applies: a
/// query that names its partitions reads them, strongly consistent.
pub fn choose(
    table: &TableDef,
    access: &crate::keys::Access,
) -> Option<(crate::index::Probe, KeyBox)> {
    use crate::keys::AccessClass;
    if !matches!(
        access.class,
        AccessClass::FullScan | AccessClass::PartitionRange
    ) || crate::index::choose(table, access).is_some()
    {
        return None;
    }
    let p = crate::index::choose_among(table, access, true)?;
    let span = table.indexes[p.index].global_lookup(table, &p.values, &p.rows)?;
    Some((p, span))
}
