//! The entity store: Azure Table semantics over a durable engine.
//!
//! This crate owns everything below SQL. Bottom-up:
//!
//! - [`engine`] — a narrow key/value trait with two implementations, fjall
//!   (durable, group-committed) and memory. Private: nothing above this
//!   crate sees fjall.
//! - [`codec`] — byte encodings. Keys are `table ++ pk ++ 0x00 ++ rk`, whose
//!   byte order is (PartitionKey, RowKey) ordinal order.
//! - [`entity`], [`limits`] — the data model: EDM values, entities, ETags,
//!   Timestamps, and every documented limit as a check with its own error.
//! - [`ops`] — Insert / Replace / Merge / upserts / Delete / If-Match
//!   semantics and entity-group transaction rules, engine-independent.
//! - [`query`], [`filter`] — key spans, residual filters (SQL three-valued
//!   logic), page requests, pages and continuation tokens.
//! - [`local`] — [`LocalStore`], the embedded store that puts these together:
//!   atomic EGTs, paged scans, per-partition statistics.
//! - [`api`] — [`TableStore`], the async page-based trait that the partition
//!   layer and remote backends implement and that the catalog, planner and
//!   gateway use.
//!
//! Deliberately limited for now: the store has no partition servers or
//! throttling of its own (that is the partition layer's job, on top of
//! [`TableStore`]), and page scans are consistent per batch but not a
//! snapshot across pages, like the Table service.

pub mod api;
pub mod clock;
mod codec;
mod engine;
pub mod entity;
pub mod error;
pub mod filter;
pub mod limits;
pub mod local;
pub mod ops;
pub mod query;

pub use api::{PartitionStats, TableInfo, TableStats, TableStore};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::Durability;
pub use entity::{DateTime, ETag, EdmType, Entity, EntityWrite, IfMatch, Timestamp, Value};
pub use error::{KeyKind, Result, StoreError};
pub use filter::{CmpOp, Field, Filter};
pub use local::{LocalStore, StoreOptions};
pub use ops::{OpOutcome, Operation};
pub use query::{ContinuationToken, KeyBox, KeyInterval, Page, PageRequest, Query};
