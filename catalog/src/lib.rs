//! SQL table definitions over the store.
//!
//! - [`types`] — SQL types ↔ EDM types ↔ Arrow types, PostgreSQL names and
//!   OIDs, and text input parsing (`'42'`, `'2026-11-22 08:00+01'`, `'\x00ff'`).
//! - [`table`] — [`TableDef`]: columns, the PartitionKey column (first
//!   primary-key column) and RowKey column (second, or the empty string),
//!   the read-only system columns `timestamp` and `etag`, and the mapping
//!   between SQL rows and entities.
//! - [`keycodec`] — the order-preserving text a typed key column (integer,
//!   bigint, timestamp, uuid) is stored as in PartitionKey / RowKey.
//! - [`index`] — local secondary indexes: the RowKey of an index entry,
//!   which sorts after every base entity of its partition.
//! - [`catalog`] — [`Catalog`]: definitions persisted in the system table
//!   `tgsys_catalog`, CREATE / DROP / ALTER ADD COLUMN.
//!
//! The pg_catalog / information_schema views over these definitions belong
//! to the gateway (they are a protocol concern) and are not built yet.

pub mod catalog;
pub mod error;
pub mod index;
pub mod keycodec;
pub mod table;
pub mod types;

pub use catalog::{CATALOG_TABLE, Catalog, Created, QueueListener, REFRESH_EVERY};
pub use error::{CatalogError, Result};
pub use index::{INDEX_ROW_PREFIX, IndexDef, IndexSpec};
pub use table::{
    BUCKET_COLUMN, Column, ColumnDefault, ColumnRef, ETAG_COLUMN, HIDDEN_BUCKETS, ROWID_COLUMN,
    Role, TIMESTAMP_COLUMN, TableDef,
};
pub use tablegate_store as store;
pub use types::SqlType;
