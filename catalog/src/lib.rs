//! Table definitions for SQL over the store (issue 4): SQL columns and their
//! EDM types, which columns are the PartitionKey and RowKey, Arrow schemas,
//! and the pg_catalog / information_schema view of them.
//!
//! Not built yet: this crate only fixes the dependency direction
//! (catalog → store).
pub use tablegate_store as store;
