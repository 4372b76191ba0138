//! Local secondary indexes at run time: keeping their entries in step with
//! every write, finding rows through them, building and dropping them.
//!
//! **Maintenance** ([`execute`]): a write to a table with indexes becomes
//! its base operations *plus* the index entries they add and remove, in
//! the same entity-group transaction, so a base entity and its entries
//! change atomically (the seeds' dual-row pattern, done by the gateway).
//! Computing the entries needs each entity's state before the write:
//! the caller's read when the operation is conditional on its ETag, else
//! a fresh read, and an unconditional operation (an upsert, a `*` match)
//! is made conditional on what was read, so a concurrent change fails the
//! transaction rather than leaving entries computed from an old state.
//!
//! **Lookups** ([`choose`], [`probe`]): `pk = X AND col = v` reads the
//! index's RowKey prefix for `v` in partition `X`, then the base entities
//! its entries name, and the query's whole filter is applied to them
//! again: an entry can never return a row its base entity does not match.
//!
//! **Build** ([`backfill`]) and **drop** ([`drop_entries`]): one
//! partition at a time, entity-group transactions of at most 100 entries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tablegate_catalog::index::{self as layout, BASE_PROPERTY, Entry};
use tablegate_catalog::{Catalog, IndexDef, TableDef};
use tablegate_store::retry::{RetryStats, with_retry};
use tablegate_store::{
    Backend, CmpOp, Entity, EntityWrite, Field, Filter, IfMatch, KeyBox, KeyInterval, OpOutcome,
    Operation, PageRequest, Query, RetryPolicy, StoreError, TableStore, Value, limits,
};

use crate::error::{PlanError, Result, TxnRule};
use crate::keys::Access;

/// How many of the 100 operations of an entity-group transaction one row
/// written to `table` may need: its own, per local index an entry removed
/// and one added (an insert or a delete needs half of those), and with
/// global indexes one queue entry.
pub fn ops_per_row(table: &TableDef, changes_values: bool) -> usize {
    let n = table.indexes.iter().filter(|i| !i.global).count();
    let queue = usize::from(table.indexes.iter().any(|i| i.global));
    1 + queue + if changes_values { 2 * n } else { n }
}

/// Bytes a batch keeps free beside an operation whose row carries
/// `row_bytes`, for the entries of `table`'s indexes: per index an entry
/// removed and one added, and per INCLUDE index a copy of (at most) the
/// row's values.
pub fn entry_room(table: &TableDef, row_bytes: usize) -> usize {
    if table.indexes.is_empty() {
        return 0;
    }
    let copies = table
        .indexes
        .iter()
        .filter(|i| !i.include.is_empty())
        .count();
    row_bytes * copies + 2 * table.indexes.len() * (4 * limits::MAX_KEY_UTF16 + 1024)
}

/// Rows of `table` that fit one entity-group transaction.
pub fn rows_per_group(table: &TableDef, changes_values: bool) -> usize {
    (limits::MAX_BATCH_OPERATIONS / ops_per_row(table, changes_values)).max(1)
}

/// What the indexes of `table` add to each write, as EXPLAIN says it
/// (`None` without indexes).
pub fn write_cost(table: &TableDef) -> Option<String> {
    if table.indexes.is_empty() {
        return None;
    }
    let names: Vec<&str> = table.indexes.iter().map(|i| i.name.as_str()).collect();
    let global = if table.indexes.iter().any(|i| i.global) {
        " (a global index adds one queue entry per row; its own table is written after the write returns)"
    } else {
        ""
    };
    Some(format!(
        "Write cost of the indexes ({}): an inserted row takes {} of the 100 operations of an entity-group transaction, a row whose indexed values change up to {}, so one transaction holds at most {} such rows{global}",
        names.join(", "),
        ops_per_row(table, false),
        ops_per_row(table, true),
        rows_per_group(table, true),
    ))
}

/// `op` made conditional on `old`, the state its index entries were
/// computed from.
fn conditional(op: &Operation, old: Option<&Entity>) -> Operation {
    let tag = |e: &Entity| IfMatch::ETag(e.etag());
    match (op, old) {
        (Operation::InsertOrMerge(w), Some(e)) => Operation::Merge {
            entity: w.clone(),
            if_match: tag(e),
        },
        (Operation::InsertOrReplace(w), Some(e)) => Operation::Replace {
            entity: w.clone(),
            if_match: tag(e),
        },
        (Operation::InsertOrMerge(w) | Operation::InsertOrReplace(w), None) => {
            Operation::Insert(w.clone())
        }
        (
            Operation::Merge {
                entity,
                if_match: IfMatch::Any,
            },
            Some(e),
        ) => Operation::Merge {
            entity: entity.clone(),
            if_match: tag(e),
        },
        (
            Operation::Replace {
                entity,
                if_match: IfMatch::Any,
            },
            Some(e),
        ) => Operation::Replace {
            entity: entity.clone(),
            if_match: tag(e),
        },
        (
            Operation::Delete {
                partition_key,
                row_key,
                if_match: IfMatch::Any,
            },
            Some(e),
        ) => Operation::Delete {
            partition_key: partition_key.clone(),
            row_key: row_key.clone(),
            if_match: tag(e),
        },
        (op, _) => op.clone(),
    }
}

/// One operation of an expanded transaction: a base operation or an
/// index entry of one.
#[derive(Debug, Clone, Copy)]
struct Owner {
    /// The base operation's position.
    base: usize,
    /// `Some(i)`: an entry of `table.indexes[i]`.
    index: Option<usize>,
}

/// [`Owner::index`] of a global index queue entry.
const QUEUE: usize = usize::MAX;

/// The entry entity of `entry` for base RowKey `base_rk`.
fn entry_write(pk: &str, entry: &Entry, base_rk: &str) -> EntityWrite {
    let mut w = EntityWrite::new(pk, entry.row_key.clone())
        .with(BASE_PROPERTY, Value::String(base_rk.into()));
    for (c, v) in &entry.covered {
        w = w.with(c, v.clone());
    }
    w
}

/// Runs `base` (operations on `table`, one partition) as one entity-group
/// transaction together with the index entries they change. `known[i]` is
/// the entity the caller read for `base[i]`, if it did. Outcomes are the
/// base operations'; a failure names the base operation it belongs to, as
/// the store would. Without indexes this is the store's `execute`.
pub async fn execute(
    store: &Backend,
    catalog: &Catalog,
    planned: &TableDef,
    base: Arc<[Operation]>,
    known: &[Option<Entity>],
    retry: &RetryPolicy,
    stats: &mut RetryStats,
) -> Result<Vec<OpOutcome>> {
    // The indexes are the table's as of now, not as of planning: a
    // statement planned (or a transaction begun) before CREATE INDEX
    // still writes the new index's entries. CREATE INDEX waits for the
    // writes under way before it reads the rows it builds from.
    let _writing = catalog.write_guard().await;
    let current = catalog.table(&planned.name).ok();
    let table: &TableDef = current.as_deref().unwrap_or(planned);
    if table.indexes.is_empty() {
        return Ok(with_retry(retry, stats, || store.execute(&table.name, base.clone())).await?);
    }
    let global = table.indexes.iter().any(|i| i.global);
    // Entries found already gone (a delete) or already this entity's (an
    // add): left out of the next attempt.
    let mut settled: BTreeSet<String> = BTreeSet::new();
    // UNIQUE entries left naming a row that no longer has the value (a
    // build that raced a write): replaced, If-Match the stale entry.
    let mut stale: BTreeMap<String, tablegate_store::ETag> = BTreeMap::new();
    for _ in 0..8 {
        let mut ops = Vec::with_capacity(base.len() * 2);
        let mut owners = Vec::with_capacity(base.len() * 2);
        let mut states = Vec::with_capacity(base.len());
        for (i, op) in base.iter().enumerate() {
            let (pk, rk) = op.keys();
            let old = match (op, known.get(i).and_then(Option::as_ref)) {
                (Operation::Insert(_), _) => None,
                (
                    Operation::Merge {
                        if_match: IfMatch::ETag(t),
                        ..
                    }
                    | Operation::Replace {
                        if_match: IfMatch::ETag(t),
                        ..
                    }
                    | Operation::Delete {
                        if_match: IfMatch::ETag(t),
                        ..
                    },
                    Some(e),
                ) if e.etag() == *t => Some(e.clone()),
                _ => with_retry(retry, stats, || store.get(&table.name, pk, rk)).await?,
            };
            let before = match &old {
                Some(e) => layout::entries(table, &e.properties, rk)?,
                None => Vec::new(),
            };
            let state = op.properties_after(old.as_ref());
            let after = match &state {
                Some(p) => layout::entries(table, p, rk)?,
                None => Vec::new(),
            };
            if let Some(p) = &state {
                // A row a global index could not hold is refused now, not
                // found later by the maintainer.
                for ix in table.indexes.iter().filter(|i| i.global) {
                    ix.global_entry(table, p, pk, rk)?;
                }
            }
            states.push(state);
            ops.push(conditional(op, old.as_ref()));
            owners.push(Owner {
                base: i,
                index: None,
            });
            // An entry whose key stays but whose INCLUDE values change is
            // rewritten in place, not removed.
            for gone in before
                .iter()
                .filter(|e| !after.iter().any(|a| a.row_key == e.row_key))
            {
                if settled.contains(&gone.row_key) {
                    continue;
                }
                ops.push(Operation::Delete {
                    partition_key: pk.to_owned(),
                    row_key: gone.row_key.clone(),
                    if_match: IfMatch::Any,
                });
                owners.push(Owner {
                    base: i,
                    index: Some(gone.index),
                });
            }
            for new in after.iter().filter(|e| !before.contains(e)) {
                if settled.contains(&new.row_key) {
                    continue;
                }
                let w = entry_write(pk, new, rk);
                let rewrite = before.iter().any(|b| b.row_key == new.row_key);
                ops.push(match stale.get(&new.row_key) {
                    Some(t) => Operation::Replace {
                        entity: w,
                        if_match: IfMatch::ETag(t.clone()),
                    },
                    None if table.indexes[new.index].unique && !rewrite => Operation::Insert(w),
                    None => Operation::InsertOrReplace(w),
                });
                owners.push(Owner {
                    base: i,
                    index: Some(new.index),
                });
            }
        }
        let (mut ops, mut owners) = one_per_entry(table, ops, owners, &states)?;
        if global {
            for (i, op) in base.iter().enumerate() {
                let (pk, rk) = op.keys();
                ops.push(crate::global::queue_write(pk, rk));
                owners.push(Owner {
                    base: i,
                    index: Some(QUEUE),
                });
            }
        }
        if ops.len() > limits::MAX_BATCH_OPERATIONS {
            return Err(too_many(table, base.len(), ops.len()));
        }
        let ops: Arc<[Operation]> = ops.into();
        let sent = with_retry(retry, stats, || store.execute(&table.name, ops.clone())).await;
        // Told whatever the outcome: an error does not always mean the
        // transaction did not commit (a timeout), and a partition with
        // nothing queued costs the maintainer one read.
        if global && let Some(op) = base.first() {
            catalog.queued(&table.name, &[op.keys().0.to_owned()]);
        }
        match sent {
            Ok(outcomes) => {
                return Ok(outcomes
                    .into_iter()
                    .zip(&owners)
                    .filter(|(_, o)| o.index.is_none())
                    .map(|(r, _)| r)
                    .collect());
            }
            Err(StoreError::BatchOperationFailed { index, source }) => {
                let owner = owners[index.min(owners.len() - 1)];
                let Some(ix) = owner.index.filter(|&ix| ix != QUEUE) else {
                    return Err(PlanError::Store(StoreError::BatchOperationFailed {
                        index: owner.base,
                        source,
                    }));
                };
                let op = &ops[index];
                let (pk, entry_rk) = op.keys();
                match (&*source, op) {
                    // Removed already: what this write wanted.
                    (StoreError::EntityNotFound { .. }, Operation::Delete { .. }) => {
                        settled.insert(entry_rk.to_owned());
                    }
                    (StoreError::EntityAlreadyExists { .. }, Operation::Insert(_)) => {
                        let (_, base_rk) = base[owner.base].keys();
                        match holder(store, table, pk, entry_rk, base_rk, retry, stats).await? {
                            Holder::Same(t) | Holder::Stale(t) => {
                                stale.insert(entry_rk.to_owned(), t);
                            }
                            // Gone in between: try again.
                            Holder::Gone => {}
                            Holder::Live => {
                                return Err(unique_violation(
                                    table,
                                    &table.indexes[ix],
                                    states[owner.base].as_ref(),
                                    owner.base,
                                ));
                            }
                        }
                    }
                    // The stale entry changed meanwhile: look again.
                    (
                        StoreError::ETagMismatch { .. } | StoreError::EntityNotFound { .. },
                        Operation::Replace { .. },
                    ) => {
                        stale.remove(entry_rk);
                    }
                    _ => {
                        return Err(PlanError::Store(StoreError::BatchOperationFailed {
                            index: owner.base,
                            source,
                        }));
                    }
                }
            }
            Err(e) => return Err(name_indexes(e, table, &owners).into()),
        }
    }
    Err(PlanError::CommitConflict {
        detail: format!(
            "The index entries of table \"{}\" kept changing during 8 attempts.",
            table.name
        ),
    })
}

/// A throttled transaction that carried index operations says so: they
/// count against the partition's target like the rows (DynamoDB's users
/// learned the hard way that index writes throttle base writes silently).
fn name_indexes(e: StoreError, table: &TableDef, owners: &[Owner]) -> StoreError {
    let StoreError::ServerBusy {
        reason,
        scope,
        target_per_sec,
        retry_after,
    } = e
    else {
        return e;
    };
    let mut names: Vec<&str> = Vec::new();
    let mut extra = 0;
    for o in owners {
        match o.index {
            None => {}
            Some(QUEUE) => {
                extra += 1;
                if !names.contains(&"global index queue") {
                    names.push("global index queue");
                }
            }
            Some(i) => {
                extra += 1;
                let n = table.indexes[i].name.as_str();
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    if extra == 0 {
        return StoreError::ServerBusy {
            reason,
            scope,
            target_per_sec,
            retry_after,
        };
    }
    let carried = format!(
        " (the write's {} operations included {extra} of index {})",
        owners.len(),
        names.join(", ")
    );
    StoreError::ServerBusy {
        reason: format!("{reason}{carried}"),
        scope: format!("{scope}{carried}"),
        target_per_sec,
        retry_after,
    }
}

/// An entity-group transaction touches each entity once: when two rows of
/// one write meet at one entry of a UNIQUE index (one leaves the value,
/// the other takes it), the removal and the addition become one
/// replacement; two rows taking one value are a unique violation.
fn one_per_entry(
    table: &TableDef,
    ops: Vec<Operation>,
    owners: Vec<Owner>,
    states: &[Option<BTreeMap<String, Value>>],
) -> Result<(Vec<Operation>, Vec<Owner>)> {
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out: Vec<(Operation, Owner)> = Vec::with_capacity(ops.len());
    for (op, owner) in ops.into_iter().zip(owners) {
        let Some(ix) = owner.index else {
            out.push((op, owner));
            continue;
        };
        let rk = op.keys().1.to_owned();
        match at.get(&rk) {
            None => {
                at.insert(rk, out.len());
                out.push((op, owner));
            }
            Some(&j) => {
                let adds = |o: &Operation| !matches!(o, Operation::Delete { .. });
                match (adds(&out[j].0), adds(&op)) {
                    (true, true) => {
                        return Err(unique_violation(
                            table,
                            &table.indexes[ix],
                            states[owner.base].as_ref(),
                            owner.base,
                        ));
                    }
                    // The later addition replaces whatever is there.
                    (false, true) => {
                        let w = match op {
                            Operation::Insert(w)
                            | Operation::InsertOrReplace(w)
                            | Operation::Replace { entity: w, .. } => w,
                            other => unreachable!("an entry is added by an insert: {other:?}"),
                        };
                        out[j] = (Operation::InsertOrReplace(w), owner);
                    }
                    // Added, then left by a later row: the addition
                    // replaces the later row's entry.
                    (true, false) => {
                        if let Operation::Insert(w) = &out[j].0 {
                            out[j].0 = Operation::InsertOrReplace(w.clone());
                        }
                    }
                    (false, false) => {}
                }
            }
        }
    }
    Ok(out.into_iter().unzip())
}

fn too_many(table: &TableDef, rows: usize, ops: usize) -> PlanError {
    let n = table.indexes.len();
    PlanError::TransactionRule {
        rule: TxnRule::MaxEntities,
        message: format!(
            "writing {rows} rows of \"{}\" with its {n} index{} takes {ops} operations; an entity-group transaction holds {}: at most {} rows that change indexed values fit one (each row is 1 operation, plus up to 2 per local index and 1 for the global indexes' queue)",
            table.name,
            if n == 1 { "" } else { "es" },
            limits::MAX_BATCH_OPERATIONS,
            rows_per_group(table, true),
        ),
    }
}

/// Who holds a UNIQUE index entry another write wants.
enum Holder {
    /// Nobody any more.
    Gone,
    /// The row being written: rewritten unchanged (If-Match this ETag) in
    /// the write's own transaction, so that a write about to replace the
    /// entry as stale (If-Match its older ETag) fails and looks again.
    Same(tablegate_store::ETag),
    /// A row that no longer has the value (or no longer exists): the
    /// entry, with this ETag, may be replaced.
    Stale(tablegate_store::ETag),
    /// Another row with the value: a unique violation.
    Live,
}

/// Reads the entry `entry_rk` of partition `pk` and the row it names.
async fn holder(
    store: &Backend,
    table: &TableDef,
    pk: &str,
    entry_rk: &str,
    base_rk: &str,
    retry: &RetryPolicy,
    stats: &mut RetryStats,
) -> Result<Holder> {
    let Some(entry) = with_retry(retry, stats, || store.get(&table.name, pk, entry_rk)).await?
    else {
        return Ok(Holder::Gone);
    };
    let named = match entry.properties.get(BASE_PROPERTY) {
        Some(Value::String(s)) => s.clone(),
        _ => return Ok(Holder::Stale(entry.etag())),
    };
    if named == base_rk {
        return Ok(Holder::Same(entry.etag()));
    }
    Ok(
        if still_has(store, table, pk, entry_rk, &named, retry, stats).await? {
            Holder::Live
        } else {
            Holder::Stale(entry.etag())
        },
    )
}

/// Whether row `base_rk` of partition `pk` still calls for entry `entry_rk`.
async fn still_has(
    store: &Backend,
    table: &TableDef,
    pk: &str,
    entry_rk: &str,
    base_rk: &str,
    retry: &RetryPolicy,
    stats: &mut RetryStats,
) -> Result<bool> {
    let row = with_retry(retry, stats, || store.get(&table.name, pk, base_rk)).await?;
    Ok(match row {
        Some(r) => layout::entries(table, &r.properties, base_rk)?
            .iter()
            .any(|x| x.row_key == entry_rk),
        None => false,
    })
}

fn unique_violation(
    table: &TableDef,
    index: &IndexDef,
    props: Option<&BTreeMap<String, Value>>,
    row: usize,
) -> PlanError {
    let values: Vec<String> = index
        .columns
        .iter()
        .map(|c| {
            let ty = table.columns.iter().find(|d| &d.name == c).map(|d| d.ty);
            match (props.and_then(|p| p.get(c)), ty) {
                (Some(v), Some(ty)) => ty.pg_text(v),
                _ => "…".to_owned(),
            }
        })
        .collect();
    PlanError::UniqueViolation {
        index: index.name.clone(),
        key: format!("({})=({})", index.columns.join(", "), values.join(", ")),
        row,
    }
}

/// An index lookup a query can make instead of scanning its partitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Position in [`TableDef::indexes`].
    pub index: usize,
    /// Leading index columns tested with `=`.
    pub equalities: usize,
    /// Whether the next column is bounded by a range (`<`, `>=`, BETWEEN,
    /// or `LIKE 'text%'`).
    pub range: bool,
    /// The text a `LIKE` range's values start with.
    pub like: Option<String>,
    /// The partitions looked in (the query's PartitionKey points).
    pub partitions: Vec<String>,
    /// The entry RowKeys to read in each.
    pub rows: KeyInterval,
    /// The values of the leading columns tested with `=`.
    pub values: Vec<Value>,
}

/// The local index lookup for `access` on `table`, if one applies: every
/// span is a whole partition (`pk = X`, `pk IN (…)`) and the filter tests
/// the leading column(s) of an index with `=`, and maybe the next one with
/// a range (or, a text column, `LIKE 'text%'`). The index whose conditions
/// cover the most leading columns wins (then a range over none, then a
/// unique one).
pub fn choose(table: &TableDef, access: &Access) -> Option<Probe> {
    choose_among(table, access, false)
}

/// [`choose`] for query `b`: between indexes whose conditions cover as
/// many columns, one whose entries hold everything it reads (INCLUDE)
/// wins.
pub fn choose_for(b: &crate::BoundSelect) -> Option<Probe> {
    choose_preferring(&b.plan.table, &b.access, false, &|ix| covering(b, ix))
}

/// [`choose`] among the local indexes, or among the global ones (any
/// spans: the lookup reads the index table; [`crate::global::choose`]).
pub fn choose_among(table: &TableDef, access: &Access, global: bool) -> Option<Probe> {
    choose_preferring(table, access, global, &|_| false)
}

fn choose_preferring(
    table: &TableDef,
    access: &Access,
    global: bool,
    preferred: &dyn Fn(&tablegate_catalog::IndexDef) -> bool,
) -> Option<Probe> {
    if !table.indexes.iter().any(|i| i.global == global) || access.spans.is_empty() {
        return None;
    }
    let mut partitions = Vec::new();
    if !global {
        for s in &access.spans {
            let pk = s.pk.as_point()?;
            if s.rk != KeyInterval::all() {
                return None;
            }
            partitions.push(pk.to_owned());
        }
    }
    let mut eq: BTreeMap<&str, &Value> = BTreeMap::new();
    let mut lower: BTreeMap<&str, (&Value, bool)> = BTreeMap::new();
    let mut upper: BTreeMap<&str, (&Value, bool)> = BTreeMap::new();
    let mut like: BTreeMap<&str, String> = BTreeMap::new();
    let conjuncts = match access.filter.as_ref()? {
        Filter::And(v) => v.iter().collect(),
        f => vec![f],
    };
    for c in conjuncts {
        if let Filter::Compare {
            field: Field::Property(name),
            op,
            value,
        } = c
        {
            match op {
                CmpOp::Eq => {
                    eq.insert(name, value);
                }
                CmpOp::Gt | CmpOp::Ge => {
                    lower.insert(name, (value, *op == CmpOp::Ge));
                }
                CmpOp::Lt | CmpOp::Le => {
                    upper.insert(name, (value, *op == CmpOp::Le));
                }
                _ => {}
            }
        }
        if let Filter::Like {
            field: Field::Property(name),
            pattern,
            escape,
            case_insensitive: false,
        } = c
        {
            let text = like_prefix(pattern, *escape);
            if !text.is_empty() {
                like.insert(name, text);
            }
        }
    }
    let mut best: Option<(usize, (usize, bool, bool, bool))> = None;
    for (i, ix) in table.indexes.iter().enumerate() {
        if ix.building || ix.global != global {
            continue;
        }
        let n = ix
            .columns
            .iter()
            .take_while(|c| eq.contains_key(c.as_str()))
            .count();
        let range = ix.columns.get(n).is_some_and(|c| {
            lower.contains_key(c.as_str())
                || upper.contains_key(c.as_str())
                || like.contains_key(c.as_str())
        });
        let score = (n, range, preferred(ix), ix.unique && n == ix.columns.len());
        if (n > 0 || range) && best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    let (i, (n, range, ..)) = best?;
    let ix = &table.indexes[i];
    let values: Vec<Value> = ix.columns[..n]
        .iter()
        .map(|c| eq[c.as_str()].clone())
        .collect();
    let c = ix.columns.get(n).map(String::as_str);
    let bounded = c.is_some_and(|c| lower.contains_key(c) || upper.contains_key(c));
    // A comparison range, else the LIKE text's entries (of a text column).
    let like = c
        .filter(|_| range && !bounded)
        .and_then(|c| like.get(c).cloned());
    let rows = match (range, &like) {
        (true, Some(text)) => KeyInterval::prefix(&ix.lookup_text_prefix(table, &values, text)?),
        (true, None) => {
            let c = c?;
            ix.lookup_range(table, &values, lower.get(c).copied(), upper.get(c).copied())?
        }
        (false, _) => KeyInterval::prefix(&ix.lookup_prefix(table, &values)?),
    };
    Some(Probe {
        index: i,
        equalities: n,
        range,
        like,
        partitions,
        rows,
        values,
    })
}

/// The text every value a LIKE pattern matches starts with: the pattern
/// up to its first wildcard. An escape character ends it too (a shorter
/// text still holds every match; the filter is checked on each row).
fn like_prefix(pattern: &str, escape: Option<char>) -> String {
    pattern
        .chars()
        .take_while(|&ch| ch != '%' && ch != '_' && ch != '\\' && Some(ch) != escape)
        .collect()
}

/// What a probe read: the base entities to fetch (or, covered, the rows
/// themselves), and the work it took.
#[derive(Debug, Default)]
pub struct Found {
    /// (PartitionKey, RowKey) of the base entities, in key order.
    pub keys: Vec<(String, String)>,
    /// A covered probe's rows, made from the entries: the base entities'
    /// keys and the values the entries carry, in key order.
    pub rows: Vec<Entity>,
    /// Index entries read.
    pub entries: u64,
    /// Store requests made.
    pub requests: u64,
}

/// Whether the index's entries hold everything query `b` reads (its
/// INCLUDE columns cover the projection and the filter; no Timestamp or
/// ETag, in the result or the filter: an entry's are its own).
pub fn covering(b: &crate::BoundSelect, def: &tablegate_catalog::IndexDef) -> bool {
    use tablegate_catalog::Role;
    let system = |f: &tablegate_store::Field| {
        matches!(
            f,
            tablegate_store::Field::Timestamp | tablegate_store::Field::ETag
        )
    };
    b.plan.columns.iter().all(|c| {
        matches!(
            c.column.role,
            Role::PartitionKey | Role::RowKey | Role::Property
        )
    }) && !b
        .access
        .filter
        .as_ref()
        .is_some_and(|f| f.reads_any(&system))
        && def.covers(
            crate::exec::store_query(b)
                .projection
                .iter()
                .flatten()
                .map(String::as_str),
        )
}

/// Reads the index entries a probe selects; `covered`: the rows too (see
/// [`covering`]).
pub async fn probe(
    store: &Backend,
    table: &TableDef,
    p: &Probe,
    covered: bool,
    retry: &RetryPolicy,
) -> Result<Found> {
    let mut found = Found::default();
    for pk in &p.partitions {
        let q = Query::spans(vec![KeyBox {
            pk: KeyInterval::point(pk.clone()),
            rk: p.rows.clone(),
        }]);
        let q = if covered {
            q
        } else {
            q.with_projection(vec![BASE_PROPERTY.to_owned()])
        };
        let mut req = PageRequest::default();
        loop {
            let mut stats = RetryStats::default();
            let page = with_retry(retry, &mut stats, || store.query(&table.name, &q, &req)).await?;
            found.requests += 1;
            for mut e in page.entities {
                found.entries += 1;
                let Some(Value::String(rk)) = e.properties.remove(BASE_PROPERTY) else {
                    continue;
                };
                if covered {
                    e.row_key = rk;
                    found.rows.push(e);
                } else {
                    found.keys.push((e.partition_key, rk));
                }
            }
            match page.continuation {
                Some(t) => req = req.resume(t),
                None => break,
            }
        }
    }
    found.keys.sort();
    found.keys.dedup();
    found
        .rows
        .sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
    Ok(found)
}

/// Progress of a build or drop: entities read, entries written.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Send + Sync);

/// Writes the entries of `table.indexes[index]` for every base entity
/// (CREATE INDEX on a table with rows). Writes that run meanwhile maintain
/// the index themselves (it is recorded first); an entry written here for
/// a row changed since it was read is removed by that change, or is a
/// stale entry that lookups ignore (they re-check the base entity).
pub async fn backfill(
    store: &Backend,
    table: &TableDef,
    index: usize,
    retry: &RetryPolicy,
    progress: Progress<'_>,
) -> Result<u64> {
    let def = &table.indexes[index];
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk: layout::user_rows(),
    }])
    .with_projection(def.columns.iter().chain(&def.include).cloned().collect());
    let mut req = PageRequest::default();
    let (mut read, mut written) = (0u64, 0u64);
    let mut pending: Vec<Operation> = Vec::new();
    loop {
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(&table.name, &q, &req)).await?;
        for e in page.entities {
            read += 1;
            if pending.first().is_some_and(|f| {
                f.keys().0 != e.partition_key || pending.len() >= limits::MAX_BATCH_OPERATIONS
            }) {
                written += flush(store, table, def, &mut pending, retry).await?;
                progress(read, written);
            }
            let entry = def.entry(index, table, &e.properties, &e.row_key)?;
            if def.unique && pending.iter().any(|o| o.keys().1 == entry.row_key) {
                return Err(unique_violation(table, def, Some(&e.properties), 0));
            }
            let w = entry_write(&e.partition_key, &entry, &e.row_key);
            pending.push(if def.unique {
                Operation::Insert(w)
            } else {
                Operation::InsertOrReplace(w)
            });
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => break,
        }
    }
    written += flush(store, table, def, &mut pending, retry).await?;
    progress(read, written);
    Ok(written)
}

/// Sends a backfill's pending entries of one partition.
async fn flush(
    store: &Backend,
    table: &TableDef,
    def: &IndexDef,
    pending: &mut Vec<Operation>,
    retry: &RetryPolicy,
) -> Result<u64> {
    if pending.is_empty() {
        return Ok(0);
    }
    let ops: Arc<[Operation]> = std::mem::take(pending).into();
    let n = ops.len() as u64;
    let mut stats = RetryStats::default();
    match with_retry(retry, &mut stats, || {
        store.execute(&table.name, ops.clone())
    })
    .await
    {
        Ok(_) => Ok(n),
        Err(StoreError::BatchOperationFailed { source, .. })
            if matches!(*source, StoreError::EntityAlreadyExists { .. }) =>
        {
            // A write meanwhile wrote an entry: one at a time, each one
            // already there checked for whose it is.
            let mut done = 0;
            for op in ops.iter() {
                let mut op = op.clone();
                let mut tries = 0;
                loop {
                    tries += 1;
                    if tries > 8 {
                        return Err(PlanError::CommitConflict {
                            detail: format!(
                                "An entry of index \"{}\" kept changing while the index was built.",
                                def.name
                            ),
                        });
                    }
                    let one: Arc<[Operation]> = vec![op.clone()].into();
                    match with_retry(retry, &mut stats, || {
                        store.execute(&table.name, one.clone())
                    })
                    .await
                    {
                        Ok(_) => {
                            done += 1;
                            break;
                        }
                        Err(e) if matches!(e.root(), StoreError::EntityAlreadyExists { .. }) => {
                            let (pk, rk) = op.keys();
                            let base_rk = match &op {
                                Operation::Insert(w) => match w.properties.get(BASE_PROPERTY) {
                                    Some(Some(Value::String(s))) => s.clone(),
                                    _ => String::new(),
                                },
                                _ => String::new(),
                            };
                            match holder(store, table, pk, rk, &base_rk, retry, &mut stats).await? {
                                Holder::Gone => {}
                                Holder::Same(t) | Holder::Stale(t) => {
                                    let Operation::Insert(w) = op else { break };
                                    op = Operation::Replace {
                                        entity: w,
                                        if_match: IfMatch::ETag(t),
                                    };
                                }
                                // The row read for the build may have left
                                // the value since: then its entry is not due.
                                Holder::Live => {
                                    // The row read for the build may have
                                    // left the value since: then its entry
                                    // is not due.
                                    if !still_has(store, table, pk, rk, &base_rk, retry, &mut stats)
                                        .await?
                                    {
                                        done += 1;
                                        break;
                                    }
                                    return Err(PlanError::UniqueIndexBuild {
                                        index: def.name.clone(),
                                        key: format!("({})=(…)", def.columns.join(", ")),
                                    });
                                }
                            }
                        }
                        // The entry changed again: read it again.
                        Err(e)
                            if matches!(
                                e.root(),
                                StoreError::ETagMismatch { .. } | StoreError::EntityNotFound { .. }
                            ) =>
                        {
                            if let Operation::Replace { entity, .. } = op {
                                op = Operation::Insert(entity);
                            }
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Ok(done)
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletes every entity of `table` whose RowKey is in `rows`, in every
/// partition: a dropped index's entries ([`IndexDef::all_entries`]; also a
/// failed CREATE INDEX's partial build), or the queue entries of a table
/// left without global indexes.
pub async fn drop_entries(
    store: &Backend,
    table: &str,
    rows: &KeyInterval,
    retry: &RetryPolicy,
) -> Result<u64> {
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk: rows.clone(),
    }])
    .with_projection(Vec::new());
    let mut deleted = 0;
    let mut req = PageRequest::default();
    loop {
        // A continuation token names the next key to read, so deleting the
        // keys before it does not disturb it; a page may be empty and
        // still carry one (it ended at a range partition's boundary).
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(table, &q, &req)).await?;
        let mut by_pk: BTreeMap<String, Vec<Operation>> = BTreeMap::new();
        for e in page.entities {
            by_pk
                .entry(e.partition_key.clone())
                .or_default()
                .push(Operation::Delete {
                    partition_key: e.partition_key,
                    row_key: e.row_key,
                    if_match: IfMatch::Any,
                });
        }
        for ops in by_pk.into_values() {
            for chunk in ops.chunks(limits::MAX_BATCH_OPERATIONS) {
                let chunk: Arc<[Operation]> = chunk.to_vec().into();
                match with_retry(retry, &mut stats, || store.execute(table, chunk.clone())).await {
                    Ok(_) => deleted += chunk.len() as u64,
                    // One was deleted meanwhile (by a write to its row):
                    // the others one at a time.
                    Err(e) if matches!(e.root(), StoreError::EntityNotFound { .. }) => {
                        for op in chunk.iter() {
                            let one: Arc<[Operation]> = vec![op.clone()].into();
                            match with_retry(retry, &mut stats, || {
                                store.execute(table, one.clone())
                            })
                            .await
                            {
                                Ok(_) => deleted += 1,
                                Err(e) if matches!(e.root(), StoreError::EntityNotFound { .. }) => {
                                }
                                Err(e) => return Err(e.into()),
                            }
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return Ok(deleted),
        }
    }
}

/// What [`verify`] found (and, repairing, fixed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Check {
    /// PartitionKeys read.
    pub partitions: u64,
    /// Base entities read.
    pub rows: u64,
    /// Index entries read.
    pub entries: u64,
    /// Entries a row should have and does not (or that name another row).
    pub missing: u64,
    /// Entries no row has (a dropped index's, a row's old value's).
    pub stale: u64,
    /// Values a UNIQUE index holds for more than one row of a partition
    /// (found, never repaired: which row keeps the value is the user's
    /// call).
    pub duplicates: u64,
    /// Entries written or deleted to repair.
    pub repaired: u64,
    /// The first few problems, described.
    pub examples: Vec<String>,
}

/// Compares every partition's index entries with those its rows call for
/// (one partition at a time: its rows, then its entries, in one key-order
/// read) and, with `repair`, writes the missing ones and deletes the
/// stale ones. Meant for a table no one writes meanwhile (`tablegate
/// index verify` runs on a stopped server's data).
pub async fn verify(
    store: &Backend,
    table: &TableDef,
    repair: bool,
    retry: &RetryPolicy,
    progress: &(dyn Fn(&Check) + Send + Sync),
) -> Result<Check> {
    let q = Query::full_scan();
    let mut req = PageRequest::default();
    let mut check = Check::default();
    let mut group: Vec<Entity> = Vec::new();
    loop {
        let mut stats = RetryStats::default();
        let page = with_retry(retry, &mut stats, || store.query(&table.name, &q, &req)).await?;
        for e in page.entities {
            if group
                .first()
                .is_some_and(|f| f.partition_key != e.partition_key)
            {
                check_partition(
                    store,
                    table,
                    std::mem::take(&mut group),
                    repair,
                    retry,
                    &mut check,
                )
                .await?;
                if check.partitions % 100 == 0 {
                    progress(&check);
                }
            }
            group.push(e);
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => break,
        }
    }
    if !group.is_empty() {
        check_partition(store, table, group, repair, retry, &mut check).await?;
    }
    progress(&check);
    Ok(check)
}

async fn check_partition(
    store: &Backend,
    table: &TableDef,
    entities: Vec<Entity>,
    repair: bool,
    retry: &RetryPolicy,
    check: &mut Check,
) -> Result<()> {
    let pk = entities[0].partition_key.clone();
    check.partitions += 1;
    // Entry RowKey → the entry and the base RowKey it should name.
    let mut want: BTreeMap<String, (Entry, String)> = BTreeMap::new();
    // Entry RowKey → the entry as stored.
    let mut stored: BTreeMap<String, Entity> = BTreeMap::new();
    // Entries of a UNIQUE value several rows share: left as they are.
    let mut dup: BTreeSet<String> = BTreeSet::new();
    for e in &entities {
        if e.row_key.starts_with(layout::QUEUE_ROW_PREFIX) {
            // A global index's queue entry: the maintainer's.
            continue;
        }
        if e.row_key.starts_with(tablegate_catalog::INDEX_ROW_PREFIX) {
            check.entries += 1;
            stored.insert(e.row_key.clone(), e.clone());
        } else {
            check.rows += 1;
            for x in layout::entries(table, &e.properties, &e.row_key)? {
                if let Some((_, other)) = want.get(&x.row_key) {
                    check.duplicates += 1;
                    if check.examples.len() < 10 {
                        check.examples.push(format!(
                            "duplicate: rows '{other}' and '{}' of PartitionKey '{pk}' share a value of UNIQUE index {}",
                            e.row_key, table.indexes[x.index].name
                        ));
                    }
                    dup.insert(x.row_key);
                    continue;
                }
                want.insert(x.row_key.clone(), (x, e.row_key.clone()));
            }
        }
    }
    let mut ops = Vec::new();
    let note = |check: &mut Check, what: String| {
        if check.examples.len() < 10 {
            check.examples.push(what);
        }
    };
    for (rk, (entry, base)) in &want {
        if dup.contains(rk) {
            continue;
        }
        let w = entry_write(&pk, entry, base);
        let props: BTreeMap<String, Value> = w
            .properties
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
            .collect();
        let what = match stored.get(rk) {
            None => "missing",
            Some(e) if !layout::same_properties(&e.properties, &props) => {
                "outdated (other INCLUDE values than the row's)"
            }
            Some(_) => continue,
        };
        check.missing += 1;
        note(
            check,
            format!(
                "{what}: index {} entry of row ('{pk}', '{base}')",
                table.indexes[entry.index].name
            ),
        );
        ops.push(Operation::InsertOrReplace(w));
    }
    for (rk, e) in stored {
        let (etag, base) = (e.etag(), e.properties.get(BASE_PROPERTY));
        let base = match base {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        if !want.contains_key(&rk) {
            check.stale += 1;
            note(
                check,
                format!(
                    "stale: entry in PartitionKey '{pk}' naming row '{}'",
                    base.unwrap_or_default()
                ),
            );
            ops.push(Operation::Delete {
                partition_key: pk.clone(),
                row_key: rk,
                if_match: IfMatch::ETag(etag),
            });
        }
    }
    if repair {
        for chunk in ops.chunks(limits::MAX_BATCH_OPERATIONS) {
            let chunk: Arc<[Operation]> = chunk.to_vec().into();
            let mut stats = RetryStats::default();
            with_retry(retry, &mut stats, || {
                store.execute(&table.name, chunk.clone())
            })
            .await?;
            check.repaired += chunk.len() as u64;
        }
    }
    Ok(())
}
