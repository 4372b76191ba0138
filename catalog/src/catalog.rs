//! The catalog: table definitions persisted in a system table of the store
//! and cached in memory.
//!
//! CREATE TABLE creates the store table first and then records the
//! definition; if recording fails the store table is dropped again. A store
//! table without a definition (a crash in between) is adopted by the next
//! CREATE TABLE of that name, which drops and recreates it.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tablegate_store::{
    EntityWrite, IfMatch, KeyBox, Operation, PageRequest, Query, StoreError, TableStore, Value,
};

use crate::error::{CatalogError, Result};
use crate::table::{Column, TableDef};

/// The system table holding definitions (hidden from users by the
/// partition layer: the `tgsys_` prefix is reserved).
pub const CATALOG_TABLE: &str = "tgsys_catalog";
const DEFS_PARTITION: &str = "tables";
const DEF_PROPERTY: &str = "definition";

/// Table definitions over a store.
#[derive(Debug)]
pub struct Catalog {
    /// Where definitions live (unthrottled, may see system tables).
    system: Arc<dyn TableStore>,
    /// Where user tables live.
    data: Arc<dyn TableStore>,
    tables: RwLock<BTreeMap<String, Arc<TableDef>>>,
    ddl: tokio::sync::Mutex<()>,
}

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
                tables.insert(e.row_key.clone(), Arc::new(def));
            }
            match page.continuation {
                Some(t) => req = req.resume(t),
                None => break,
            }
        }
        Ok(Catalog {
            system,
            data,
            tables: RwLock::new(tables),
            ddl: tokio::sync::Mutex::new(()),
        })
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
            .cloned()
            .ok_or_else(|| CatalogError::UnknownTable {
                name: name.to_owned(),
            })
    }

    /// Every table, by name.
    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        self.tables.read().values().cloned().collect()
    }

    async fn record(&self, def: &TableDef) -> Result<()> {
        let json = serde_json::to_string(def).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
        let op = Operation::InsertOrReplace(
            EntityWrite::new(DEFS_PARTITION, def.name.to_ascii_lowercase())
                .with(DEF_PROPERTY, Value::String(json)),
        );
        self.system.execute(CATALOG_TABLE, vec![op]).await?;
        Ok(())
    }

    /// CREATE TABLE [IF NOT EXISTS].
    pub async fn create_table(&self, def: TableDef, if_not_exists: bool) -> Result<Created> {
        let _ddl = self.ddl.lock().await;
        if self.table(&def.name).is_ok() {
            return if if_not_exists {
                Ok(Created::AlreadyExisted)
            } else {
                Err(CatalogError::TableExists { name: def.name })
            };
        }
        match self.data.create_table(&def.name).await {
            Ok(_) => {}
            Err(StoreError::TableExists { .. }) => {
                // Left over from a crash between the two steps: adopt it.
                self.data.drop_table(&def.name).await?;
                self.data.create_table(&def.name).await?;
            }
            Err(e) => return Err(e.into()),
        }
        if let Err(e) = self.record(&def).await {
            let _ = self.data.drop_table(&def.name).await;
            return Err(e);
        }
        self.tables
            .write()
            .insert(def.name.to_ascii_lowercase(), Arc::new(def));
        Ok(Created::Created)
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
                }],
            )
            .await?;
        self.tables.write().remove(&lower);
        match self.data.drop_table(name).await {
            Ok(()) | Err(StoreError::TableNotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
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
        let new = def.with_column(column)?;
        self.record(&new).await?;
        self.tables
            .write()
            .insert(new.name.to_ascii_lowercase(), Arc::new(new));
        Ok(true)
    }
}
