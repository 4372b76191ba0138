//! The catalog: table definitions persisted in a system table of the store
//! and cached in memory.
//!
//! CREATE TABLE creates the store table first and then records the
//! definition; if recording fails the store table is dropped again. On the
//! embedded engine a store table without a definition can only be left over
//! from a crash in between, so the next CREATE TABLE of that name drops and
//! recreates it.
//!
//! A shared store (a storage account, opened with [`Catalog::open_shared`])
//! holds tables other applications made: those are never dropped for a
//! CREATE. Tables without a definition are *attached* when the catalog
//! opens, their columns inferred from a sample of entities (each property's
//! most frequent EDM type; keys as `partition_key` and `row_key`); and CREATE
//! TABLE over an existing table attaches it with the declared columns.
//!
//! Several gateways may share one account: each definition is recorded with
//! an Insert (so of two concurrent CREATEs one wins, the other is told so)
//! and changed with a Replace guarded by the ETag it was read with (so of
//! two concurrent ALTERs one wins); [`Catalog::refresh`], run every
//! [`REFRESH_EVERY`] by the planner, brings in what other gateways (or other
//! applications) created, changed and dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tablegate_store::{
    ETag, EntityWrite, IfMatch, KeyBox, Operation, PageRequest, Query, StoreError, TableStore,
    Value,
};

use crate::error::{CatalogError, Result};
use crate::table::{Column, TableDef};
use crate::types::SqlType;

/// The system table holding definitions (hidden from users by the
/// partition layer: the `tgsys_` prefix is reserved).
pub const CATALOG_TABLE: &str = "tgsys_catalog";
const DEFS_PARTITION: &str = "tables";
const DEF_PROPERTY: &str = "definition";

/// How often a shared catalog is re-read: the bound on how long another
/// gateway's DDL takes to be seen here.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// How long a table whose definition vanished is not attached again (its
/// store table may still be listed while the dropping gateway deletes it).
const DROPPED_QUIET: Duration = Duration::from_secs(60);

/// A definition and the ETag of its stored entity.
#[derive(Debug, Clone)]
struct Entry {
    def: Arc<TableDef>,
    etag: Option<ETag>,
}

/// How a definition is recorded.
enum Record<'a> {
    /// A new table: fails if another gateway recorded one first.
    New,
    /// A change to the definition read with this ETag.
    Change(Option<&'a ETag>),
}

/// Table definitions over a store.
#[derive(Debug)]
pub struct Catalog {
    /// Where definitions live (unthrottled, may see system tables).
    system: Arc<dyn TableStore>,
    /// Where user tables live.
    data: Arc<dyn TableStore>,
    tables: RwLock<BTreeMap<String, Entry>>,
    ddl: tokio::sync::Mutex<()>,
    /// Held shared by every write while it reads its table's current
    /// definition and sends its entity-group transaction
    /// ([`Catalog::write_guard`]); CREATE and DROP INDEX take it
    /// exclusively once after recording the change
    /// ([`Catalog::drain_writes`]), so no write that read the old
    /// definition is still on its way when the entries are built or
    /// removed.
    writes: tokio::sync::RwLock<()>,
    /// Tables in `data` may belong to other applications (see the module
    /// docs): never drop one to adopt it.
    shared: bool,
    /// Tables whose definitions another gateway deleted, and when.
    dropped: Mutex<BTreeMap<String, Instant>>,
    /// Bumped by every change of a definition in memory: statements
    /// prepared at an older version are planned again before they run.
    version: AtomicU64,
    /// Store tables seen without a definition at the last refresh: attached
    /// at the next one if still without (a gateway creating a table
    /// records its definition right after creating it).
    unrecorded: Mutex<Vec<String>>,
    /// Told of every write that left global index queue entries.
    queued: RwLock<Option<QueueListener>>,
}

/// Told which partitions of a table now hold global index queue entries
/// (see [`crate::index`]): the planner's maintainer listens. It lives here
/// because every write path holds the catalog.
#[derive(Clone)]
pub struct QueueListener(pub Arc<QueuedFn>);

/// What a [`QueueListener`] calls: (table, PartitionKeys).
pub type QueuedFn = dyn Fn(&str, &[String]) + Send + Sync;

impl std::fmt::Debug for QueueListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueListener")
    }
}

/// Whether a store table holds a global index (never a user's table).
fn is_global_table(name: &str) -> bool {
    name.to_ascii_lowercase()
        .starts_with(crate::index::GLOBAL_TABLE_PREFIX)
}

/// The key columns of an attached table.
pub const ATTACHED_PK: &str = "partition_key";
/// See [`ATTACHED_PK`].
pub const ATTACHED_RK: &str = "row_key";

/// Entities read to infer an attached table's columns.
pub const ATTACH_SAMPLE: usize = 1000;

/// What CREATE TABLE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The table was created.
    Created,
    /// IF NOT EXISTS and it existed: nothing done (PostgreSQL sends a NOTICE).
    AlreadyExisted,
}

impl Catalog {
    /// Opens the catalog: `system` holds the definitions, `data` the
    /// tables (with the partition layer they differ: the layer hides and
    /// throttles, the system store does neither).
    pub async fn open(system: Arc<dyn TableStore>, data: Arc<dyn TableStore>) -> Result<Catalog> {
        match system.create_table(CATALOG_TABLE).await {
            Ok(_) | Err(StoreError::TableExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let tables = load(&*system).await?;
        Ok(Catalog {
            system,
            data,
            tables: RwLock::new(tables),
            ddl: tokio::sync::Mutex::new(()),
            writes: tokio::sync::RwLock::new(()),
            shared: false,
            dropped: Mutex::new(BTreeMap::new()),
            version: Default::default(),
            unrecorded: Mutex::new(Vec::new()),
            queued: RwLock::new(None),
        })
    }

    /// Opens the catalog over a shared store (a storage account) and
    /// attaches its tables that have no definition yet.
    pub async fn open_shared(
        system: Arc<dyn TableStore>,
        data: Arc<dyn TableStore>,
    ) -> Result<Catalog> {
        let mut c = Catalog::open(system, data).await?;
        c.shared = true;
        for t in c.data.list_tables().await? {
            if c.table(&t.name).is_err()
                && !is_global_table(&t.name)
                && let Err(e) = c.attach(&t.name).await
            {
                // One unreadable table must not keep the others away.
                tracing::warn!(table = %t.name, error = %e, "cannot attach table");
            }
        }
        Ok(c)
    }

    /// Records a definition for an existing store table, its columns
    /// inferred from the first [`ATTACH_SAMPLE`] entities.
    async fn attach(&self, name: &str) -> Result<Arc<TableDef>> {
        let page = self
            .data
            .query(
                name,
                &Query::full_scan(),
                &PageRequest::first(ATTACH_SAMPLE),
            )
            .await?;
        let mut columns = vec![Column::key(ATTACHED_PK), Column::key(ATTACHED_RK)];
        for (prop, ty) in infer_columns(&page.entities) {
            columns.push(Column::property(&prop, ty));
        }
        let def = TableDef::new(
            name,
            columns,
            &[ATTACHED_PK.to_owned(), ATTACHED_RK.to_owned()],
        )?;
        match self.record(def, Record::New).await {
            Ok(def) => Ok(def),
            // Another gateway attached it first: take its definition.
            Err(CatalogError::ChangedElsewhere { .. }) => {
                self.reload().await?;
                self.table(name)
            }
            Err(e) => Err(e),
        }
    }

    /// The store user tables live in.
    pub fn data(&self) -> &Arc<dyn TableStore> {
        &self.data
    }

    /// A table's definition (names are case-insensitive, as in the store).
    pub fn table(&self, name: &str) -> Result<Arc<TableDef>> {
        self.tables
            .read()
            .get(&name.to_ascii_lowercase())
            .map(|e| e.def.clone())
            .ok_or_else(|| CatalogError::UnknownTable {
                name: name.to_owned(),
            })
    }

    /// A catalog in which `def` replaces the table of its name, in memory
    /// only: what-if planning binds a query against it. DDL through it
    /// would write to the same stores, so it is only for planning.
    pub fn what_if(&self, def: TableDef) -> Catalog {
        let mut tables = self.tables.read().clone();
        let def = Arc::new(def);
        tables.insert(def.name.to_ascii_lowercase(), Entry { def, etag: None });
        Catalog {
            system: self.system.clone(),
            data: self.data.clone(),
            tables: RwLock::new(tables),
            ddl: tokio::sync::Mutex::new(()),
            writes: tokio::sync::RwLock::new(()),
            shared: self.shared,
            dropped: Mutex::new(BTreeMap::new()),
            version: Default::default(),
            unrecorded: Mutex::new(Vec::new()),
            queued: RwLock::new(None),
        }
    }

    /// Sets who is told of writes that left queue entries.
    pub fn on_queued(&self, listener: QueueListener) {
        *self.queued.write() = Some(listener);
    }

    /// Tells the listener that partitions `pks` of `table` hold queue
    /// entries.
    pub fn queued(&self, table: &str, pks: &[String]) {
        let l = self.queued.read().clone();
        if let Some(l) = l {
            (l.0)(table, pks);
        }
    }

    /// Every table, by name.
    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        self.tables.read().values().map(|e| e.def.clone()).collect()
    }

    /// Stores `def` and caches it; of two gateways recording the same
    /// table at once, one gets [`CatalogError::ChangedElsewhere`].
    async fn record(&self, def: TableDef, how: Record<'_>) -> Result<Arc<TableDef>> {
        let json = serde_json::to_string(&def).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
        let lower = def.name.to_ascii_lowercase();
        let write =
            EntityWrite::new(DEFS_PARTITION, lower.clone()).with(DEF_PROPERTY, Value::String(json));
        let op = match how {
            Record::New => Operation::Insert(write),
            Record::Change(etag) => Operation::Replace {
                entity: write,
                if_match: etag.map_or(IfMatch::Any, |t| IfMatch::ETag(t.clone())),
            },
        };
        let outcome = match self.system.execute(CATALOG_TABLE, vec![op].into()).await {
            Ok(mut o) => o.pop(),
            Err(e) => {
                return Err(match e.root() {
                    StoreError::EntityAlreadyExists { .. }
                    | StoreError::ETagMismatch { .. }
                    | StoreError::EntityNotFound { .. } => {
                        CatalogError::ChangedElsewhere { name: def.name }
                    }
                    _ => e.into(),
                });
            }
        };
        let def = Arc::new(def);
        let entry = Entry {
            def: def.clone(),
            etag: outcome.and_then(|o| o.etag()),
        };
        self.tables.write().insert(lower, entry);
        self.changed();
        Ok(def)
    }

    /// The definitions' version: it changes whenever a definition does.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Re-reads the stored definitions: another gateway's CREATE, ALTER
    /// and DROP become visible here. Returns the tables it dropped from
    /// memory.
    async fn reload(&self) -> Result<Vec<String>> {
        let stored = load(&*self.system).await?;
        let mut mem = self.tables.write();
        let gone: Vec<String> = mem
            .keys()
            .filter(|k| !stored.contains_key(*k))
            .cloned()
            .collect();
        let same = mem.len() == stored.len()
            && mem
                .iter()
                .zip(&stored)
                .all(|((a, x), (b, y))| a == b && x.etag.is_some() && x.etag == y.etag);
        *mem = stored;
        drop(mem);
        if !same {
            self.changed();
        }
        Ok(gone)
    }

    /// Brings a shared catalog up to date with the account: definitions
    /// other gateways recorded, changed or deleted, and tables other
    /// applications created (attached). A no-op on the embedded engine,
    /// where this process is the only writer.
    pub async fn refresh(&self) -> Result<()> {
        if !self.shared {
            return Ok(());
        }
        let _ddl = self.ddl.lock().await;
        let gone = self.reload().await?;
        let now = Instant::now();
        let quiet: Vec<String> = {
            let mut dropped = self.dropped.lock();
            for g in gone {
                dropped.insert(g, now);
            }
            dropped.retain(|_, at| now.duration_since(*at) < DROPPED_QUIET);
            dropped.keys().cloned().collect()
        };
        let seen_before = std::mem::take(&mut *self.unrecorded.lock());
        let mut unrecorded = Vec::new();
        for t in self.data.list_tables().await? {
            let lower = t.name.to_ascii_lowercase();
            if self.table(&t.name).is_ok() || quiet.contains(&lower) || is_global_table(&lower) {
                continue;
            }
            if !seen_before.contains(&lower) {
                unrecorded.push(lower);
            } else if let Err(e) = self.attach(&t.name).await {
                tracing::warn!(table = %t.name, error = %e, "cannot attach table");
            }
        }
        *self.unrecorded.lock() = unrecorded;
        Ok(())
    }

    /// True when `name` is taken among the relations pg_catalog shows:
    /// a table, an index, or a table's primary key (`<table>_pkey`), which
    /// share one namespace in PostgreSQL.
    fn relation_named(&self, name: &str) -> bool {
        self.table(name).is_ok()
            || self.index_table(name).is_some()
            || self.tables.read().values().any(|e| {
                has_pkey(&e.def) && format!("{}_pkey", e.def.name).eq_ignore_ascii_case(name)
            })
    }

    /// CREATE TABLE [IF NOT EXISTS].
    pub async fn create_table(&self, def: TableDef, if_not_exists: bool) -> Result<Created> {
        let _ddl = self.ddl.lock().await;
        if is_global_table(&def.name) {
            return Err(StoreError::InvalidTableName {
                name: def.name,
                reason: "names that start with \"tgix\" are reserved for the tables of global indexes",
            }
            .into());
        }
        if self.relation_named(&def.name) {
            return if if_not_exists {
                Ok(Created::AlreadyExisted)
            } else {
                Err(CatalogError::TableExists { name: def.name })
            };
        }
        let pkey = format!("{}_pkey", def.name);
        if has_pkey(&def) && self.relation_named(&pkey) {
            return Err(CatalogError::TableExists { name: pkey });
        }
        match self.data.create_table(&def.name).await {
            Ok(_) => {}
            // Someone else's table: attach it with the declared columns.
            Err(StoreError::TableExists { .. }) if self.shared => {
                return match self.record(def, Record::New).await {
                    Ok(_) => Ok(Created::Created),
                    // Another gateway created and recorded it.
                    Err(CatalogError::ChangedElsewhere { name }) => {
                        self.reload().await?;
                        if if_not_exists {
                            Ok(Created::AlreadyExisted)
                        } else {
                            Err(CatalogError::TableExists { name })
                        }
                    }
                    Err(e) => Err(e),
                };
            }
            Err(StoreError::TableExists { .. }) => {
                // Left over from a crash between the two steps: adopt it.
                self.data.drop_table(&def.name).await?;
                self.data.create_table(&def.name).await?;
            }
            Err(e) => return Err(e.into()),
        }
        let name = def.name.clone();
        match self.record(def, Record::New).await {
            Ok(_) => Ok(Created::Created),
            // Another gateway attached the table this one just created
            // (it saw it listed): the table stays, under its definition.
            Err(CatalogError::ChangedElsewhere { name }) => {
                self.reload().await?;
                Err(CatalogError::TableExists { name })
            }
            Err(e) => {
                let _ = self.data.drop_table(&name).await;
                Err(e)
            }
        }
    }

    /// DROP TABLE [IF EXISTS]; returns whether a table was dropped.
    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        if self.table(name).is_err() {
            return if if_exists {
                Ok(false)
            } else {
                Err(CatalogError::UnknownTable {
                    name: name.to_owned(),
                })
            };
        }
        let def = self.table(name)?;
        let lower = name.to_ascii_lowercase();
        // Forget the definition first: a crash then leaves an orphan store
        // table (adopted by the next CREATE), never a definition without data.
        self.system
            .execute(
                CATALOG_TABLE,
                vec![Operation::Delete {
                    partition_key: DEFS_PARTITION.to_owned(),
                    row_key: lower.clone(),
                    if_match: IfMatch::Any,
                }]
                .into(),
            )
            .await?;
        self.tables.write().remove(&lower);
        self.changed();
        let globals = def.indexes.iter().filter(|i| i.global);
        let tables =
            std::iter::once(def.name.clone()).chain(globals.map(|i| i.global_table(&def.name)));
        for table in tables {
            match self.data.drop_table(&table).await {
                Ok(()) | Err(StoreError::TableNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// ALTER TABLE ADD COLUMN [IF NOT EXISTS]; returns whether it was added.
    pub async fn add_column(
        &self,
        table: &str,
        column: Column,
        if_not_exists: bool,
    ) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        let def = self.table(table)?;
        if if_not_exists && def.columns.iter().any(|c| c.name == column.name) {
            return Ok(false);
        }
        self.change(def.with_column(column)?).await?;
        Ok(true)
    }

    /// The table that has index `name`.
    pub fn index_table(&self, name: &str) -> Option<Arc<TableDef>> {
        self.tables
            .read()
            .values()
            .find(|e| e.def.index(name).is_some())
            .map(|e| e.def.clone())
    }

    /// CREATE [UNIQUE] INDEX [IF NOT EXISTS]: records the index (from now on
    /// every write maintains it; the caller backfills existing rows).
    /// Returns the new definition, `None` when it existed (IF NOT EXISTS).
    pub async fn create_index(
        &self,
        table: &str,
        name: &str,
        spec: &crate::IndexSpec,
        if_not_exists: bool,
    ) -> Result<Option<Arc<TableDef>>> {
        let _ddl = self.ddl.lock().await;
        let def = self.table(table)?;
        if self.relation_named(name) {
            return if if_not_exists {
                Ok(None)
            } else {
                Err(CatalogError::IndexExists {
                    name: name.to_owned(),
                })
            };
        }
        self.change(def.with_index(name, spec)?).await.map(Some)
    }

    /// DROP INDEX: forgets the index; returns the table as it was (its
    /// entries are still in the store: the caller deletes them).
    /// With `id`, only the index with that id (a failed build undoing
    /// itself must not drop an index created again under its name).
    pub async fn drop_index(&self, name: &str, id: Option<u32>) -> Result<Arc<TableDef>> {
        let _ddl = self.ddl.lock().await;
        let def = self
            .index_table(name)
            .filter(|t| id.is_none_or(|id| t.index(name).is_some_and(|i| i.id == id)))
            .ok_or_else(|| CatalogError::UnknownIndex {
                name: name.to_owned(),
            })?;
        let mut new = (*def).clone();
        new.indexes.retain(|i| i.name != name);
        self.change(new).await?;
        Ok(def)
    }

    /// Marks a built index ready for lookups (only the index with this id:
    /// a name dropped and created again meanwhile is another index).
    pub async fn index_ready(&self, name: &str, id: u32) -> Result<()> {
        let _ddl = self.ddl.lock().await;
        let def = self
            .index_table(name)
            .filter(|t| t.index(name).is_some_and(|i| i.id == id))
            .ok_or_else(|| CatalogError::UnknownIndex {
                name: name.to_owned(),
            })?;
        let mut new = (*def).clone();
        for i in &mut new.indexes {
            if i.name == name {
                i.building = false;
            }
        }
        self.change(new).await.map(|_| ())
    }

    /// See [`Catalog::drain_writes`]: a write holds this while it reads
    /// its table's definition and sends its transaction.
    pub async fn write_guard(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.writes.read().await
    }

    /// Holds this gateway's writes back (once those under way finish)
    /// until the guard is dropped.
    pub async fn hold_writes(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.writes.write().await
    }

    /// Waits until every write that began before now has finished.
    pub async fn drain_writes(&self) {
        drop(self.writes.write().await);
    }

    /// Whether other gateways share this catalog (they see a change
    /// within [`REFRESH_EVERY`]).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Records a changed definition of an existing table (the DDL lock
    /// held).
    async fn change(&self, new: TableDef) -> Result<Arc<TableDef>> {
        let etag = self
            .tables
            .read()
            .get(&new.name.to_ascii_lowercase())
            .and_then(|e| e.etag.clone());
        match self.record(new, Record::Change(etag.as_ref())).await {
            Ok(def) => Ok(def),
            Err(e @ CatalogError::ChangedElsewhere { .. }) => {
                self.reload().await?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

/// Every stored definition with its ETag, by lower-case name.
async fn load(system: &dyn TableStore) -> Result<BTreeMap<String, Entry>> {
    let mut tables = BTreeMap::new();
    let q = Query::spans(vec![KeyBox::partition(DEFS_PARTITION)]);
    let mut req = PageRequest::default();
    loop {
        let page = system.query(CATALOG_TABLE, &q, &req).await?;
        for e in page.entities {
            let Some(Value::String(json)) = e.properties.get(DEF_PROPERTY) else {
                return Err(CatalogError::Corrupt(format!(
                    "{} has no definition",
                    e.row_key
                )));
            };
            let def: TableDef = serde_json::from_str(json)
                .map_err(|err| CatalogError::Corrupt(format!("{}: {err}", e.row_key)))?;
            let etag = Some(e.etag());
            tables.insert(
                e.row_key.clone(),
                Entry {
                    def: Arc::new(def),
                    etag,
                },
            );
        }
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => break,
        }
    }
    Ok(tables)
}

/// Each property of a sample with the SQL type of its most frequent EDM
/// type (ties: the type named first in EDM order), by property name.
/// Properties whose names cannot be columns (`timestamp`, `etag`, the key
/// column names, non-identifiers) are left out.
pub fn infer_columns(sample: &[tablegate_store::Entity]) -> Vec<(String, SqlType)> {
    let mut seen: BTreeMap<&str, BTreeMap<tablegate_store::EdmType, usize>> = BTreeMap::new();
    for e in sample {
        for (k, v) in &e.properties {
            *seen.entry(k).or_default().entry(v.edm_type()).or_default() += 1;
        }
    }
    seen.into_iter()
        .filter(|(k, _)| {
            let lower = k.to_ascii_lowercase();
            !matches!(
                lower.as_str(),
                "timestamp" | "etag" | ATTACHED_PK | ATTACHED_RK
            ) && crate::table::check_column_name(k).is_ok()
        })
        .filter_map(|(k, types)| {
            let best = types.values().copied().max()?;
            let edm = types.into_iter().find(|(_, n)| *n == best)?.0;
            Some((k.to_owned(), SqlType::from_edm(edm)))
        })
        .collect()
}

/// True when pg_catalog shows the table's key as `<table>_pkey`: a key the
/// user declared, not the hidden one of a table without a primary key.
fn has_pkey(def: &TableDef) -> bool {
    !def.columns.iter().any(|c| c.hidden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablegate_store::{DateTime, Entity};

    fn entity(props: &[(&str, Value)]) -> Entity {
        Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            timestamp: DateTime(0),
            etag: None,
            properties: props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn inferred_columns_take_the_most_frequent_type() {
        let sample = [
            entity(&[
                ("Age", Value::Int32(3)),
                ("Name", Value::String("a".into())),
            ]),
            entity(&[("Age", Value::Int32(4)), ("etag", Value::Boolean(true))]),
            entity(&[
                ("Age", Value::String("old".into())),
                ("When", Value::DateTime(DateTime(1))),
            ]),
            entity(&[("row_key", Value::Int64(1)), ("Odd", Value::Double(1.0))]),
        ];
        assert_eq!(
            infer_columns(&sample),
            vec![
                ("Age".to_owned(), SqlType::Int4),
                ("Name".to_owned(), SqlType::Text),
                ("Odd".to_owned(), SqlType::Float8),
                ("When".to_owned(), SqlType::Timestamptz),
            ]
        );
        assert!(infer_columns(&[]).is_empty());
    }
}
