//! The catalog's one error type.

use tablegate_store::StoreError;

/// Why a catalog operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// No such table.
    #[error("relation \"{name}\" does not exist")]
    UnknownTable {
        /// As written.
        name: String,
    },
    /// CREATE TABLE of an existing name.
    #[error("relation \"{name}\" already exists")]
    TableExists {
        /// As written.
        name: String,
    },
    /// Another gateway changed the table's definition (or created the
    /// table) at the same time; the other change won.
    #[error("relation \"{name}\" was changed by another gateway at the same time")]
    ChangedElsewhere {
        /// As written.
        name: String,
    },
    /// No such column.
    #[error("column \"{column}\" of relation \"{table}\" does not exist")]
    UnknownColumn {
        /// Table.
        table: String,
        /// Column as written.
        column: String,
    },
    /// A column name used twice.
    #[error("column \"{column}\" specified more than once")]
    DuplicateColumn {
        /// The column.
        column: String,
    },
    /// A type the store cannot hold.
    #[error("type \"{name}\" is not supported")]
    UnsupportedType {
        /// The type as written.
        name: String,
        /// What to use instead.
        hint: &'static str,
    },
    /// A primary key the store cannot map to PartitionKey/RowKey.
    #[error("{reason}")]
    InvalidKey {
        /// What is wrong.
        reason: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// NULL where the column cannot hold it (a key, or NOT NULL).
    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NullValue {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// Why it cannot be NULL.
        hint: &'static str,
    },
    /// A column name that clashes with a system column or store rule.
    #[error("column name \"{column}\" is not allowed: {reason}")]
    InvalidColumnName {
        /// The column.
        column: String,
        /// Why.
        reason: String,
    },
    /// Text that does not parse as the column's type.
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    InvalidText {
        /// PostgreSQL type name.
        ty: &'static str,
        /// The text (truncated).
        text: String,
    },
    /// A key value with no stored key text (a time outside the EDM range).
    #[error("{ty} value {value} of key column \"{column}\" is out of range for a key")]
    InvalidKeyValue {
        /// The key column.
        column: String,
        /// PostgreSQL type name.
        ty: &'static str,
        /// The value.
        value: String,
    },
    /// An index entry's RowKey would exceed the store's key length.
    #[error(
        "index row for \"{index}\" on \"{table}\" is {units} UTF-16 units, more than a RowKey holds ({limit})",
        limit = tablegate_store::limits::MAX_KEY_UTF16
    )]
    IndexRowTooLong {
        /// The index.
        index: String,
        /// Its table.
        table: String,
        /// The entry's key length.
        units: usize,
    },
    /// A base RowKey in the range reserved for index entries.
    #[error(
        "a RowKey of \"{table}\" may not begin with U+10FFFF: it is reserved for index entries"
    )]
    ReservedRowKey {
        /// The table.
        table: String,
    },
    /// No such index.
    #[error("index \"{name}\" does not exist")]
    UnknownIndex {
        /// As written.
        name: String,
    },
    /// CREATE INDEX of a name in use.
    #[error("relation \"{name}\" already exists")]
    IndexExists {
        /// As written.
        name: String,
    },
    /// An index the store cannot keep (a key column, too many columns or
    /// indexes).
    #[error("{reason}")]
    InvalidIndex {
        /// What is wrong.
        reason: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// A stored definition that does not decode.
    #[error("corrupt catalog entry: {0}")]
    Corrupt(String),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The catalog's result type.
pub type Result<T, E = CatalogError> = std::result::Result<T, E>;
