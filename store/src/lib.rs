//! The entity store: Azure Table semantics over a durable engine.
//!
//! This crate owns everything below SQL. Bottom-up:
//!
//! - [`engine`] — a narrow key/value trait with two implementations, fjall
//!   (durable, group-committed) and memory, and the layer over either that
//!   packs each partition's entities into chunks (`engine/packed/`).
//!   Private: nothing above this crate sees fjall.
//! - [`codec`] — byte encodings. Keys are `table ++ pk ++ 0x00 ++ rk`, whose
//!   byte order is (PartitionKey, RowKey) ordinal order.
//! - [`entity`], [`limits`] — the data model: EDM values, entities, ETags,
//!   Timestamps, and every documented limit as a check with its own error.
//! - [`ops`] — Insert / Replace / Merge / upserts / Delete / If-Match
//!   semantics and entity-group transaction rules, engine-independent.
//! - [`query`], [`filter`] — key spans and their interval arithmetic,
//!   residual filters (SQL three-valued logic), page requests, pages and
//!   continuation tokens.
//! - [`local`] — [`LocalStore`], the embedded store that puts these together:
//!   atomic EGTs, paged scans, per-partition statistics.
//! - [`api`] — [`TableStore`], the async page-based trait that the partition
//!   layer and remote backends implement and that the catalog, planner and
//!   gateway use.
//! - [`backend`] — [`Backend`], what the planner holds: the partition layer
//!   over the embedded engine, or a [`RemoteStore`] (Azure Table Storage, in
//!   the `tablegate-azure` crate) that is its own partition layer.
//! - [`partition`] — [`PartitionedStore`], the partition layer over
//!   [`LocalStore`]: range partitions on partition servers, routing,
//!   throttling at the scalability targets, load balancing, hot-partition
//!   and insert-pattern detection, parallel scans.
//! - [`retry`] — the retry policy, for every backend's throttling.
//! - [`driven`] — [`driven::Driven`], a channel whose producer runs in the
//!   reader's task (scans without task hand-offs).
//!
//! Deliberately limited: page scans are consistent per engine batch but not a
//! snapshot across pages, exactly like the Table service.

pub mod api;
pub mod backend;
pub mod clock;
mod codec;
pub mod driven;
mod engine;
pub mod entity;
pub mod error;
pub mod filter;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod limits;
pub mod local;
pub mod ops;
pub mod partition;
pub mod query;
pub mod retry;

pub use api::{
    PartitionStats, ScanEstimate, TableInfo, TableStats, TableStore, deferring_sync,
    write_on_this_thread, writing_on_this_thread,
};
pub use backend::{Backend, KeyOrder, RemoteStore};
pub use clock::{Clock, ManualClock, SystemClock};
pub use codec::{EncodedEntities, EncodedEntity, RawProperty, ValueRef, stored_len};
pub use engine::Durability;
pub use engine::health::{EngineFailure, HealthReport};
pub use entity::{DateTime, ETag, EdmType, Entity, EntityWrite, IfMatch, Timestamp, Value};
pub use error::{KeyKind, Result, StoreError};
pub use filter::{CmpOp, Field, Filter};
pub use local::{LocalStore, StoreOptions};
pub use ops::{OpOutcome, Operation, Written};
pub use partition::{PartitionConfig, PartitionedStore, Targets};
pub use query::{ContinuationToken, KeyBox, KeyInterval, Page, PageRequest, Query};
pub use retry::{RetryPolicy, RetryStats};

/// `name` in lower case, copied only if it has upper-case letters (table
/// names are matched case-insensitively; most are written in lower case,
/// and the lookup runs for every operation).
pub(crate) fn lowercase(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}
