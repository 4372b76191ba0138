//! [`Backend`]: the store the planner and the gateway hold — either the
//! embedded engine under tablegate's own partition layer, or a remote table
//! service (Azure Table Storage, the Cosmos DB Table API) that *is* its own
//! partition layer.
//!
//! Both speak [`TableStore`]; this type adds what only one of them can give
//! and says plainly what the other cannot:
//!
//! - scans: the embedded layer fans a scan out over its partition servers
//!   ([`PartitionedStore::scan`]); the service does not say where its range
//!   partitions are, so a remote scan past its first page is cut at
//!   PartitionKey boundaries probed from the table
//!   ([`crate::partition::scan::remote`]);
//! - estimates: the embedded engine counts what a scan would read; a remote
//!   service keeps no statistics a client can read, so estimates are
//!   *unknown* (`None`) and EXPLAIN says so;
//! - EXPLAIN detail: a remote backend describes the request it sends (the
//!   OData `$filter`, and whether the residual is finished locally);
//! - operations views (range partitions, servers, hot partitions, balancer
//!   events) exist only for the embedded layer ([`Backend::partitioned`]).
//!
//! Throttling: the embedded layer throttles at the scalability targets
//! itself; a remote service throttles for real (503/429), which the remote
//! backend maps to [`crate::StoreError::ServerBusy`] so the same retry policy
//! applies.

use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{PartitionStats, ScanEstimate, TableInfo, TableStats, TableStore};
use crate::entity::Entity;
use crate::error::Result;
use crate::ops::{OpOutcome, Operation};
use crate::partition::PartitionedStore;
use crate::partition::scan::{ScanOptions, ScanStream};
use crate::query::{Page, PageRequest, Query};

/// The order a store returns a query's entities in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// PartitionKey, then RowKey, by code point (what SQL's text order
    /// gives under the C collation): the embedded engine.
    CodePoint,
    /// By UTF-16 code units (Azure Table Storage): the same as code points
    /// unless a key holds characters at or above U+D800, where astral
    /// characters sort before U+E000..U+FFFF.
    Utf16,
    /// No order (the Cosmos DB Table API).
    Unordered,
}

/// A table service reached over the network.
pub trait RemoteStore: TableStore {
    /// The order its query results come in.
    fn key_order(&self) -> KeyOrder;
    /// What EXPLAIN shows for the backend (e.g. `Azure Table Storage (account x)`).
    fn describe(&self) -> String;
    /// The store for tablegate's own system tables (catalog, users): the same
    /// account, with the reserved names allowed.
    fn system(&self) -> Arc<dyn TableStore>;
    /// EXPLAIN lines for the request(s) a query sends: the filter, the
    /// projection, and what is finished locally.
    fn explain_query(&self, table: &str, query: &Query) -> Vec<String>;
}

/// The store under the planner. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded engine with tablegate's partition layer.
    Embedded(PartitionedStore),
    /// A remote table service.
    Remote(Arc<dyn RemoteStore>),
}

impl From<PartitionedStore> for Backend {
    fn from(p: PartitionedStore) -> Self {
        Backend::Embedded(p)
    }
}

impl Backend {
    /// The order scans return entities in.
    pub fn key_order(&self) -> KeyOrder {
        match self {
            Backend::Embedded(_) => KeyOrder::CodePoint,
            Backend::Remote(r) => r.key_order(),
        }
    }

    /// The embedded partition layer, when that is the backend.
    pub fn partitioned(&self) -> Option<&PartitionedStore> {
        match self {
            Backend::Embedded(p) => Some(p),
            Backend::Remote(_) => None,
        }
    }

    /// Where tablegate keeps its own tables (unthrottled, sees system names).
    pub fn system(&self) -> Arc<dyn TableStore> {
        match self {
            Backend::Embedded(p) => Arc::new(p.local().clone()),
            Backend::Remote(r) => r.system(),
        }
    }

    /// The remote backend's description, `None` for the embedded engine.
    pub fn remote_description(&self) -> Option<String> {
        match self {
            Backend::Embedded(_) => None,
            Backend::Remote(r) => Some(r.describe()),
        }
    }

    /// Starts a scan (must run inside a tokio runtime).
    pub fn scan(&self, table: &str, query: &Query, opts: ScanOptions) -> Result<ScanStream> {
        match self {
            Backend::Embedded(p) => p.scan(table, query, opts),
            Backend::Remote(r) => Ok(crate::partition::scan::remote(
                r.clone(),
                table,
                query.clone(),
                opts,
            )),
        }
    }

    /// `table`'s range partitions as (lower bound, upper bound, server). A
    /// remote table is one opaque range served by "server 0".
    pub fn layout(&self, table: &str) -> Result<Vec<(String, Option<String>, usize)>> {
        match self {
            Backend::Embedded(p) => p.layout(table),
            Backend::Remote(_) => Ok(vec![(String::new(), None, 0)]),
        }
    }

    /// The partition server serving `pk` of `table`; a remote table is
    /// one range on server 0, as [`Self::layout`] says.
    pub fn server_of(&self, table: &str, pk: &str) -> Option<usize> {
        match self {
            Backend::Embedded(p) => p.server_of(table, pk),
            Backend::Remote(_) => Some(0),
        }
    }

    /// What scanning `query` would read; `None` when the backend cannot
    /// know (a remote service keeps no statistics we can read).
    pub fn estimate_blocking(&self, table: &str, query: &Query) -> Result<Option<ScanEstimate>> {
        match self {
            Backend::Embedded(p) => p.estimate_blocking(table, query).map(Some),
            Backend::Remote(_) => Ok(None),
        }
    }

    /// EXPLAIN lines describing the remote request; empty when embedded.
    pub fn explain_query(&self, table: &str, query: &Query) -> Vec<String> {
        match self {
            Backend::Embedded(_) => Vec::new(),
            Backend::Remote(r) => r.explain_query(table, query),
        }
    }

    fn store(&self) -> &dyn TableStore {
        match self {
            Backend::Embedded(p) => p,
            Backend::Remote(r) => r.as_ref(),
        }
    }
}

#[async_trait]
impl TableStore for Backend {
    async fn create_table(&self, name: &str) -> Result<TableInfo> {
        self.store().create_table(name).await
    }

    async fn drop_table(&self, name: &str) -> Result<()> {
        self.store().drop_table(name).await
    }

    async fn list_tables(&self) -> Result<Vec<TableInfo>> {
        self.store().list_tables().await
    }

    async fn get(&self, table: &str, partition_key: &str, row_key: &str) -> Result<Option<Entity>> {
        self.store().get(table, partition_key, row_key).await
    }

    async fn query(&self, table: &str, query: &Query, page: &PageRequest) -> Result<Page> {
        self.store().query(table, query, page).await
    }

    async fn execute(&self, table: &str, ops: Arc<[Operation]>) -> Result<Vec<OpOutcome>> {
        self.store().execute(table, ops).await
    }

    async fn table_stats(&self, table: &str) -> Result<TableStats> {
        self.store().table_stats(table).await
    }

    async fn sync(&self) -> Result<()> {
        self.store().sync().await
    }

    async fn partition_stats(
        &self,
        table: &str,
        lo: Bound<String>,
        hi: Bound<String>,
        limit: usize,
    ) -> Result<Vec<PartitionStats>> {
        self.store().partition_stats(table, lo, hi, limit).await
    }
}
