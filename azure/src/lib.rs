//! Azure Table Storage (and the Cosmos DB Table API) as a tablegate store:
//! [`AzureStore`] implements [`TableStore`] over the Table service REST API
//! (JSON, service version [`http::SERVICE_VERSION`]), so the planner,
//! EXPLAIN and the gateway run unchanged on a storage account instead of the
//! embedded engine (`tablegate serve --backend azure`).
//!
//! - [`conn`] — connection strings (`AccountName/AccountKey/TableEndpoint`,
//!   SAS, `UseDevelopmentStorage=true` for Azurite);
//! - [`sign`] — SharedKey signing;
//! - [`http`] — requests, and the one mapping from service error codes to
//!   store errors (throttling → `ServerBusy`, retried by the caller's policy);
//! - [`edm`] — EDM values in JSON (`@odata.type` annotations);
//! - [`odata`] — a store query as an OData `$filter`/`$select`, within the
//!   15-comparison limit;
//! - [`batch`] — entity-group transactions as `$batch` changesets.
//!
//! Semantics kept from the embedded store, and what it costs:
//! - Every EGT is checked here (`check_batch`): one PartitionKey, at most
//!   100 operations and 4 MiB, each entity once — Azurite accepts
//!   cross-partition batches, the real service does not; neither may we.
//! - A Merge (and InsertOrMerge) reads the entity first and sends a Replace
//!   guarded by the ETag it read (or an Insert when it was absent). The
//!   service's MERGE cannot remove a property (SQL `SET x = NULL`), and the
//!   result must be known for `RETURNING`; a concurrent writer in between
//!   makes the write fail with an ETag or exists conflict (SQLSTATE 40001),
//!   never lose an update.
//! - Throttling answers (503, 429, 500 OperationTimedOut) and connections
//!   that break after a request was sent are `ServerBusy`, which the
//!   caller's retry policy retries (waiting at least the service's
//!   `x-ms-retry-after-ms`). A write whose outcome is unknown (the broken
//!   connection, the timeout) is first settled by reading its entities back:
//!   an applied write is not sent again, so nothing is applied twice.
//! - Every page is re-checked locally with [`Query::selects`]: the filter
//!   sent may be broader than the query (untranslatable predicates, the
//!   comparison limit), never narrower.
//! - Deliberately limited: the service keeps no statistics a client can
//!   read, so table and partition counts are refused and EXPLAIN's
//!   estimates are "unknown"; `existed` of an upsert's outcome is `false`
//!   (the service does not say); a page's time budget and
//!   `stop_at_partition` are the embedded layer's and are ignored here.
//!
//! Table names: Azure allows letters and digits only, so user tables with
//! `_` are refused with that reason; tablegate's own system tables
//! (`tgsys_catalog`, `tgsys_users`) are stored as `tgsyscatalog`, ... and
//! the `tgsys` prefix is reserved.

pub mod batch;
pub mod conn;
pub mod edm;
pub mod error;
pub mod http;
pub mod odata;
pub mod sign;

use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use reqwest::Method;
use serde_json::Value as Json;
use tablegate_store::ops::check_batch;
use tablegate_store::retry::{RetryPolicy, RetryStats, with_retry};
use tablegate_store::{
    ContinuationToken, DateTime, ETag, Entity, EntityWrite, IfMatch, KeyBox, KeyOrder, OpOutcome,
    Operation, Page, PageRequest, PartitionStats, Query, RemoteStore, Result, StoreError,
    TableInfo, TableStats, TableStore, Written,
};

pub use conn::{Account, Service};
pub use error::AzureError;

use http::{Client, Request, Subject, entity_path, response_error};

/// Prefix of tablegate's own tables in an account (Azure table names
/// cannot hold the embedded store's `tgsys_`).
const SYSTEM_PREFIX: &str = "tgsys";

/// A storage account's Table service as a [`TableStore`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AzureStore {
    client: Arc<Client>,
    /// The system view may use `tgsys_` names (catalog, users); the user
    /// view refuses and hides them.
    system: bool,
}

impl AzureStore {
    /// Connects with a connection string and checks that the account
    /// answers and accepts the credential (one table listing).
    /// `service` overrides the one the endpoint's host names.
    pub async fn connect(
        conn: &str,
        service: Option<Service>,
    ) -> std::result::Result<AzureStore, StoreError> {
        let mut account = Account::parse(conn)?;
        if let Some(s) = service {
            account.service = s;
        }
        let store = AzureStore {
            client: Arc::new(Client::new(account)?),
            system: false,
        };
        let r = store
            .client
            .send(Request::new(Method::GET, "/Tables".into()).param("$top", "1"))
            .await?;
        if !r.status.is_success() {
            return Err(response_error(&r, Subject::Table("Tables")));
        }
        Ok(store)
    }

    /// The account this store talks to.
    pub fn account(&self) -> &Account {
        &self.client.account
    }

    /// The name of `table` in the account, checked.
    fn remote_name(&self, table: &str) -> Result<String> {
        let lower = table.to_ascii_lowercase();
        if self.system && lower.starts_with("tgsys_") {
            return Ok(table.replace('_', ""));
        }
        let bad = |reason| {
            Err(StoreError::InvalidTableName {
                name: table.to_owned(),
                reason,
            })
        };
        if lower.starts_with(SYSTEM_PREFIX) {
            return bad("names starting with tgsys are reserved for the system");
        }
        tablegate_store::limits::check_table_name(table)?;
        if table.contains('_') {
            return bad("Azure Table Storage allows only letters and digits in table names");
        }
        Ok(table.to_owned())
    }

    async fn send(&self, req: Request) -> Result<http::Response> {
        Ok(self.client.send(req).await?)
    }

    /// Reads one entity (no projection).
    async fn read(&self, remote: &str, table: &str, pk: &str, rk: &str) -> Result<Option<Entity>> {
        let r = self
            .send(Request::new(Method::GET, entity_path(remote, pk, rk)))
            .await?;
        if r.status.as_u16() == 404
            && http::error_parts(r.status, r.header("x-ms-error-code"), &r.body).0
                == "ResourceNotFound"
        {
            return Ok(None);
        }
        if !r.status.is_success() {
            return Err(response_error(&r, Subject::Table(table)));
        }
        let mut e = edm::entity(&r.json()?)?;
        if let Some(t) = r.header("ETag") {
            e.etag = Some(ETag(t.to_owned()));
        }
        Ok(Some(e))
    }

    /// Turns Merges into Replaces/Inserts guarded by what was read (see the
    /// crate docs); returns the operations to send and, for each, the
    /// entity it leaves (keys and properties; the Timestamp and ETag come
    /// from the response) and whether one existed.
    async fn prepare(
        &self,
        remote: &str,
        table: &str,
        ops: &[Operation],
    ) -> Result<Vec<(Operation, Option<Entity>, bool)>> {
        let mut out = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().cloned().enumerate() {
            let at = |e: StoreError| match e {
                // The service would report an earlier failing operation
                // first: check those against what is stored now.
                e @ (StoreError::ETagMismatch { .. }
                | StoreError::EntityNotFound { .. }
                | StoreError::EntityAlreadyExists { .. }) => (e, true),
                e => (e, false),
            };
            let fail = async |e: StoreError| -> StoreError {
                let (e, check_earlier) = at(e);
                if check_earlier {
                    for (j, earlier) in ops[..i].iter().enumerate() {
                        let (pk, rk) = earlier.keys();
                        let now = DateTime(chrono::Utc::now().timestamp_micros());
                        match self.read(remote, table, pk, rk).await {
                            Ok(cur) => {
                                if let Err(x) = earlier.result_on(cur.as_ref(), now) {
                                    return op_error(x, j);
                                }
                            }
                            Err(x) => return x,
                        }
                    }
                }
                op_error(e, i)
            };
            let now = DateTime(chrono::Utc::now().timestamp_micros());
            let prepared = match &op {
                Operation::Merge { .. } | Operation::InsertOrMerge(_) => {
                    let (pk, rk) = op.keys();
                    let current = match self.read(remote, table, pk, rk).await {
                        Ok(c) => c,
                        Err(e) => return Err(fail(e).await),
                    };
                    let result = match op.result_on(current.as_ref(), now) {
                        Ok(r) => r,
                        Err(e) => return Err(fail(e).await),
                    };
                    let entity = result.expect("a merge leaves an entity");
                    let write = write_of(&entity);
                    let existed = current.is_some();
                    let sent = match current {
                        Some(c) => Operation::Replace {
                            entity: write,
                            if_match: IfMatch::ETag(c.etag()),
                        },
                        None => Operation::Insert(write),
                    };
                    (sent, Some(entity), existed)
                }
                Operation::Delete { .. } => (op, None, true),
                // The service does not say whether an upsert replaced.
                Operation::Insert(_) | Operation::InsertOrReplace(_) => {
                    let e = match op.result_on(None, now) {
                        Ok(e) => e,
                        Err(e) => return Err(fail(e).await),
                    };
                    (op, e, false)
                }
                Operation::Replace { entity: w, .. } => {
                    let e = match Operation::InsertOrReplace(w.clone()).result_on(None, now) {
                        Ok(e) => e,
                        Err(e) => return Err(fail(e).await),
                    };
                    (op, e, true)
                }
            };
            out.push(prepared);
        }
        Ok(out)
    }

    /// The HTTP verb, path, If-Match and body of one operation.
    fn shape(remote: &str, op: &Operation) -> (Method, String, Option<String>, Option<Json>) {
        let if_match = |m: &IfMatch| match m {
            IfMatch::Any => "*".to_owned(),
            IfMatch::ETag(t) => t.0.clone(),
        };
        let (pk, rk) = op.keys();
        let path = entity_path(remote, pk, rk);
        match op {
            Operation::Insert(w) => (
                Method::POST,
                format!("/{remote}"),
                None,
                Some(edm::write_body(w)),
            ),
            Operation::InsertOrReplace(w) => (Method::PUT, path, None, Some(edm::write_body(w))),
            Operation::InsertOrMerge(w) => (merge(), path, None, Some(edm::write_body(w))),
            Operation::Replace {
                entity,
                if_match: m,
            } => (
                Method::PUT,
                path,
                Some(if_match(m)),
                Some(edm::write_body(entity)),
            ),
            Operation::Merge {
                entity,
                if_match: m,
            } => (
                merge(),
                path,
                Some(if_match(m)),
                Some(edm::write_body(entity)),
            ),
            Operation::Delete { if_match: m, .. } => {
                (Method::DELETE, path, Some(if_match(m)), None)
            }
        }
    }

    async fn execute_one(
        &self,
        remote: &str,
        table: &str,
        op: &Operation,
    ) -> std::result::Result<Option<String>, Failure> {
        let (method, path, if_match, body) = Self::shape(remote, op);
        let mut req = Request::new(method, path).header("Prefer", "return-no-content");
        if let Some(m) = if_match {
            req = req.header("If-Match", m);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = self.send_write(req).await?;
        if !r.status.is_success() {
            let (pk, rk) = op.keys();
            return Err(Failure::of(
                &r,
                op_error(response_error(&r, Subject::Entity { table, pk, rk }), 0),
            ));
        }
        Ok(r.header("ETag").map(str::to_owned))
    }

    /// Sends a write; a broken connection after sending is
    /// [`Failure::Unknown`], anything before it [`Failure::Known`].
    async fn send_write(&self, req: Request) -> std::result::Result<http::Response, Failure> {
        match self.client.send(req).await {
            Ok(r) => Ok(r),
            Err(e @ AzureError::Interrupted { .. }) => Err(Failure::Unknown(e.into())),
            Err(e) => Err(Failure::Known(e.into())),
        }
    }

    /// After a write whose outcome is unknown, reads what the service holds:
    /// the ETags when every operation's effect is there (it was applied, and
    /// must not be sent again: an Insert would fail as a duplicate, a
    /// Replace on its stale ETag), `None` when not (an EGT is all or
    /// nothing, so it is safe to send again). A concurrent writer leaving
    /// exactly the values written is taken for this write.
    async fn settle(
        &self,
        remote: &str,
        table: &str,
        prepared: &[(Operation, Option<Entity>, bool)],
    ) -> Result<Option<Vec<Option<String>>>> {
        let policy = RetryPolicy::default();
        let mut etags = Vec::with_capacity(prepared.len());
        for (op, wanted, _) in prepared {
            let (pk, rk) = op.keys();
            let mut stats = RetryStats::default();
            let now = with_retry(&policy, &mut stats, || self.read(remote, table, pk, rk)).await?;
            let replaced = match op {
                Operation::Replace {
                    if_match: IfMatch::ETag(t),
                    ..
                }
                | Operation::Delete {
                    if_match: IfMatch::ETag(t),
                    ..
                } => Some(t),
                _ => None,
            };
            let applied = match (wanted, &now) {
                (None, None) => true,
                (Some(w), Some(n)) => {
                    w.properties == n.properties && replaced.is_none_or(|t| n.etag() != *t)
                }
                _ => false,
            };
            if !applied {
                return Ok(None);
            }
            etags.push(now.and_then(|e| e.etag).map(|t| t.0));
        }
        Ok(Some(etags))
    }

    async fn execute_batch(
        &self,
        remote: &str,
        table: &str,
        ops: &[Operation],
    ) -> std::result::Result<Vec<Option<String>>, Failure> {
        let parts: Vec<batch::Part> = ops
            .iter()
            .map(|op| {
                let (method, path, if_match, body) = Self::shape(remote, op);
                batch::Part {
                    method: match method.as_str() {
                        "POST" => "POST",
                        "PUT" => "PUT",
                        "DELETE" => "DELETE",
                        _ => "MERGE",
                    },
                    url: self.client.url(&path),
                    if_match,
                    body,
                }
            })
            .collect();
        let (body, content_type) = batch::body(&parts);
        let mut req = Request::new(Method::POST, "/$batch".into());
        req.body = Some((content_type, body.into_bytes()));
        let r = self.send_write(req).await?;
        if !r.status.is_success() {
            // The whole batch was refused (throttling, auth, a malformed
            // body) or timed out in the service.
            return Err(Failure::of(&r, response_error(&r, Subject::Table(table))));
        }
        match batch::parse(&String::from_utf8_lossy(&r.body), ops.len())
            .map_err(|e| Failure::Known(e.into()))?
        {
            batch::Outcome::Applied(etags) => Ok(etags),
            batch::Outcome::Failed {
                index,
                status,
                code,
                message,
            } => {
                let (pk, rk) = ops[index].keys();
                let status = reqwest::StatusCode::from_u16(status)
                    .unwrap_or(reqwest::StatusCode::BAD_REQUEST);
                let e =
                    http::service_error(status, &code, &message, Subject::Entity { table, pk, rk });
                Err(Failure::Known(op_error(e, index)))
            }
        }
    }
}

/// Why a write request failed, by whether the service may have applied it.
enum Failure {
    /// It was refused, or never sent: nothing was applied.
    Known(StoreError),
    /// The connection broke after sending, or the service timed out
    /// (500 OperationTimedOut: "may or may not have succeeded"): see
    /// [`AzureStore::settle`].
    Unknown(StoreError),
}

impl Failure {
    /// A refusal answered with `r`.
    fn of(r: &http::Response, e: StoreError) -> Failure {
        let timed_out = r.status.as_u16() == 500 && matches!(e, StoreError::ServerBusy { .. });
        if timed_out {
            Failure::Unknown(e)
        } else {
            Failure::Known(e)
        }
    }
}

/// Names the failing operation of an EGT, as the embedded store does;
/// errors about the table or the service as a whole stay as they are.
fn op_error(e: StoreError, index: usize) -> StoreError {
    match e {
        StoreError::ServerBusy { .. }
        | StoreError::Timeout(_)
        | StoreError::TableNotFound { .. }
        | StoreError::Remote { .. }
        | StoreError::BatchOperationFailed { .. } => e,
        e => e.at_operation(index),
    }
}

fn merge() -> Method {
    Method::from_bytes(b"MERGE").expect("a valid method")
}

/// An entity's properties as a full write.
fn write_of(e: &Entity) -> EntityWrite {
    let mut w = EntityWrite::new(e.partition_key.clone(), e.row_key.clone());
    for (k, v) in &e.properties {
        w.properties.insert(k.clone(), Some(v.clone()));
    }
    w
}

/// Continuation tokens: the service's NextPartitionKey/NextRowKey, bound to
/// the query's fingerprint so a token cannot resume another query.
fn encode_token(fingerprint: u64, npk: &str, nrk: Option<&str>) -> ContinuationToken {
    let j = serde_json::json!([fingerprint.to_string(), npk, nrk]);
    ContinuationToken::from_string(format!(
        "az1{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(j.to_string())
    ))
}

fn decode_token(t: &ContinuationToken, fingerprint: u64) -> Result<(String, Option<String>)> {
    let bad = |reason| StoreError::InvalidContinuationToken { reason };
    let b = t
        .as_str()
        .strip_prefix("az1")
        .and_then(|b| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b)
                .ok()
        })
        .ok_or(bad("not a token this server issued"))?;
    let j: Json = serde_json::from_slice(&b).map_err(|_| bad("token is damaged"))?;
    if j[0].as_str() != Some(fingerprint.to_string().as_str()) {
        return Err(bad("token belongs to a different query"));
    }
    let npk = j[1].as_str().ok_or(bad("token is damaged"))?.to_owned();
    Ok((npk, j[2].as_str().map(str::to_owned)))
}

#[async_trait]
impl TableStore for AzureStore {
    async fn create_table(&self, name: &str) -> Result<TableInfo> {
        let remote = self.remote_name(name)?;
        let r = self
            .send(
                Request::new(Method::POST, "/Tables".into())
                    .header("Prefer", "return-no-content")
                    .json(&serde_json::json!({ "TableName": remote })),
            )
            .await?;
        if !r.status.is_success() {
            return Err(response_error(&r, Subject::Table(name)));
        }
        Ok(TableInfo {
            name: name.to_owned(),
        })
    }

    async fn drop_table(&self, name: &str) -> Result<()> {
        let remote = self.remote_name(name)?;
        let r = self
            .send(Request::new(
                Method::DELETE,
                format!("/Tables('{}')", http::enc(&remote)),
            ))
            .await?;
        if !r.status.is_success() {
            return Err(response_error(&r, Subject::Table(name)));
        }
        Ok(())
    }

    async fn list_tables(&self) -> Result<Vec<TableInfo>> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut req = Request::new(Method::GET, "/Tables".into());
            if let Some(n) = &next {
                req = req.param("NextTableName", n.clone());
            }
            let r = self.send(req).await?;
            if !r.status.is_success() {
                return Err(response_error(&r, Subject::Table("Tables")));
            }
            let j = r.json()?;
            for t in j["value"].as_array().into_iter().flatten() {
                let Some(name) = t["TableName"].as_str() else {
                    continue;
                };
                let system = name.to_ascii_lowercase().starts_with(SYSTEM_PREFIX);
                if self.system || !system {
                    out.push(TableInfo {
                        name: name.to_owned(),
                    });
                }
            }
            match r.header("x-ms-continuation-NextTableName") {
                Some(n) if !n.is_empty() => next = Some(n.to_owned()),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn get(&self, table: &str, partition_key: &str, row_key: &str) -> Result<Option<Entity>> {
        let remote = self.remote_name(table)?;
        self.read(&remote, table, partition_key, row_key).await
    }

    async fn query(&self, table: &str, query: &Query, page: &PageRequest) -> Result<Page> {
        let remote = self.remote_name(table)?;
        if !(1..=tablegate_store::limits::MAX_PAGE_SIZE).contains(&page.max_entities) {
            return Err(StoreError::InvalidQuery {
                reason: format!(
                    "page size {} is outside 1..={}",
                    page.max_entities,
                    tablegate_store::limits::MAX_PAGE_SIZE
                ),
            });
        }
        // The token resumes the query it was issued for; a page asked to
        // stop early sends that query clipped below its stop (the service's
        // continuation is a position, valid under any filter).
        let fingerprint = query.fingerprint(table);
        let clipped;
        let query = match &page.stop_at_partition {
            Some(stop) => {
                clipped = Query {
                    spans: query
                        .spans
                        .iter()
                        .map(|b| KeyBox {
                            pk: b.pk.clip("", Some(stop)),
                            rk: b.rk.clone(),
                        })
                        .collect(),
                    ..query.clone()
                };
                &clipped
            }
            None => query,
        };
        let empty = Page {
            entities: Vec::new(),
            encoded: Default::default(),
            scanned: 0,
            continuation: None,
            next_partition_key: None,
        };
        if query
            .spans
            .iter()
            .all(|b| b.pk.is_empty() || b.rk.is_empty())
        {
            return Ok(empty);
        }
        let o = odata::translate(query, self.client.account.service);
        let mut req = Request::new(Method::GET, format!("/{remote}()"))
            .param("$top", page.max_entities.to_string());
        if let Some(f) = &o.filter {
            req = req.param("$filter", f.clone());
        }
        if let Some(s) = &o.select {
            req = req.param("$select", s.clone());
        }
        if let Some(t) = &page.continuation {
            let (npk, nrk) = decode_token(t, fingerprint)?;
            req = req.param("NextPartitionKey", npk);
            if let Some(r) = nrk {
                req = req.param("NextRowKey", r);
            }
        }
        let r = self.send(req).await?;
        if !r.status.is_success() {
            return Err(response_error(&r, Subject::Table(table)));
        }
        let j = r.json()?;
        let mut entities = Vec::new();
        let mut scanned = 0u64;
        for v in j["value"].as_array().into_iter().flatten() {
            scanned += 1;
            let mut e = edm::entity(v)?;
            if query.selects(&e) {
                // `$select` also fetched what the re-check needed.
                if let Some(p) = &query.projection {
                    e.properties.retain(|k, _| p.contains(k));
                }
                entities.push(e);
            }
        }
        let continuation = r
            .header("x-ms-continuation-NextPartitionKey")
            .filter(|s| !s.is_empty())
            .map(|npk| {
                encode_token(
                    fingerprint,
                    npk,
                    r.header("x-ms-continuation-NextRowKey")
                        .filter(|s| !s.is_empty()),
                )
            });
        Ok(Page {
            entities,
            encoded: Default::default(),
            scanned,
            continuation,
            // The service's NextPartitionKey is its own encoding, not the key.
            next_partition_key: None,
        })
    }

    async fn execute(&self, table: &str, ops: Arc<[Operation]>) -> Result<Vec<OpOutcome>> {
        let remote = self.remote_name(table)?;
        check_batch(&ops)?;
        let prepared = self.prepare(&remote, table, &ops).await?;
        let sent: Vec<Operation> = prepared.iter().map(|(op, _, _)| op.clone()).collect();
        let result = if sent.len() == 1 {
            self.execute_one(&remote, table, &sent[0])
                .await
                .map(|etag| vec![etag])
        } else {
            self.execute_batch(&remote, table, &sent).await
        };
        let etags = match result {
            Ok(etags) => etags,
            Err(Failure::Unknown(e)) => match self.settle(&remote, table, &prepared).await? {
                Some(etags) => etags,
                // Not applied: the caller's retry policy sends it again.
                None => return Err(e),
            },
            Err(Failure::Known(e)) => return Err(e),
        };
        Ok(prepared
            .into_iter()
            .zip(etags)
            .map(|((_, entity, existed), etag)| OpOutcome {
                written: match entity {
                    Some(mut e) => {
                        if let Some(t) = &etag {
                            e.timestamp = edm::etag_time(t).unwrap_or(e.timestamp);
                            e.etag = Some(ETag(t.clone()));
                        }
                        Written::Entity(e)
                    }
                    None => Written::Deleted,
                },
                existed,
            })
            .collect())
    }

    async fn table_stats(&self, table: &str) -> Result<TableStats> {
        Err(StoreError::InvalidQuery {
            reason: format!(
                "the Azure Table service keeps no statistics for {table}: count with SELECT count(*)"
            ),
        })
    }

    async fn partition_stats(
        &self,
        table: &str,
        _lo: Bound<String>,
        _hi: Bound<String>,
        _limit: usize,
    ) -> Result<Vec<PartitionStats>> {
        self.table_stats(table).await.map(|_| Vec::new())
    }
}

impl RemoteStore for AzureStore {
    fn describe(&self) -> String {
        let a = &self.client.account;
        format!("{} (account {}, {})", a.service.name(), a.name, a.endpoint)
    }

    fn key_order(&self) -> KeyOrder {
        match self.client.account.service {
            Service::Storage => KeyOrder::Utf16,
            Service::Cosmos => KeyOrder::Unordered,
        }
    }

    fn system(&self) -> Arc<dyn TableStore> {
        Arc::new(AzureStore {
            client: self.client.clone(),
            system: true,
        })
    }

    fn explain_query(&self, _table: &str, query: &Query) -> Vec<String> {
        let o = odata::translate(query, self.client.account.service);
        let mut l = vec![match &o.filter {
            Some(f) => format!("OData $filter: {f} ({} comparisons)", o.comparisons),
            None => "OData $filter: none (every entity of the table)".to_owned(),
        }];
        if let Some(s) = &o.select {
            l.push(format!("OData $select: {s}"));
        }
        l.push(
            match o.coverage {
                odata::Coverage::Exact => "Filtered by the service (each page re-checked locally)",
                odata::Coverage::ResidualLocal => {
                    "Part of the residual filter has no OData form: finished locally on each page"
                }
                odata::Coverage::Broadened => {
                    "Over the 15-comparison limit: a broader filter is sent, keys and residual are finished locally on each page"
                }
            }
            .to_owned(),
        );
        l
    }
}
