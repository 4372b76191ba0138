//! `BEGIN ... COMMIT` as one entity-group transaction.
//!
//! A [`Transaction`] buffers the writes of its statements: nothing reaches
//! the store before COMMIT, which sends them as **one** EGT. Every write
//! must share the first write's table and PartitionKey, and the store sees
//! each entity at most once, so statements that touch the same entity are
//! **coalesced** into one staged change carrying the final state:
//!
//! | first read of the entity | final state | operation at COMMIT |
//! | --- | --- | --- |
//! | absent | written | Insert |
//! | absent | deleted | nothing |
//! | present (ETag e) | written | Merge or Replace, If-Match e |
//! | present (ETag e) | deleted | Delete, If-Match e |
//! | not read (blind upsert) | written | InsertOrMerge / InsertOrReplace |
//!
//! Because every read-based change carries the ETag of the first read,
//! COMMIT fails as a whole (40001) when any of those entities changed in
//! the meantime — optimistic concurrency, as the Table service does it.
//!
//! Reads inside the transaction see committed data plus the staged writes:
//! [`Transaction::overlay`] gives the staged entities' current views, which
//! the native path merges into scans ([`crate::exec`]).
//!
//! Deliberately limited: a staged entity's `timestamp` and `etag` are
//! provisional until COMMIT assigns the real ones.

use std::collections::BTreeMap;
use std::sync::Arc;

use tablegate_catalog::TableDef;
use tablegate_store::entity::write_size;
use tablegate_store::retry::{RetryStats, with_retry};
use tablegate_store::{
    Backend, Entity, EntityWrite, IfMatch, Operation, RetryPolicy, StoreError, TableStore, Value,
    limits,
};

use crate::error::{PlanError, Result, TxnRule};

/// What a statement does to one entity, decided from what it read.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Create; the entity must not exist.
    Insert(EntityWrite),
    /// Insert or update without reading: merge (`true`) or replace.
    Upsert(EntityWrite, bool),
    /// Change these properties of the entity that was read (NULL removes).
    Merge(EntityWrite),
    /// Remove the entity that was read.
    Delete,
}

/// The first-read state of a staged entity.
#[derive(Debug, Clone, PartialEq)]
enum Base {
    /// Written blind (an upsert): the store state is unknown.
    Blind,
    /// It did not exist.
    Absent,
    /// It existed as this.
    Present(Entity),
}

/// The final state of a staged entity.
#[derive(Debug, Clone, PartialEq)]
enum Final {
    Deleted,
    /// These properties; `replace` drops every other one, otherwise they
    /// are merged into the base.
    Put {
        props: BTreeMap<String, Option<Value>>,
        replace: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Staged {
    base: Base,
    fin: Final,
}

/// The staged entities' views for reads inside a transaction: `None`
/// means deleted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overlay {
    /// Table name (as created).
    pub table: String,
    /// The PartitionKey every staged entity shares.
    pub partition_key: String,
    /// RowKey → view.
    pub rows: BTreeMap<String, Option<Entity>>,
}

impl Overlay {
    /// The view of `(pk, rk)` in `table`, if staged: `Some(None)` when the
    /// transaction deleted it.
    pub fn get(&self, table: &str, pk: &str, rk: &str) -> Option<Option<&Entity>> {
        if !self.table.eq_ignore_ascii_case(table) || self.partition_key != pk {
            return None;
        }
        self.rows.get(rk).map(Option::as_ref)
    }

    /// True when `(pk, rk)` is staged.
    pub fn covers(&self, table: &str, pk: &str, rk: &str) -> bool {
        self.get(table, pk, rk).is_some()
    }
}

/// Savepoints one transaction keeps at most (psql's ON_ERROR_ROLLBACK
/// leaves one behind per failed statement).
pub const MAX_SAVEPOINTS: usize = 1_000;
/// Bytes of staged writes the savepoints of one transaction may keep. A
/// savepoint shares the staged writes until the next write copies them,
/// so only savepoints with writes between them count.
pub const MAX_SAVEPOINT_BYTES: usize = 32 << 20;

/// An open `BEGIN ... COMMIT` block's writes.
#[derive(Debug, Default)]
pub struct Transaction {
    writes: Writes,
    /// SAVEPOINTs, oldest first: each name with the writes as they were.
    savepoints: Vec<(String, Writes)>,
}

/// The staged writes.
#[derive(Debug, Default, Clone)]
struct Writes {
    /// The first write's table and PartitionKey.
    scope: Option<(Arc<TableDef>, String)>,
    /// Shared with the savepoints taken since the last write.
    staged: Arc<BTreeMap<String, Staged>>,
    /// The payload bytes of the operations COMMIT would send, kept as
    /// entries change: summing every operation on each write made a
    /// 100-statement transaction quadratic.
    bytes: usize,
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// `SAVEPOINT name`: marks the writes so far. A name used before is
    /// shadowed until released, as in PostgreSQL.
    pub fn savepoint(&mut self, name: &str) -> Result<()> {
        // Each distinct copy of the staged writes, counted once.
        let mut held = 0;
        let mut last: Option<&Arc<BTreeMap<String, Staged>>> = None;
        for w in self.savepoints.iter().map(|(_, w)| w) {
            if !last.is_some_and(|l| Arc::ptr_eq(l, &w.staged)) {
                held += w.bytes;
            }
            last = Some(&w.staged);
        }
        if self.savepoints.len() >= MAX_SAVEPOINTS || held > MAX_SAVEPOINT_BYTES {
            return Err(PlanError::TooManySavepoints(MAX_SAVEPOINTS));
        }
        self.savepoints.push((name.to_owned(), self.writes.clone()));
        Ok(())
    }

    /// Savepoints held now.
    pub fn depth(&self) -> usize {
        self.savepoints.len()
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later one, keeping
    /// the writes.
    pub fn release(&mut self, name: &str) -> Result<()> {
        let i = self.find(name)?;
        self.savepoints.truncate(i);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: the writes as they were at it; it
    /// stays, later ones go. Returns the savepoints left ([`Self::depth`]).
    pub fn rollback_to(&mut self, name: &str) -> Result<usize> {
        let i = self.find(name)?;
        self.savepoints.truncate(i + 1);
        self.writes = self.savepoints[i].1.clone();
        Ok(i + 1)
    }

    /// The newest savepoint called `name`.
    fn find(&self, name: &str) -> Result<usize> {
        self.savepoints
            .iter()
            .rposition(|(n, _)| n == name)
            .ok_or_else(|| PlanError::NoSuchSavepoint(name.to_owned()))
    }

    /// Distinct entities staged.
    pub fn len(&self) -> usize {
        self.writes.staged.len()
    }

    /// True before the first write.
    pub fn is_empty(&self) -> bool {
        self.writes.staged.is_empty()
    }

    /// Checks that a write to `(table, pk, rk)` may join this transaction.
    pub fn admit(&self, table: &TableDef, pk: &str, rk: &str) -> Result<()> {
        if let Some((t, p)) = &self.writes.scope {
            if !t.name.eq_ignore_ascii_case(&table.name) {
                return Err(PlanError::TransactionRule {
                    rule: TxnRule::OnePartition,
                    message: format!(
                        "cannot write table \"{}\" in a transaction that writes table \"{}\"",
                        table.name, t.name
                    ),
                });
            }
            if p != pk {
                return Err(PlanError::TransactionRule {
                    rule: TxnRule::OnePartition,
                    message: format!(
                        "cannot write PartitionKey '{pk}' in a transaction that writes PartitionKey '{p}' of table \"{}\"",
                        t.name
                    ),
                });
            }
        }
        // Room for every row to change its indexed values (two entries
        // per index): COMMIT must not find the transaction too big.
        let most = crate::index::rows_per_group(table, true);
        if !self.writes.staged.contains_key(rk) && self.writes.staged.len() >= most {
            let indexes = match table.indexes.len() {
                0 => String::new(),
                n => format!(
                    " of \"{}\" (each row may also remove and add an entry of each of its {n} index{})",
                    table.name,
                    if n == 1 { "" } else { "es" }
                ),
            };
            return Err(PlanError::TransactionRule {
                rule: TxnRule::MaxEntities,
                message: format!(
                    "a transaction writes at most {most} distinct entities{indexes}; this would be entity {}",
                    self.writes.staged.len() + 1
                ),
            });
        }
        Ok(())
    }

    /// The view of a staged entity: `None` if not staged, `Some(None)` if
    /// deleted. A blind entry is resolved by reading the store first.
    pub async fn view(
        &mut self,
        store: &Backend,
        retry: &RetryPolicy,
        pk: &str,
        rk: &str,
    ) -> Result<Option<Option<Entity>>> {
        let Some((table, p)) = &self.writes.scope else {
            return Ok(None);
        };
        if p != pk || !self.writes.staged.contains_key(rk) {
            return Ok(None);
        }
        let table = table.name.clone();
        self.resolve(store, retry, &table, pk, rk).await?;
        Ok(self.writes.staged.get(rk).map(|s| view(s, pk, rk)))
    }

    async fn resolve(
        &mut self,
        store: &Backend,
        retry: &RetryPolicy,
        table: &str,
        pk: &str,
        rk: &str,
    ) -> Result<()> {
        if let Some(s) = self.writes.staged.get(rk)
            && s.base == Base::Blind
        {
            let mut stats = RetryStats::default();
            let current = with_retry(retry, &mut stats, || store.get(table, pk, rk)).await?;
            let scope = Arc::clone(&self.writes.scope.as_ref().expect("staged, so scoped").0);
            let s = Arc::make_mut(&mut self.writes.staged)
                .get_mut(rk)
                .expect("checked");
            let before = payload(&scope, pk, rk, s);
            s.base = match current {
                Some(e) => Base::Present(e),
                None => Base::Absent,
            };
            // The base decides the operation (Insert, Replace, nothing).
            self.writes.bytes = self.writes.bytes - before + payload(&scope, pk, rk, s);
        }
        Ok(())
    }

    /// Every staged entity's view, for reads (blind entries resolved).
    pub async fn overlay(
        &mut self,
        store: &Backend,
        retry: &RetryPolicy,
    ) -> Result<Option<Arc<Overlay>>> {
        let Some((table, pk)) = self.writes.scope.clone() else {
            return Ok(None);
        };
        let keys: Vec<String> = self.writes.staged.keys().cloned().collect();
        for rk in &keys {
            self.resolve(store, retry, &table.name, &pk, rk).await?;
        }
        Ok(Some(Arc::new(Overlay {
            table: table.name.clone(),
            partition_key: pk.clone(),
            rows: self
                .writes
                .staged
                .iter()
                .map(|(rk, s)| (rk.clone(), view(s, &pk, rk)))
                .collect(),
        })))
    }

    /// Stages a change. `read` is what the statement read (`None` for a
    /// blind write); it becomes the base of an entity staged for the first
    /// time. The caller has [`admit`](Self::admit)ted the key.
    pub fn stage(
        &mut self,
        table: &Arc<TableDef>,
        pk: &str,
        rk: &str,
        change: Change,
        read: Option<Option<Entity>>,
    ) -> Result<()> {
        self.admit(table, pk, rk)?;
        let props = |w: EntityWrite| w.properties;
        let next = match (self.writes.staged.get(rk), change) {
            (None, change) => Staged {
                base: match read {
                    None => Base::Blind,
                    Some(None) => Base::Absent,
                    Some(Some(e)) => Base::Present(e),
                },
                fin: match change {
                    Change::Insert(w) => Final::Put {
                        props: props(w),
                        replace: true,
                    },
                    Change::Upsert(w, merge) => Final::Put {
                        props: props(w),
                        replace: !merge,
                    },
                    Change::Merge(w) => Final::Put {
                        props: props(w),
                        replace: false,
                    },
                    Change::Delete => Final::Deleted,
                },
            },
            (Some(s), change) => {
                let fin = match (&s.fin, change) {
                    (_, Change::Delete) => Final::Deleted,
                    (Final::Deleted, Change::Insert(w) | Change::Upsert(w, _)) => Final::Put {
                        props: props(w),
                        replace: true,
                    },
                    (Final::Deleted, Change::Merge(_)) => {
                        return Err(PlanError::Store(StoreError::EntityNotFound {
                            partition_key: pk.to_owned(),
                            row_key: rk.to_owned(),
                        }));
                    }
                    (Final::Put { .. }, Change::Insert(_)) => {
                        return Err(PlanError::Store(StoreError::EntityAlreadyExists {
                            partition_key: pk.to_owned(),
                            row_key: rk.to_owned(),
                        }));
                    }
                    (Final::Put { .. }, Change::Upsert(w, false)) => Final::Put {
                        props: props(w),
                        replace: true,
                    },
                    (
                        Final::Put { props: p, replace },
                        Change::Merge(w) | Change::Upsert(w, true),
                    ) => {
                        let mut p = p.clone();
                        p.extend(props(w));
                        Final::Put {
                            props: p,
                            replace: *replace,
                        }
                    }
                };
                Staged {
                    base: s.base.clone(),
                    fin,
                }
            }
        };
        let before = self
            .writes
            .staged
            .get(rk)
            .map_or(0, |s| payload(table, pk, rk, s));
        let size = self.writes.bytes - before + payload(table, pk, rk, &next);
        if size > limits::MAX_BATCH_BYTES {
            let entries = match table.indexes.len() {
                0 => "",
                _ => {
                    ", counting the entries of its indexes (those with INCLUDE carry a copy of the row's values)"
                }
            };
            return Err(PlanError::TransactionRule {
                rule: TxnRule::MaxBytes,
                message: format!(
                    "a transaction writes at most {} bytes{entries}; this write would make it {size}",
                    limits::MAX_BATCH_BYTES
                ),
            });
        }
        Arc::make_mut(&mut self.writes.staged).insert(rk.to_owned(), next);
        self.writes.bytes = size;
        if self.writes.scope.is_none() {
            self.writes.scope = Some((table.clone(), pk.to_owned()));
        }
        Ok(())
    }

    /// The operations COMMIT sends, in RowKey order: the staged writes
    /// move into them.
    pub fn into_operations(self) -> Vec<Operation> {
        let Some((_, pk)) = &self.writes.scope else {
            return Vec::new();
        };
        Arc::unwrap_or_clone(self.writes.staged)
            .into_iter()
            .filter_map(|(rk, s)| operation(pk, rk, s))
            .collect()
    }

    /// [`Transaction::into_operations`] of a copy (tests look before and
    /// after).
    #[cfg(test)]
    fn operations(&self) -> Vec<Operation> {
        let Some((_, pk)) = &self.writes.scope else {
            return Vec::new();
        };
        self.writes
            .staged
            .iter()
            .filter_map(|(rk, s)| operation(pk, rk.clone(), s.clone()))
            .collect()
    }

    /// COMMIT: sends the staged writes as one entity-group transaction.
    /// Returns the number of operations applied.
    pub async fn commit(
        self,
        store: &Backend,
        catalog: &tablegate_catalog::Catalog,
        retry: &RetryPolicy,
    ) -> Result<usize> {
        let Some((table, pk)) = &self.writes.scope else {
            return Ok(0);
        };
        let (table, pk) = (table.clone(), pk.clone());
        let mut ops = Vec::new();
        // What each operation's entity was when first read: its index
        // entries are computed from it.
        let mut known = Vec::new();
        for (rk, s) in Arc::unwrap_or_clone(self.writes.staged) {
            let base = match &s.base {
                Base::Present(e) => Some(e.clone()),
                _ => None,
            };
            if let Some(op) = operation(&pk, rk, s) {
                ops.push(op);
                known.push(base);
            }
        }
        if ops.is_empty() {
            return Ok(0);
        }
        let n = ops.len();
        let mut stats = RetryStats::default();
        let r = crate::index::execute(
            store,
            catalog,
            &table,
            ops.into(),
            &known,
            retry,
            &mut stats,
        )
        .await;
        let e = match r {
            Ok(_) => return Ok(n),
            Err(PlanError::Store(e)) => e,
            Err(other) => return Err(other),
        };
        Err(match e.root() {
            StoreError::ETagMismatch {
                partition_key,
                row_key,
                ..
            } => PlanError::CommitConflict {
                detail: format!(
                    "Entity ({partition_key}, {row_key}) changed after this transaction read it."
                ),
            },
            StoreError::EntityNotFound {
                partition_key,
                row_key,
            } => PlanError::CommitConflict {
                detail: format!(
                    "Entity ({partition_key}, {row_key}) was deleted after this transaction read it."
                ),
            },
            StoreError::EntityAlreadyExists {
                partition_key,
                row_key,
            } => PlanError::CommitConflict {
                detail: format!(
                    "Entity ({partition_key}, {row_key}) was inserted by another session after this transaction found it absent."
                ),
            },
            _ => PlanError::Store(e),
        })
    }
}

/// The operation COMMIT sends for one staged entity (`None`: inserted,
/// then deleted: nothing to send).
fn operation(pk: &str, rk: String, s: Staged) -> Option<Operation> {
    let write = |props: BTreeMap<String, Option<Value>>, rk: String| EntityWrite {
        partition_key: pk.to_owned(),
        row_key: rk,
        properties: props,
    };
    Some(match (s.base, s.fin) {
        (Base::Absent, Final::Deleted) => return None,
        (Base::Absent, Final::Put { props, .. }) => Operation::Insert(write(props, rk)),
        (Base::Present(e), Final::Deleted) => Operation::Delete {
            partition_key: pk.to_owned(),
            row_key: rk,
            if_match: IfMatch::ETag(e.etag()),
        },
        (Base::Present(e), Final::Put { props, replace }) => {
            let if_match = IfMatch::ETag(e.etag());
            if replace {
                Operation::Replace {
                    entity: write(props, rk),
                    if_match,
                }
            } else {
                Operation::Merge {
                    entity: write(props, rk),
                    if_match,
                }
            }
        }
        (Base::Blind, Final::Put { props, replace }) => {
            if replace {
                Operation::InsertOrReplace(write(props, rk))
            } else {
                Operation::InsertOrMerge(write(props, rk))
            }
        }
        // A delete always reads first, which resolves the base.
        (Base::Blind, Final::Deleted) => Operation::Delete {
            partition_key: pk.to_owned(),
            row_key: rk,
            if_match: IfMatch::Any,
        },
    })
}

/// The payload bytes of [`operation`] (0 for none), counted without
/// building it: an operation is a copy of the staged properties, and this
/// runs for every statement of a transaction.
fn payload(table: &TableDef, pk: &str, rk: &str, s: &Staged) -> usize {
    let own = match (&s.base, &s.fin) {
        (Base::Absent, Final::Deleted) => return 0,
        (_, Final::Deleted) => write_size(pk, rk, &BTreeMap::new()),
        (_, Final::Put { props, .. }) => write_size(pk, rk, props),
    };
    // COMMIT also sends the index entries; those of an INCLUDE index carry
    // the final row's values, which a merge takes partly from the base.
    let row = view(s, pk, rk).map_or(0, |e| e.size_in_formula());
    own + crate::index::entry_room(table, row)
}

/// A staged entity's view: what a read inside the transaction sees.
fn view(s: &Staged, pk: &str, rk: &str) -> Option<Entity> {
    let (base_props, timestamp) = match &s.base {
        Base::Present(e) => (e.properties.clone(), e.timestamp),
        _ => (BTreeMap::new(), tablegate_store::DateTime(0)),
    };
    match &s.fin {
        Final::Deleted => None,
        Final::Put { props, replace } => {
            let mut out = if *replace {
                BTreeMap::new()
            } else {
                base_props
            };
            for (k, v) in props {
                match v {
                    Some(v) => {
                        out.insert(k.clone(), v.clone());
                    }
                    None => {
                        out.remove(k);
                    }
                }
            }
            Some(Entity {
                partition_key: pk.to_owned(),
                row_key: rk.to_owned(),
                timestamp: provisional(timestamp),
                etag: None,
                properties: out,
            })
        }
    }
}

/// A staged entity's timestamp: now (or just after the base's), until
/// COMMIT assigns the real one.
fn provisional(base: tablegate_store::DateTime) -> tablegate_store::DateTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    tablegate_store::DateTime(now.max(base.0 + 1))
}

#[cfg(test)]
mod tests {
    use tablegate_catalog::{Column, SqlType};

    use super::*;

    fn table() -> Arc<TableDef> {
        let col = Column::property;
        Arc::new(
            TableDef::new(
                "runners",
                vec![
                    col("race", SqlType::Text),
                    col("runner", SqlType::Text),
                    col("age", SqlType::Int4),
                ],
                &["race".into(), "runner".into()],
            )
            .unwrap(),
        )
    }

    fn w(rk: &str, age: i32) -> EntityWrite {
        EntityWrite::new("p", rk).with("age", Value::Int32(age))
    }

    fn existing(rk: &str) -> Entity {
        Entity {
            partition_key: "p".into(),
            row_key: rk.into(),
            timestamp: tablegate_store::DateTime(1_000),
            etag: None,
            properties: [("age".to_owned(), Value::Int32(1))].into(),
        }
    }

    #[test]
    fn payload_counts_what_the_operation_would_carry() {
        let present = existing("a");
        let puts = [
            BTreeMap::new(),
            w("a", 5).properties,
            [
                ("age".to_owned(), None),
                ("name".to_owned(), Some(Value::String("é".into()))),
            ]
            .into(),
        ];
        let bases = [Base::Absent, Base::Blind, Base::Present(present)];
        for base in bases {
            let mut fins = vec![Final::Deleted];
            for props in &puts {
                for replace in [true, false] {
                    fins.push(Final::Put {
                        props: props.clone(),
                        replace,
                    });
                }
            }
            for fin in fins {
                let s = Staged {
                    base: base.clone(),
                    fin,
                };
                let want = operation("p", "a".into(), s.clone()).map_or(0, |o| o.payload_size());
                assert_eq!(payload(&table(), "p", "a", &s), want, "{s:?}");
            }
        }
    }

    #[test]
    fn savepoints_restore_release_and_are_bounded() {
        let t = table();
        let mut tx = Transaction::new();
        tx.savepoint("empty").unwrap();
        tx.stage(&t, "p", "a", Change::Insert(w("a", 30)), Some(None))
            .unwrap();
        tx.savepoint("one").unwrap();
        tx.stage(&t, "p", "a", Change::Merge(w("a", 31)), Some(None))
            .unwrap();
        tx.stage(&t, "p", "b", Change::Insert(w("b", 1)), Some(None))
            .unwrap();
        tx.rollback_to("one").unwrap();
        assert_eq!(tx.operations(), vec![Operation::Insert(w("a", 30))]);
        // The savepoint stays after ROLLBACK TO; a second one works.
        tx.stage(&t, "p", "c", Change::Insert(w("c", 2)), Some(None))
            .unwrap();
        tx.rollback_to("one").unwrap();
        assert_eq!(tx.operations().len(), 1);
        // RELEASE keeps the writes and forgets later savepoints too.
        tx.savepoint("two").unwrap();
        tx.stage(&t, "p", "d", Change::Insert(w("d", 3)), Some(None))
            .unwrap();
        tx.release("one").unwrap();
        assert_eq!(tx.operations().len(), 2);
        assert!(matches!(tx.rollback_to("two"), Err(PlanError::NoSuchSavepoint(n)) if n == "two"));
        // Back to before the first write: another PartitionKey may start.
        tx.rollback_to("empty").unwrap();
        assert!(tx.is_empty());
        tx.admit(&t, "q", "x").unwrap();
        // Savepoints without writes between them share one copy: psql's
        // ON_ERROR_ROLLBACK may leave hundreds.
        for i in 1..MAX_SAVEPOINTS {
            tx.savepoint(&format!("s{i}")).unwrap();
        }
        assert!(matches!(
            tx.savepoint("over"),
            Err(PlanError::TooManySavepoints(_))
        ));
        // With writes between them, their copies count against the bytes.
        let mut tx = Transaction::new();
        let big = |n: usize| {
            (0..10).fold(EntityWrite::new("p", "a"), |w, i| {
                w.with(
                    format!("c{i}"),
                    Value::String(format!("{n}{}", "x".repeat(60_000))),
                )
            })
        };
        let mut kept = 0;
        let refused = loop {
            if let Err(e) = tx.savepoint("s") {
                break e;
            }
            kept += 1;
            tx.stage(&t, "p", "a", Change::Upsert(big(kept), false), None)
                .unwrap();
        };
        assert!(matches!(refused, PlanError::TooManySavepoints(_)));
        let per = tx.writes.bytes;
        assert!(
            (MAX_SAVEPOINT_BYTES / per..=MAX_SAVEPOINT_BYTES / per + 2).contains(&kept),
            "{kept} of {per} bytes"
        );
    }

    #[test]
    fn statements_on_one_entity_coalesce_into_one_operation() {
        let t = table();
        let mut tx = Transaction::new();
        // INSERT then UPDATE is one Insert with the final state.
        tx.stage(&t, "p", "a", Change::Insert(w("a", 30)), Some(None))
            .unwrap();
        tx.stage(&t, "p", "a", Change::Merge(w("a", 31)), Some(None))
            .unwrap();
        // UPDATE then DELETE is one Delete with the first read's If-Match.
        tx.stage(
            &t,
            "p",
            "b",
            Change::Merge(w("b", 5)),
            Some(Some(existing("b"))),
        )
        .unwrap();
        tx.stage(&t, "p", "b", Change::Delete, None).unwrap();
        // INSERT then DELETE is nothing.
        tx.stage(&t, "p", "c", Change::Insert(w("c", 1)), Some(None))
            .unwrap();
        tx.stage(&t, "p", "c", Change::Delete, None).unwrap();
        let ops = tx.operations();
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert_eq!(ops[0], Operation::Insert(w("a", 31)));
        assert_eq!(
            ops[1],
            Operation::Delete {
                partition_key: "p".into(),
                row_key: "b".into(),
                if_match: IfMatch::ETag(existing("b").etag()),
            }
        );
        assert_eq!(tx.len(), 3, "distinct entities count, not operations");
    }

    /// The bytes COMMIT would send, by summing every operation.
    fn sent_bytes(tx: &Transaction) -> usize {
        tx.operations().iter().map(Operation::payload_size).sum()
    }

    #[test]
    fn the_byte_limit_counts_what_commit_would_send() {
        let t = table();
        let mut tx = Transaction::new();
        // Each entity carries ~60 KB: the 4 MiB rule is met after about 69
        // of them, well before the 100-operation rule.
        let big =
            |rk: &str| EntityWrite::new("p", rk).with("note", Value::String("x".repeat(30_000)));
        let mut staged = 0;
        let err = loop {
            let rk = format!("r{staged:03}");
            match tx.stage(&t, "p", &rk, Change::Insert(big(&rk)), Some(None)) {
                Ok(()) => staged += 1,
                Err(e) => break e,
            }
            assert_eq!(tx.writes.bytes, sent_bytes(&tx), "after {staged} writes");
        };
        assert!(matches!(
            err,
            PlanError::TransactionRule {
                rule: TxnRule::MaxBytes,
                ..
            }
        ));
        assert!((60..90).contains(&staged), "{staged} entities fit");
        assert!(sent_bytes(&tx) <= limits::MAX_BATCH_BYTES);
        assert_eq!(tx.len(), staged, "the refused write was not staged");
        // Shrinking an entity already staged frees its bytes; deleting an
        // entity inserted in this transaction frees them all.
        tx.stage(&t, "p", "r000", Change::Upsert(w("r000", 1), false), None)
            .unwrap();
        tx.stage(&t, "p", "r001", Change::Delete, None).unwrap();
        assert_eq!(tx.writes.bytes, sent_bytes(&tx));
        let rk = format!("r{staged:03}");
        tx.stage(&t, "p", &rk, Change::Insert(big(&rk)), Some(None))
            .unwrap();
        assert_eq!(tx.writes.bytes, sent_bytes(&tx));
    }

    #[test]
    fn the_rules_teach_themselves() {
        let t = table();
        let mut tx = Transaction::new();
        for i in 0..100 {
            tx.stage(
                &t,
                "p",
                &format!("r{i:03}"),
                Change::Insert(w("x", 1)),
                Some(None),
            )
            .unwrap();
        }
        // Touching an already-staged entity again is fine at the limit.
        tx.stage(&t, "p", "r000", Change::Merge(w("r000", 2)), Some(None))
            .unwrap();
        let e = tx
            .stage(&t, "p", "r100", Change::Insert(w("r100", 1)), Some(None))
            .unwrap_err();
        assert!(matches!(
            e,
            PlanError::TransactionRule {
                rule: TxnRule::MaxEntities,
                ..
            }
        ));
        let e = tx.admit(&t, "q", "r000").unwrap_err();
        assert!(matches!(
            e,
            PlanError::TransactionRule {
                rule: TxnRule::OnePartition,
                ..
            }
        ));
        assert!(e.to_string().contains("'q'") && e.to_string().contains("'p'"));
    }

    #[test]
    fn views_show_own_writes() {
        let t = table();
        let mut tx = Transaction::new();
        tx.stage(
            &t,
            "p",
            "b",
            Change::Merge(w("b", 9)),
            Some(Some(existing("b"))),
        )
        .unwrap();
        let s = tx.writes.staged.get("b").unwrap();
        let v = view(s, "p", "b").unwrap();
        assert_eq!(v.properties.get("age"), Some(&Value::Int32(9)));
        assert!(v.timestamp.0 > existing("b").timestamp.0);
    }
}
