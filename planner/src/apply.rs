//! Running writes: a [`WritePlan`] with parameter values becomes store
//! operations.
//!
//! **Autocommit.** The entities a statement touches are grouped by
//! PartitionKey in key order, at most 100 operations and 4 MiB per group,
//! and each group is one entity-group transaction. A statement whose
//! writes fit one group is atomic; one that needs several reports how many
//! in a NOTICE, and if a later group fails the error says what stayed
//! applied. Read-based operations carry If-Match with the ETag that was
//! read: when another session changed the entity in between, the group is
//! read again after a short jittered pause and recomputed (the WHERE
//! re-checked), as PostgreSQL
//! re-checks a row it waited for, so no update is ever lost.
//!
//! **Inside BEGIN.** Changes are staged in the [`Transaction`]; reads go
//! through its overlay, so a statement sees the transaction's own writes.

use std::sync::Arc;
use std::time::Duration;
use tablegate_catalog::{Catalog, ColumnDefault, ColumnRef, Role, TableDef};

use tablegate_store::RetryPolicy;
use tablegate_store::retry::{self, RetryStats, with_retry};
use tablegate_store::{
    Backend, Entity, EntityWrite, IfMatch, Operation, StoreError, TableStore, Value, limits,
};

use crate::error::{PlanError, Result};
use crate::exec::{ExecOptions, scan_entities};
use crate::identity::Identities;
use crate::index;
use crate::plan::BoundSelect;
use crate::txn::{Change, Transaction};
use crate::value_expr::{EvalCtx, Row, VExpr, assign, cast, default_value};
use crate::write::{InsertSource, OnConflict, WriteKind, WritePlan};

/// What a write statement did.
#[derive(Debug, Clone, Default)]
pub struct WriteOutcome {
    /// Rows inserted, updated or deleted.
    pub rows: u64,
    /// RETURNING rows: the entity as written (as deleted for DELETE).
    pub returning: Vec<Entity>,
    /// A NOTICE for the client (several entity-group transactions).
    pub notice: Option<String>,
    /// Entity-group transactions applied.
    pub groups: u64,
}

/// How an entity's current state is known when its change is decided.
#[derive(Debug, Clone)]
enum Read {
    /// Not read: the change is a blind write.
    Blind,
    /// Must be read before deciding.
    Unread,
    /// Read: this is what was there.
    Known(Option<Entity>),
}

/// One entity a statement touches.
#[derive(Debug, Clone)]
struct Intent {
    pk: String,
    rk: String,
    /// The proposed row (INSERT).
    proposed: Option<Row>,
    /// The proposed row as the store's write, built (and checked) once
    /// when the intent is made and taken by the first decision; a decision
    /// after a conflict builds it again from `proposed`.
    write: Option<EntityWrite>,
    read: Read,
}

/// Conflict re-reads before a statement gives up with 40001. PostgreSQL's
/// UPDATE waits for the row instead and never gives up, so generous: a few
/// sessions updating one row on busy cores can lose many rounds in a row.
const MAX_ATTEMPTS: usize = 16;

/// The pause before a conflict re-read: 0.2 ms · (2^x − 1), jittered ±20%,
/// at most 20 ms. Sessions that collided on one entity and re-read at once
/// collide again; without the pause, four autocommit increments of one row
/// could lose eight rounds in a row (seen in the e2e suite).
const CONFLICT_BACKOFF: RetryPolicy = RetryPolicy::Exponential {
    base: Duration::from_micros(200),
    min: Duration::ZERO,
    max: Duration::from_millis(20),
    max_retries: MAX_ATTEMPTS as u32,
};

/// A write statement with its parameters, ready to run.
struct Runner<'a> {
    store: &'a Backend,
    /// The table's current indexes are read from it at each write.
    catalog: &'a Catalog,
    plan: &'a WritePlan,
    params: &'a [Option<Value>],
    opts: &'a ExecOptions,
    /// The scan's bound access (UPDATE / DELETE), for re-checking WHERE.
    bound: Option<BoundSelect>,
    /// Identity columns' ids (INSERT; COPY's rows come with theirs).
    ids: Option<&'a Identities>,
}

/// Runs a write. `txn` is the open transaction, if any.
pub async fn run(
    store: &Backend,
    catalog: &Catalog,
    ids: &Identities,
    plan: &WritePlan,
    params: &[Option<Value>],
    txn: Option<&mut Transaction>,
    opts: &ExecOptions,
) -> Result<WriteOutcome> {
    let mut runner = Runner {
        store,
        catalog,
        plan,
        params,
        opts,
        bound: None,
        ids: Some(ids),
    };
    let mut opts = opts.clone();
    // Only a statement that scans (INSERT ... SELECT, UPDATE, DELETE) needs
    // the transaction's overlay; INSERT ... VALUES reads its own keys
    // through `Transaction::view`. Building the overlay views every staged
    // entity, so doing it for each INSERT made a transaction of single-row
    // INSERTs quadratic.
    let scans = !matches!(
        plan.kind,
        WriteKind::Insert {
            source: InsertSource::Values(_),
            ..
        }
    );
    let mut sink = match txn {
        Some(t) => {
            if scans {
                opts.overlay = t.overlay(store, &opts.retry).await?;
            }
            Sink::Txn(t, WriteOutcome::default())
        }
        None => Sink::Auto(Groups::default()),
    };
    match &plan.kind {
        WriteKind::Insert {
            columns,
            targets,
            source,
            conflict,
        } => {
            let rows = runner
                .proposed_rows(columns, targets, source, &opts)
                .await?;
            push_rows(&runner, &mut sink, rows, conflict).await?;
        }
        WriteKind::Update { scan, .. } | WriteKind::Delete { scan } => {
            let bound = scan.bind(params)?;
            runner.bound = Some(bound.clone());
            let mut pages = scan_entities(store, &bound, &opts)?;
            while let Some(page) = pages.next().await {
                for e in page? {
                    sink.push(
                        &runner,
                        Intent {
                            pk: e.partition_key.clone(),
                            rk: e.row_key.clone(),
                            proposed: None,
                            write: None,
                            read: Read::Known(Some(e)),
                        },
                    )
                    .await?;
                }
            }
        }
    }
    sink.finish(&runner).await
}

/// Inserts rows that are already values (COPY FROM): `plan` is an INSERT
/// of every column (its source is ignored).
pub async fn insert_rows(
    store: &Backend,
    catalog: &Catalog,
    plan: &WritePlan,
    rows: Vec<Row>,
    txn: Option<&mut Transaction>,
    opts: &ExecOptions,
) -> Result<WriteOutcome> {
    let WriteKind::Insert { conflict, .. } = &plan.kind else {
        return Err(PlanError::Unsupported {
            feature: "inserting rows with an UPDATE or DELETE plan".into(),
            hint: String::new(),
        });
    };
    let runner = Runner {
        store,
        catalog,
        plan,
        params: &[],
        opts,
        bound: None,
        ids: None,
    };
    let mut sink = match txn {
        Some(t) => Sink::Txn(t, WriteOutcome::default()),
        None => Sink::Auto(Groups::default()),
    };
    push_rows(&runner, &mut sink, rows, conflict).await?;
    sink.finish(&runner).await
}

/// INSERT's rows as intents, in key order, grouped by the sink.
async fn push_rows(
    runner: &Runner<'_>,
    sink: &mut Sink<'_>,
    rows: Vec<Row>,
    conflict: &OnConflict,
) -> Result<()> {
    let table = &runner.plan.table;
    let mut intents = Vec::with_capacity(rows.len());
    for row in rows {
        // Only an ON CONFLICT clause decides again from the proposed row
        // (EXCLUDED, or a re-read after a conflict); otherwise its values
        // move into the write.
        let (w, proposed) = match conflict {
            OnConflict::Error => (table.entity_write_owned(row)?, None),
            _ => (table.entity_write(&row)?, Some(row)),
        };
        let read = match (conflict, &*sink) {
            (OnConflict::Error, Sink::Auto(_)) => Read::Blind,
            // With indexes, an upsert reads first: its entries depend on
            // what it replaces.
            (
                OnConflict::Update {
                    blind_merge: Some(_),
                    ..
                },
                _,
            ) if table.indexes.is_empty() => Read::Blind,
            _ => Read::Unread,
        };
        intents.push(Intent {
            pk: w.partition_key.clone(),
            rk: w.row_key.clone(),
            proposed,
            write: Some(w),
            read,
        });
    }
    // Grouped by PartitionKey in key order; a key proposed twice is what
    // PostgreSQL reports for it.
    intents.sort_by(|a, b| (&a.pk, &a.rk).cmp(&(&b.pk, &b.rk)));
    let mut deduped: Vec<Intent> = Vec::with_capacity(intents.len());
    for it in intents {
        if let Some(prev) = deduped.last()
            && prev.pk == it.pk
            && prev.rk == it.rk
        {
            match conflict {
                OnConflict::DoNothing => continue,
                OnConflict::Error => {
                    return Err(PlanError::Store(StoreError::EntityAlreadyExists {
                        partition_key: it.pk,
                        row_key: it.rk,
                    }));
                }
                OnConflict::Update { .. } => {
                    return Err(PlanError::Cardinality(
                        "ON CONFLICT DO UPDATE command cannot affect row a second time".into(),
                    ));
                }
            }
        }
        deduped.push(it);
    }
    for it in deduped {
        sink.push(runner, it).await?;
    }
    Ok(())
}

impl Runner<'_> {
    /// INSERT's rows: every user column's value, DEFAULTs applied.
    async fn proposed_rows(
        &self,
        columns: &[ColumnRef],
        targets: &[(Arc<ColumnRef>, Option<usize>)],
        source: &InsertSource,
        opts: &ExecOptions,
    ) -> Result<Vec<Row>> {
        let table = &self.plan.table;
        let ctx = EvalCtx {
            table,
            params: self.params,
            current: None,
            excluded: None,
        };
        // Identity columns: `GENERATED ALWAYS` takes no value; ids for the
        // rows are reserved before they are built (`identity`).
        let identity: Vec<&ColumnRef> = targets
            .iter()
            .filter(|(c, _)| {
                table
                    .columns
                    .iter()
                    .any(|d| d.name == c.name && d.is_identity())
            })
            .map(|(c, _)| &**c)
            .collect();
        for (col, i) in targets {
            let always = table.columns.iter().any(|d| {
                d.name == col.name
                    && matches!(d.default, Some(ColumnDefault::Identity { always: true }))
            });
            let Some(i) = i else { continue };
            let explicit = match source {
                InsertSource::Values(rows) => rows
                    .iter()
                    .any(|r| r.get(*i).is_some_and(|e| !matches!(e, VExpr::Default))),
                InsertSource::Query(_) | InsertSource::Engine { .. } => true,
            };
            if always && explicit {
                return Err(PlanError::GeneratedAlways {
                    column: col.name.clone(),
                });
            }
        }
        let reserve = |n: usize| async move {
            if let Some(ids) = self.ids {
                for col in &identity {
                    ids.reserve(&table.name, &col.name, n).await?;
                }
            }
            Ok::<(), PlanError>(())
        };
        let build = |given: &dyn Fn(usize) -> Result<Option<Option<Value>>>| -> Result<Row> {
            let mut row = Vec::with_capacity(targets.len());
            for (col, i) in targets {
                let v = match i.map(given).transpose()?.flatten() {
                    Some(v) => v,
                    None => default_value(col, table)?,
                };
                row.push((Arc::clone(col), v));
            }
            Ok(row)
        };
        match source {
            InsertSource::Values(rows) => {
                reserve(rows.len()).await?;
                rows.iter()
                    .map(|exprs| {
                        build(&|i| match exprs.get(i) {
                            // Fewer values than columns: the rest take DEFAULT.
                            None => Ok(None),
                            Some(e) => assign(e, &columns[i], &ctx).map(Some),
                        })
                    })
                    .collect()
            }
            // Its rows come from the gateway, through `insert_rows`.
            InsertSource::Engine { reason, .. } => Err(PlanError::NeedsAnalytics {
                reason: format!("INSERT ... SELECT with {reason}"),
            }),
            InsertSource::Query(select) => {
                // Read fully before writing: a SELECT over the same table
                // must not see this statement's own inserts.
                let bound = select.bind(self.params)?;
                let mut pages = scan_entities(self.store, &bound, opts)?;
                let mut read = Vec::new();
                while let Some(page) = pages.next().await {
                    read.extend(page?);
                }
                reserve(read.len()).await?;
                read.iter()
                    .map(|e| {
                        build(&|i| match select.columns.get(i) {
                            None => Ok(None),
                            Some(oc) => select
                                .table
                                .value_of(e, &oc.column)
                                .map(|v| cast(v, columns[i].ty, &columns[i].name))
                                .transpose()
                                .map(Some),
                        })
                    })
                    .collect()
            }
        }
    }

    /// Decides what to do to one entity given its current state (`None`:
    /// absent). `None` means leave it alone.
    ///
    /// `write` is the intent's own write (taken from it) if still unused.
    fn decide(
        &self,
        it: &Intent,
        current: Option<&Entity>,
        mut write: Option<EntityWrite>,
    ) -> Result<Option<Change>> {
        let table = &self.plan.table;
        let keys = || EntityWrite::new(it.pk.clone(), it.rk.clone());
        let set_write = |set: &[(ColumnRef, VExpr)], cur: Option<&Entity>| {
            let ctx = EvalCtx {
                table,
                params: self.params,
                current: cur,
                excluded: it.proposed.as_ref(),
            };
            let mut w = keys();
            for (col, e) in set {
                w.properties.insert(col.name.clone(), assign(e, col, &ctx)?);
            }
            check_not_null(table, &w)?;
            Ok::<_, PlanError>(w)
        };
        let mut proposed = || -> Result<EntityWrite> {
            match write.take() {
                Some(w) => Ok(w),
                None => Ok(table.entity_write(it.proposed.as_deref().unwrap_or_default())?),
            }
        };
        Ok(match &self.plan.kind {
            WriteKind::Insert { conflict, .. } => match (conflict, current) {
                (OnConflict::Error, Some(_)) => {
                    return Err(PlanError::Store(StoreError::EntityAlreadyExists {
                        partition_key: it.pk.clone(),
                        row_key: it.rk.clone(),
                    }));
                }
                (OnConflict::DoNothing, Some(_)) => None,
                (
                    OnConflict::Update {
                        set,
                        blind_merge: Some(merge),
                    },
                    _,
                ) => {
                    let w = if *merge {
                        // Keys plus exactly the SET columns, from EXCLUDED.
                        set_write(set, None)?
                    } else {
                        proposed()?
                    };
                    Some(Change::Upsert(w, *merge))
                }
                (
                    OnConflict::Update {
                        set,
                        blind_merge: None,
                    },
                    Some(cur),
                ) => Some(Change::Merge(set_write(set, Some(cur))?)),
                (_, None) => Some(Change::Insert(proposed()?)),
            },
            WriteKind::Update { set, .. } => match current {
                Some(cur) if self.still_matches(cur) => {
                    Some(Change::Merge(set_write(set, Some(cur))?))
                }
                _ => None,
            },
            WriteKind::Delete { .. } => match current {
                Some(cur) if self.still_matches(cur) => Some(Change::Delete),
                _ => None,
            },
        })
    }

    /// Re-checks UPDATE / DELETE's WHERE on a fresh read.
    fn still_matches(&self, e: &Entity) -> bool {
        self.bound.as_ref().is_none_or(|b| {
            b.access
                .spans
                .iter()
                .any(|s| s.contains(&e.partition_key, &e.row_key))
                && b.access.filter.as_ref().is_none_or(|f| f.matches(e))
        })
    }

    /// Rows one entity-group transaction takes: 100, fewer when each row
    /// also writes index entries.
    fn group_rows(&self) -> usize {
        let changes_values = match &self.plan.kind {
            WriteKind::Update { .. } => true,
            WriteKind::Insert { conflict, .. } => matches!(conflict, OnConflict::Update { .. }),
            WriteKind::Delete { .. } => false,
        };
        // The table's indexes as of now (see `index::execute`).
        let current = self.catalog.table(&self.plan.table.name).ok();
        index::rows_per_group(
            current.as_deref().unwrap_or(&self.plan.table),
            changes_values,
        )
    }

    async fn get(&self, pk: &str, rk: &str) -> Result<Option<Entity>> {
        let mut stats = RetryStats::default();
        let table = &self.plan.table.name;
        Ok(with_retry(&self.opts.retry, &mut stats, || {
            self.store.get(table, pk, rk)
        })
        .await?)
    }
}

/// NOT NULL columns cannot be set to NULL by an update.
fn check_not_null(table: &TableDef, w: &EntityWrite) -> Result<()> {
    for (name, v) in &w.properties {
        if v.is_none()
            && let Ok(col) = table.resolve(name)
            && col.role == Role::Property
            && !col.nullable
        {
            return Err(PlanError::Catalog(
                tablegate_catalog::CatalogError::NullValue {
                    table: table.name.clone(),
                    column: name.clone(),
                    hint: "the column is declared NOT NULL",
                },
            ));
        }
    }
    Ok(())
}

/// The operation for a decided change, given what was read.
fn operation(pk: &str, rk: &str, change: Change, read: &Read) -> Operation {
    let if_match = || match read {
        Read::Known(Some(e)) => IfMatch::ETag(e.etag()),
        _ => IfMatch::Any,
    };
    match change {
        Change::Insert(w) => Operation::Insert(w),
        Change::Upsert(w, true) => Operation::InsertOrMerge(w),
        Change::Upsert(w, false) => Operation::InsertOrReplace(w),
        Change::Merge(w) => Operation::Merge {
            entity: w,
            if_match: if_match(),
        },
        Change::Delete => Operation::Delete {
            partition_key: pk.to_owned(),
            row_key: rk.to_owned(),
            if_match: if_match(),
        },
    }
}

/// Autocommit: intents of the current PartitionKey, and totals so far.
#[derive(Debug, Default)]
struct Groups {
    pending: Vec<Intent>,
    done: WriteOutcome,
}

enum Sink<'t> {
    Auto(Groups),
    Txn(&'t mut Transaction, WriteOutcome),
}

impl Sink<'_> {
    async fn push(&mut self, r: &Runner<'_>, mut it: Intent) -> Result<()> {
        match self {
            Sink::Auto(g) => {
                if g.pending
                    .first()
                    .is_some_and(|f| f.pk != it.pk || g.pending.len() >= r.group_rows())
                {
                    g.flush(r).await?;
                }
                g.pending.push(it);
                Ok(())
            }
            Sink::Txn(t, done) => {
                let current = r.catalog.table(&r.plan.table.name).ok();
                t.admit(current.as_ref().unwrap_or(&r.plan.table), &it.pk, &it.rk)?;
                let read = match &it.read {
                    Read::Blind => None,
                    Read::Known(k) => Some(k.clone()),
                    Read::Unread => Some(
                        match t.view(r.store, &r.opts.retry, &it.pk, &it.rk).await? {
                            Some(view) => view,
                            None => r.get(&it.pk, &it.rk).await?,
                        },
                    ),
                };
                let current = read.clone().flatten();
                let write = it.write.take();
                let Some(change) = r.decide(&it, current.as_ref(), write)? else {
                    return Ok(());
                };
                let deleted = matches!(change, Change::Delete);
                // `read` becomes the base of an entity staged the first
                // time; for one already staged the staged base stays.
                t.stage(&r.plan.table, &it.pk, &it.rk, change, read)?;
                done.rows += 1;
                if !r.plan.returning.is_empty() {
                    let row = if deleted {
                        current
                    } else {
                        t.view(r.store, &r.opts.retry, &it.pk, &it.rk)
                            .await?
                            .flatten()
                    };
                    done.returning.extend(row);
                }
                Ok(())
            }
        }
    }

    async fn finish(self, r: &Runner<'_>) -> Result<WriteOutcome> {
        match self {
            Sink::Auto(mut g) => {
                g.flush(r).await?;
                let mut out = g.done;
                if out.groups > 1 {
                    out.notice = Some(format!(
                        "{} was applied as {} entity-group transactions (one per PartitionKey, at most {} operations each); they are not atomic together",
                        r.plan.verb(),
                        out.groups,
                        limits::MAX_BATCH_OPERATIONS
                    ));
                }
                Ok(out)
            }
            Sink::Txn(_, done) => Ok(done),
        }
    }
}

impl Groups {
    /// Applies the pending intents as one entity-group transaction (or a
    /// few when 4 MiB is exceeded), re-reading on conflicts.
    async fn flush(&mut self, r: &Runner<'_>) -> Result<()> {
        let mut group = std::mem::take(&mut self.pending);
        if group.is_empty() {
            return Ok(());
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            for it in group.iter_mut() {
                if matches!(it.read, Read::Unread) {
                    it.read = Read::Known(r.get(&it.pk, &it.rk).await?);
                }
            }
            let mut ops = Vec::new();
            let mut from = Vec::new();
            for (i, it) in group.iter_mut().enumerate() {
                let write = it.write.take();
                let current = match &it.read {
                    Read::Known(k) => k.as_ref(),
                    _ => None,
                };
                if let Some(change) = r.decide(it, current, write)? {
                    ops.push(operation(&it.pk, &it.rk, change, &it.read));
                    from.push(i);
                }
            }
            if ops.is_empty() {
                return Ok(());
            }
            match self.execute(r, ops, &group, &from).await {
                Ok(()) => return Ok(()),
                Err(Retry::Again(index)) if attempt < MAX_ATTEMPTS => {
                    // Another session changed an entity this group read:
                    // read the group again and decide again.
                    let _ = index;
                    if let Some(d) = CONFLICT_BACKOFF.delay(attempt as u32, retry::jitter()) {
                        tokio::time::sleep(d).await;
                    }
                    for it in group.iter_mut() {
                        if matches!(it.read, Read::Known(_)) {
                            it.read = Read::Unread;
                        }
                    }
                }
                Err(Retry::Again(_)) => {
                    return Err(self.failed(PlanError::CommitConflict {
                        detail: format!(
                            "Entities of PartitionKey '{}' kept changing during {} attempts.",
                            group[0].pk, MAX_ATTEMPTS
                        ),
                    }));
                }
                // Each skip removes a row, so this ends; it is no conflict
                // round.
                Err(Retry::Skip(i)) => {
                    attempt -= 1;
                    group.remove(i);
                    if group.is_empty() {
                        return Ok(());
                    }
                }
                Err(Retry::Fail(e)) => return Err(self.failed(e)),
            }
        }
    }

    fn failed(&self, e: PlanError) -> PlanError {
        if self.done.groups == 0 {
            e
        } else {
            PlanError::PartlyApplied {
                rows: self.done.rows,
                groups: self.done.groups,
                source: Box::new(e),
            }
        }
    }

    /// Sends decided operations, split only where 4 MiB requires it.
    async fn execute(
        &mut self,
        r: &Runner<'_>,
        ops: Vec<Operation>,
        group: &[Intent],
        from: &[usize],
    ) -> std::result::Result<(), Retry> {
        // Chunk ends first, then each chunk moves into one shared batch
        // that every attempt (a throttled one is retried) sends as it is.
        let mut ends = Vec::new();
        let mut size = 0;
        for (i, op) in ops.iter().enumerate() {
            let own = op.payload_size();
            let bytes = own + index::entry_room(&r.plan.table, own);
            if i > 0 && size + bytes > limits::MAX_BATCH_BYTES {
                ends.push(i);
                size = 0;
            }
            size += bytes;
        }
        ends.push(ops.len());
        let mut ops = ops.into_iter();
        let mut start = 0;
        for end in ends {
            let chunk: Arc<[Operation]> = ops.by_ref().take(end - start).collect();
            let known: Vec<Option<Entity>> = from[start..end]
                .iter()
                .map(|&i| match &group[i].read {
                    Read::Known(e) => e.clone(),
                    _ => None,
                })
                .collect();
            let mut stats = RetryStats::default();
            let res = index::execute(
                r.store,
                r.catalog,
                &r.plan.table,
                Arc::clone(&chunk),
                &known,
                &r.opts.retry,
                &mut stats,
            )
            .await;
            let res = match res {
                Ok(o) => Ok(o),
                Err(PlanError::Store(e)) => Err(e),
                // ON CONFLICT DO NOTHING skips a row that a UNIQUE index
                // refuses, as it skips one whose key exists.
                Err(PlanError::UniqueViolation { row, .. })
                    if start == 0
                        && matches!(
                            r.plan.kind,
                            WriteKind::Insert {
                                conflict: OnConflict::DoNothing,
                                ..
                            }
                        ) =>
                {
                    return Err(Retry::Skip(from[row]));
                }
                Err(e) => return Err(Retry::Fail(e)),
            };
            match res {
                Ok(outcomes) => {
                    self.done.groups += 1;
                    self.done.rows += outcomes.len() as u64;
                    if !r.plan.returning.is_empty() {
                        for (k, (o, op)) in outcomes.into_iter().zip(chunk.iter()).enumerate() {
                            let row = match o.into_entity(op) {
                                Some(e) => Some(e),
                                None => match &group[from[start + k]].read {
                                    Read::Known(e) => e.clone(),
                                    _ => None,
                                },
                            };
                            self.done.returning.extend(row);
                        }
                    }
                }
                Err(e) => {
                    let index = match &e {
                        StoreError::BatchOperationFailed { index, .. } => *index,
                        _ => 0,
                    };
                    let it = &group[from[start + index.min(end - start - 1)]];
                    let conflict = matches!(
                        e.root(),
                        StoreError::ETagMismatch { .. }
                            | StoreError::EntityNotFound { .. }
                            | StoreError::EntityAlreadyExists { .. }
                    );
                    // A blind Insert that finds the key is the user's 23505;
                    // a read-based operation that conflicts is re-read. A
                    // chunk after the first was already applied: never
                    // re-run the statement's earlier chunks.
                    if conflict && !matches!(it.read, Read::Blind) && start == 0 {
                        return Err(Retry::Again(index));
                    }
                    return Err(Retry::Fail(PlanError::Store(e)));
                }
            }
            start = end;
        }
        Ok(())
    }
}

enum Retry {
    Again(usize),
    /// Leave out this intent (by its position in the group) and go on.
    Skip(usize),
    Fail(PlanError),
}
