//! A SQL table over a store table: columns, which column is the
//! PartitionKey and which the RowKey, the system columns, and the mapping
//! between SQL rows and entities.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use tablegate_store::{Entity, EntityWrite, Value, limits};

use crate::error::{CatalogError, Result};
use crate::index::{IndexDef, IndexSpec, MAX_INDEX_COLUMNS, MAX_INDEXES_PER_TABLE};
use crate::types::SqlType;

/// The read-only system column holding the store's Timestamp.
pub const TIMESTAMP_COLUMN: &str = "timestamp";
/// The read-only system column holding the ETag (only when named).
pub const ETAG_COLUMN: &str = "etag";
/// The hidden PartitionKey column of a table declared without a primary
/// key: one of [`HIDDEN_BUCKETS`] hash buckets.
pub const BUCKET_COLUMN: &str = "tg_bucket";
/// The hidden RowKey column of a table declared without a primary key: a
/// time-ordered unique id.
pub const ROWID_COLUMN: &str = "tg_rowid";
/// PartitionKeys a table without a primary key spreads its rows over.
pub const HIDDEN_BUCKETS: u32 = 16;

/// A user column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Name as SQL folds it (lower case unless quoted).
    pub name: String,
    /// Type.
    pub ty: SqlType,
    /// NOT NULL (key columns always are).
    pub not_null: bool,
    /// DEFAULT for INSERTs that do not name the column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<ColumnDefault>,
    /// A key the table was given because it declared none: left out of
    /// `SELECT *`, positional INSERT and COPY column lists and the
    /// catalog views, still readable by name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

impl Column {
    /// A key column (TEXT NOT NULL, no default).
    pub fn key(name: &str) -> Column {
        Column {
            name: name.to_owned(),
            ty: SqlType::Text,
            not_null: true,
            default: None,
            hidden: false,
        }
    }

    /// A property column: nullable, no default.
    pub fn property(name: &str, ty: SqlType) -> Column {
        Column {
            name: name.to_owned(),
            ty,
            not_null: false,
            default: None,
            hidden: false,
        }
    }

    /// An identity column (`serial`, `GENERATED … AS IDENTITY`).
    pub fn is_identity(&self) -> bool {
        matches!(self.default, Some(ColumnDefault::Identity { .. }))
    }

    fn hidden_key(name: &str, default: ColumnDefault) -> Column {
        Column {
            name: name.to_owned(),
            ty: SqlType::Text,
            not_null: true,
            default: Some(default),
            hidden: true,
        }
    }
}

/// A column's DEFAULT. Deliberately limited to what needs no expression
/// engine: a constant, the current time, a random UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnDefault {
    /// A constant, as text in the column's type (parsed at INSERT).
    Constant(String),
    /// `now()` / `CURRENT_TIMESTAMP`.
    Now,
    /// `gen_random_uuid()`.
    RandomUuid,
    /// An identity column (`serial`, `bigserial`, `GENERATED … AS
    /// IDENTITY`): the next id of the column's counter. `always` refuses
    /// an explicit value (`GENERATED ALWAYS`).
    Identity {
        /// `GENERATED ALWAYS` (else `BY DEFAULT` or serial).
        always: bool,
    },
    /// The hidden PartitionKey of a table without a primary key: a hash
    /// bucket, one per session, so concurrent writers spread over
    /// [`HIDDEN_BUCKETS`] partitions while one session's transaction stays
    /// in one.
    Bucket,
    /// The hidden RowKey of a table without a primary key: the time in
    /// microseconds and 64 random bits, in hex.
    RowId,
}

/// What a column is in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The PartitionKey.
    PartitionKey,
    /// The RowKey.
    RowKey,
    /// A stored property of the same name.
    Property,
    /// The store's Timestamp (read-only).
    Timestamp,
    /// The ETag (read-only, only when named).
    ETag,
}

/// A column reference resolved against a table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnRef {
    /// Column name.
    pub name: String,
    /// Type.
    pub ty: SqlType,
    /// Role in the store.
    pub role: Role,
    /// Nullable in results.
    pub nullable: bool,
}

/// A table definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Table name as created.
    pub name: String,
    /// User columns in declaration order (key columns included).
    pub columns: Vec<Column>,
    /// The PartitionKey column.
    pub partition_key: String,
    /// The RowKey column; `None` means the RowKey is always `""`.
    pub row_key: Option<String>,
    /// Local secondary indexes ([`crate::index`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<IndexDef>,
    /// The id the next index gets: ids are never reused, so entries a
    /// dropped index left behind are never taken for a new index's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_index_id: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TableDef {
    /// Validates and builds a definition. `primary_key` names one or two
    /// columns: the PartitionKey, then the RowKey.
    pub fn new(name: &str, mut columns: Vec<Column>, primary_key: &[String]) -> Result<TableDef> {
        limits::check_table_name(name)?;
        let mut seen = std::collections::HashSet::new();
        for c in &columns {
            if !seen.insert(c.name.clone()) {
                return Err(CatalogError::DuplicateColumn {
                    column: c.name.clone(),
                });
            }
            check_column_name(&c.name)?;
        }
        let (pk, rk) = match primary_key {
            // No primary key: hidden keys (see `ColumnDefault::Bucket`).
            [] => {
                columns.push(Column::hidden_key(BUCKET_COLUMN, ColumnDefault::Bucket));
                columns.push(Column::hidden_key(ROWID_COLUMN, ColumnDefault::RowId));
                return TableDef::new(
                    name,
                    columns,
                    &[BUCKET_COLUMN.to_owned(), ROWID_COLUMN.to_owned()],
                );
            }
            [pk] => (pk.clone(), None),
            [pk, rk] => (pk.clone(), Some(rk.clone())),
            more => {
                return Err(CatalogError::InvalidKey {
                    reason: format!(
                        "a primary key has at most two columns (PartitionKey, RowKey), not {}",
                        more.len()
                    ),
                    hint: "combine further columns into the RowKey text, e.g. 'BIB:01234__John' (the seeds' composite key)",
                });
            }
        };
        if rk.as_ref() == Some(&pk) {
            return Err(CatalogError::DuplicateColumn { column: pk });
        }
        for key in std::iter::once(&pk).chain(rk.iter()) {
            let col = columns.iter_mut().find(|c| &c.name == key).ok_or_else(|| {
                CatalogError::UnknownColumn {
                    table: name.to_owned(),
                    column: key.clone(),
                }
            })?;
            if !col.ty.key_capable() {
                return Err(CatalogError::InvalidKey {
                    reason: format!(
                        "key column \"{}\" is {}, which cannot be a PartitionKey or RowKey",
                        col.name,
                        col.ty.pg_name()
                    ),
                    hint: "key columns are TEXT, INTEGER, BIGINT, TIMESTAMPTZ, TIMESTAMP or UUID",
                });
            }
            col.not_null = true;
        }
        let properties = columns.len() - 1 - usize::from(rk.is_some());
        if properties > limits::MAX_PROPERTIES {
            return Err(CatalogError::InvalidColumnName {
                column: columns.last().map(|c| c.name.clone()).unwrap_or_default(),
                reason: format!(
                    "a table has at most {} columns besides its key columns",
                    limits::MAX_PROPERTIES
                ),
            });
        }
        Ok(TableDef {
            name: name.to_owned(),
            columns,
            partition_key: pk,
            row_key: rk,
            indexes: Vec::new(),
            next_index_id: 0,
        })
    }

    /// Adds a column (ALTER TABLE ADD COLUMN).
    pub fn with_column(&self, column: Column) -> Result<TableDef> {
        if self.columns.iter().any(|c| c.name == column.name) {
            return Err(CatalogError::DuplicateColumn {
                column: column.name,
            });
        }
        check_column_name(&column.name)?;
        let mut columns = self.columns.clone();
        columns.push(column);
        let mut key = vec![self.partition_key.clone()];
        key.extend(self.row_key.clone());
        let mut def = TableDef::new(&self.name, columns, &key)?;
        def.indexes = self.indexes.clone();
        def.next_index_id = self.next_index_id;
        Ok(def)
    }

    /// Adds an index on property columns (CREATE INDEX), local or global.
    pub fn with_index(&self, name: &str, spec: &IndexSpec) -> Result<TableDef> {
        let (columns, unique, global) = (&spec.columns, spec.unique, spec.global);
        let invalid =
            |reason: String, hint: &'static str| CatalogError::InvalidIndex { reason, hint };
        if unique && global {
            return Err(invalid(
                "a global index cannot be UNIQUE: it is maintained after the write is acknowledged, too late to refuse a duplicate".into(),
                "a local UNIQUE index enforces uniqueness within each partition, in the write's own transaction",
            ));
        }
        if self.indexes.len() >= MAX_INDEXES_PER_TABLE {
            return Err(invalid(
                format!(
                    "table \"{}\" has {} indexes, the most one table may have",
                    self.name, MAX_INDEXES_PER_TABLE
                ),
                "every index is written on every insert and uses entity-group transaction slots: drop one first",
            ));
        }
        if columns.is_empty() || columns.len() > MAX_INDEX_COLUMNS {
            return Err(invalid(
                format!(
                    "an index has 1 to {MAX_INDEX_COLUMNS} columns, not {}",
                    columns.len()
                ),
                "index the columns your queries test with = after the PartitionKey",
            ));
        }
        for (i, c) in columns.iter().enumerate() {
            let col = self.resolve(c)?;
            if columns[..i].contains(c) {
                return Err(CatalogError::DuplicateColumn { column: c.clone() });
            }
            if col.role != Role::Property {
                return Err(invalid(
                    format!(
                        "column \"{c}\" is {}, which the store already indexes",
                        match col.role {
                            Role::PartitionKey => "the PartitionKey",
                            Role::RowKey => "the RowKey",
                            _ => "a system column",
                        }
                    ),
                    "index property columns; PartitionKey and RowKey are the clustered index",
                ));
            }
        }
        if global && !spec.include.is_empty() {
            return Err(invalid(
                "a global index cannot INCLUDE columns: its entries may lag the rows, so every lookup reads the row itself".into(),
                "leave INCLUDE out, or INCLUDE on a local index (its entries change with the row, in one transaction)",
            ));
        }
        let mut include: Vec<String> = Vec::new();
        for c in &spec.include {
            let col = self.resolve(c)?;
            if include.contains(c) {
                return Err(CatalogError::DuplicateColumn { column: c.clone() });
            }
            // Keys are in every entry already; PostgreSQL allows an
            // indexed column in INCLUDE too.
            if col.role == Role::Property && !columns.contains(c) {
                include.push(c.clone());
            } else if !matches!(col.role, Role::Property | Role::PartitionKey | Role::RowKey) {
                return Err(invalid(
                    format!("column \"{c}\" is a system column"),
                    "INCLUDE property columns",
                ));
            }
        }
        // The entry's own property naming its row: a column of that name
        // cannot be carried beside it.
        if !include.is_empty()
            && let Some(c) = columns
                .iter()
                .chain(&include)
                .find(|c| c.as_str() == crate::index::BASE_PROPERTY)
        {
            return Err(invalid(
                format!("column \"{c}\" has the name index entries use for their row's RowKey"),
                "leave it out of an index with INCLUDE, or rename the column",
            ));
        }
        let id = self
            .next_index_id
            .max(self.indexes.iter().map(|i| i.id + 1).max().unwrap_or(1));
        let mut def = self.clone();
        def.next_index_id = id + 1;
        def.indexes.push(IndexDef {
            name: name.to_owned(),
            id,
            columns: columns.to_vec(),
            unique,
            building: true,
            global,
            include,
        });
        Ok(def)
    }

    /// The index named `name`, if this table has it.
    pub fn index(&self, name: &str) -> Option<&IndexDef> {
        self.indexes.iter().find(|i| i.name == name)
    }

    /// The same table keyed by other columns, for what-if planning
    /// (`EXPLAIN (KEYS (…))`, the key advisor): hidden keys are dropped,
    /// the named columns become PartitionKey and RowKey with the same
    /// checks as CREATE TABLE. Nothing is stored.
    pub fn rekeyed(&self, keys: &[String]) -> Result<TableDef> {
        let columns = self.columns.iter().filter(|c| !c.hidden).cloned().collect();
        TableDef::new(&self.name, columns, keys)
    }

    /// The role of a user column.
    fn role_of(&self, c: &Column) -> Role {
        if c.name == self.partition_key {
            Role::PartitionKey
        } else if self.row_key.as_deref() == Some(c.name.as_str()) {
            Role::RowKey
        } else {
            Role::Property
        }
    }

    fn column_ref(&self, c: &Column) -> ColumnRef {
        let role = self.role_of(c);
        ColumnRef {
            name: c.name.clone(),
            ty: c.ty,
            role,
            nullable: !c.not_null && role == Role::Property,
        }
    }

    /// Resolves a column name (user or system).
    pub fn resolve(&self, name: &str) -> Result<ColumnRef> {
        if let Some(c) = self.columns.iter().find(|c| c.name == name) {
            return Ok(self.column_ref(c));
        }
        match name {
            TIMESTAMP_COLUMN => Ok(ColumnRef {
                name: TIMESTAMP_COLUMN.to_owned(),
                ty: SqlType::Timestamptz,
                role: Role::Timestamp,
                nullable: false,
            }),
            ETAG_COLUMN => Ok(ColumnRef {
                name: ETAG_COLUMN.to_owned(),
                ty: SqlType::Text,
                role: Role::ETag,
                nullable: false,
            }),
            _ => Err(CatalogError::UnknownColumn {
                table: self.name.clone(),
                column: name.to_owned(),
            }),
        }
    }

    /// True when the table was declared without a primary key and has
    /// hidden keys.
    pub fn keyless(&self) -> bool {
        self.columns.iter().any(|c| c.hidden)
    }

    /// The columns a user declared, in order (no hidden keys): what
    /// positional INSERT and COPY fill.
    pub fn visible(&self) -> impl Iterator<Item = &Column> {
        self.columns.iter().filter(|c| !c.hidden)
    }

    /// The columns of `SELECT *`: user columns, then `timestamp`.
    pub fn star(&self) -> Vec<ColumnRef> {
        let mut v: Vec<ColumnRef> = self.visible().map(|c| self.column_ref(c)).collect();
        v.push(self.resolve(TIMESTAMP_COLUMN).expect("system column"));
        v
    }

    /// The PartitionKey column.
    pub fn partition_key_column(&self) -> ColumnRef {
        self.resolve(&self.partition_key).expect("validated")
    }

    /// The RowKey column, if the table has one.
    pub fn row_key_column(&self) -> Option<ColumnRef> {
        self.row_key
            .as_deref()
            .map(|r| self.resolve(r).expect("validated"))
    }

    /// Arrow schema of a projection.
    pub fn arrow_schema(cols: &[ColumnRef]) -> SchemaRef {
        Arc::new(Schema::new(
            cols.iter()
                .map(|c| Field::new(&c.name, c.ty.arrow(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }

    /// A column's value in an entity: keys as text, Timestamp, ETag, or the
    /// property — NULL when missing or stored with another type (another
    /// writer of the same table may have used other types).
    pub fn value_of(&self, e: &Entity, col: &ColumnRef) -> Option<Value> {
        match col.role {
            Role::PartitionKey => col.ty.decode_key(&e.partition_key),
            Role::RowKey => col.ty.decode_key(&e.row_key),
            Role::Timestamp => Some(Value::DateTime(e.timestamp)),
            Role::ETag => Some(Value::String(e.etag().0)),
            Role::Property => e
                .properties
                .get(&col.name)
                .filter(|v| col.ty.accepts(v))
                .cloned(),
        }
    }

    /// Builds the entity for a row given as (column, value) pairs. Key
    /// columns must be present and non-NULL; system columns are refused;
    /// columns not mentioned are left out (for Merge: untouched).
    pub fn entity_write<C: std::borrow::Borrow<ColumnRef>>(
        &self,
        row: &[(C, Option<Value>)],
    ) -> Result<EntityWrite> {
        self.entity_write_owned(row.iter().map(|(c, v)| (c.borrow(), v.clone())))
    }

    /// [`TableDef::entity_write`] taking the row's values, so that they move
    /// into the write instead of being copied (a multi-row INSERT builds
    /// one write per row and keeps no row).
    pub fn entity_write_owned<C: std::borrow::Borrow<ColumnRef>>(
        &self,
        row: impl IntoIterator<Item = (C, Option<Value>)>,
    ) -> Result<EntityWrite> {
        let mut pk = None;
        let mut rk = None;
        let mut properties = BTreeMap::new();
        for (col, v) in row {
            let col: &ColumnRef = col.borrow();
            if let Some(v) = &v
                && !col.ty.accepts(v)
            {
                return Err(CatalogError::InvalidText {
                    ty: col.ty.pg_name(),
                    text: format!("{v:?}"),
                });
            }
            match col.role {
                Role::PartitionKey | Role::RowKey => {
                    let text = match v {
                        Some(Value::String(s)) => s,
                        Some(v) => {
                            col.ty
                                .encode_key(&v)
                                .ok_or_else(|| CatalogError::InvalidKeyValue {
                                    column: col.name.clone(),
                                    ty: col.ty.pg_name(),
                                    value: format!("{v:?}"),
                                })?
                        }
                        None => {
                            return Err(CatalogError::NullValue {
                                table: self.name.clone(),
                                column: col.name.clone(),
                                hint: match (col.role, col.ty) {
                                    (Role::PartitionKey, SqlType::Text) => {
                                        "it is the PartitionKey; every row needs one (the empty string is a valid key)"
                                    }
                                    (Role::PartitionKey, _) => {
                                        "it is the PartitionKey; every row needs one"
                                    }
                                    (_, SqlType::Text) => {
                                        "it is the RowKey; every row needs one (the empty string is a valid key)"
                                    }
                                    _ => "it is the RowKey; every row needs one",
                                },
                            });
                        }
                    };
                    if col.role == Role::PartitionKey {
                        pk = Some(text);
                    } else {
                        crate::index::check_base_row_key(&self.name, &text)?;
                        rk = Some(text);
                    }
                }
                Role::Property => {
                    if v.is_none() && !col.nullable {
                        return Err(CatalogError::NullValue {
                            table: self.name.clone(),
                            column: col.name.clone(),
                            hint: "the column is declared NOT NULL",
                        });
                    }
                    properties.insert(col.name.clone(), v);
                }
                Role::Timestamp | Role::ETag => {
                    return Err(CatalogError::InvalidColumnName {
                        column: col.name.clone(),
                        reason: "it is a read-only system column set by the store".to_owned(),
                    });
                }
            }
        }
        let partition_key = pk.ok_or_else(|| CatalogError::NullValue {
            table: self.name.clone(),
            column: self.partition_key.clone(),
            hint: "it is the PartitionKey; every row needs one (the empty string is a valid key)",
        })?;
        let row_key = match (&self.row_key, rk) {
            (None, _) => String::new(),
            (Some(_), Some(r)) => r,
            (Some(name), None) => {
                return Err(CatalogError::NullValue {
                    table: self.name.clone(),
                    column: name.clone(),
                    hint: "it is the RowKey; every row needs one (the empty string is a valid key)",
                });
            }
        };
        Ok(EntityWrite {
            partition_key,
            row_key,
            properties,
        })
    }
}

pub(crate) fn check_column_name(name: &str) -> Result<()> {
    if name == TIMESTAMP_COLUMN || name == ETAG_COLUMN {
        return Err(CatalogError::InvalidColumnName {
            column: name.to_owned(),
            reason: format!("\"{name}\" is a system column every table has (read-only)"),
        });
    }
    limits::check_property_name(name).map_err(|e| CatalogError::InvalidColumnName {
        column: name.to_owned(),
        reason: match e {
            tablegate_store::StoreError::InvalidPropertyName { reason, .. } => reason.to_owned(),
            other => other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: SqlType) -> Column {
        Column::property(name, ty)
    }

    fn runners() -> TableDef {
        TableDef::new(
            "runners",
            vec![
                col("race", SqlType::Text),
                col("runner", SqlType::Text),
                col("age", SqlType::Int4),
            ],
            &["race".into(), "runner".into()],
        )
        .unwrap()
    }

    #[test]
    fn keys_are_of_key_types_and_at_most_two() {
        let t = runners();
        assert_eq!(t.partition_key_column().role, Role::PartitionKey);
        assert_eq!(t.row_key_column().unwrap().role, Role::RowKey);
        let t = TableDef::new("typed", vec![col("id", SqlType::Int4)], &["id".into()]).unwrap();
        assert_eq!(t.partition_key_column().ty, SqlType::Int4);
        let err = TableDef::new("bad", vec![col("d", SqlType::Float8)], &["d".into()]).unwrap_err();
        assert!(matches!(err, CatalogError::InvalidKey { .. }), "{err}");
        let err = TableDef::new(
            "bad",
            vec![
                col("a", SqlType::Text),
                col("b", SqlType::Text),
                col("c", SqlType::Text),
            ],
            &["a".into(), "b".into(), "c".into()],
        )
        .unwrap_err();
        assert!(err.to_string().contains("at most two"), "{err}");
        // No primary key: hidden keys, not in SELECT *.
        let t = TableDef::new("nokey", vec![col("a", SqlType::Int4)], &[]).unwrap();
        assert!(t.keyless());
        assert_eq!(t.partition_key, BUCKET_COLUMN);
        assert_eq!(t.row_key.as_deref(), Some(ROWID_COLUMN));
        let star: Vec<String> = t.star().into_iter().map(|c| c.name).collect();
        assert_eq!(star, ["a", "timestamp"]);
        assert_eq!(t.visible().count(), 1);
        // A column added later is visible; the keys stay hidden.
        let t = t.with_column(col("b", SqlType::Text)).unwrap();
        let names: Vec<&str> = t.visible().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(t.keyless());
    }

    #[test]
    fn system_column_names_clash() {
        for name in ["timestamp", "etag", "PartitionKey", "rowkey"] {
            let err = TableDef::new(
                "bad",
                vec![col("k", SqlType::Text), col(name, SqlType::Int4)],
                &["k".into()],
            )
            .unwrap_err();
            assert!(
                matches!(err, CatalogError::InvalidColumnName { .. }),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn rows_become_entities_and_back() {
        let t = runners();
        let r = |n: &str| t.resolve(n).unwrap();
        let w = t
            .entity_write(&[
                (r("race"), Some(Value::String("NYC".into()))),
                (r("runner"), Some(Value::String("BIB:1".into()))),
                (r("age"), None),
            ])
            .unwrap();
        assert_eq!(w.partition_key, "NYC");
        assert_eq!(w.row_key, "BIB:1");
        assert_eq!(w.properties["age"], None);
        let err = t
            .entity_write(&[
                (r("race"), None),
                (r("runner"), Some(Value::String("x".into()))),
            ])
            .unwrap_err();
        assert!(
            matches!(&err, CatalogError::NullValue { column, .. } if column == "race"),
            "{err}"
        );
        let err = t
            .entity_write(&[(
                r("timestamp"),
                Some(Value::DateTime(tablegate_store::DateTime(0))),
            )])
            .unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        // A property stored with another type reads as NULL.
        let mut e = Entity {
            partition_key: "NYC".into(),
            row_key: "BIB:1".into(),
            timestamp: tablegate_store::DateTime(0),
            etag: None,
            properties: Default::default(),
        };
        e.properties
            .insert("age".into(), Value::String("old".into()));
        assert_eq!(t.value_of(&e, &r("age")), None);
        assert_eq!(
            t.value_of(&e, &r("race")),
            Some(Value::String("NYC".into()))
        );
        assert_eq!(t.star().len(), 4);
    }
}
