pub mod pg_catalog;
mod pg_types;
pub mod sql;

pub use pg_catalog::{RelationOids, setup_pg_catalog};
