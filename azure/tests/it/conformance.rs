//! The store trait's semantics, checked on both backends with one test body.
//!
//! Every case is an `async fn(&dyn TableStore, table)`; the [`conformance!`]
//! macro runs it as `conformance::local::<case>` against an in-memory
//! [`LocalStore`] and as `conformance::azure::<case>` against Azurite through
//! [`AzureStore`], each in a fresh table of its own (unique names, so tests
//! run in parallel against one Azurite and reruns do not collide). Expected
//! values are written out here, never taken from either store. A few
//! Azure-only tests pin the deliberate differences, and
//! [`service_errors_map_to_store_errors`] covers the error mapping Azurite
//! cannot provoke (throttling). See [`DIVERGENCES`].

use std::collections::BTreeMap;
use std::ops::Bound;

use tablegate_azure::AzureStore;
use tablegate_azure::http::{Subject, service_error};
use tablegate_store::{
    CmpOp, DateTime, Entity, EntityWrite, Field, Filter, IfMatch, KeyBox, KeyInterval, LocalStore,
    OpOutcome, Operation, PageRequest, Query, RemoteStore, StoreError, TableInfo, TableStore,
    Value,
};

/// Known differences between the real Azure Table service, Azurite and the
/// embedded store, and how each is handled by tablegate and by these tests.
pub const DIVERGENCES: &str = "\
1. Cross-partition EGTs: the Azure service refuses an entity-group transaction
   whose operations span PartitionKeys; Azurite (3.x) accepts and applies it.
   tablegate checks every EGT itself (ops::check_batch, also 100 operations,
   4 MiB, each entity once) before sending, so both backends answer
   BatchCrossPartition: tested by `egt_limits_and_failures` on both, and
   `azurite_alone_accepts_cross_partition_batches` shows the raw behaviour.
2. Throttling: Azurite never throttles. The mapping of 503 ServerBusy,
   500 OperationTimedOut and 429 (Cosmos DB) to StoreError::ServerBusy
   (is_retryable) and of 409/404/412/400/403 to the non-retryable errors is
   covered by the unit test `service_errors_map_to_store_errors` of
   tablegate_azure::http::service_error.
3. `existed` of an InsertOrReplace: the service does not say whether an
   entity was replaced, so AzureStore reports false; the embedded store
   knows. (An InsertOrMerge reads first on Azure, so it knows.) Conformance
   cases do not assert it for upserts, the differential test compares it for
   every other kind; `azure_upsert_outcome_does_not_know_existed` pins
   Azure's answers.
4. Statistics: the service keeps none a client can read, so table_stats and
   partition_stats are refused (InvalidQuery) on Azure; the embedded store
   counts. Pinned by `azure_refuses_statistics`.
5. Timestamp precision: the service keeps 100 ns ticks (Azurite: ms plus
   four hrtime digits), the store microseconds (truncated). ETags carry the
   service's full precision and are compared as opaque strings, never
   through the Timestamp; tests never compare Timestamps across stores, and
   Azurite's ETags/Timestamps are not monotonic below a millisecond, so
   monotonic Timestamps are not asserted on Azure.
6. ETags differ between stores (Azure: the service's datetime ETag; embedded:
   derived from the Timestamp). Tests read each store's ETag from that store.
7. Table names: Azure allows letters and digits only and the `tgsys` prefix
   is reserved for tablegate's system tables, so test tables are
   alphanumeric on both backends (`azure_table_names`).
8. Dropping a table: the real service keeps the name in TableBeingDeleted
   (409, mapped to ServerBusy, retryable) for a while; Azurite and the
   embedded store free it at once, so `tables` recreates a dropped table.
9. Paging: pages may be shorter than asked (the service stops at partition
   and 5-second boundaries; AzureStore re-checks each page locally) and may
   be empty while carrying a continuation token; every scan here loops until
   the token is gone.
10. Filters on DateTimes: Azurite (3.37, DateTimeNode) compares datetime
   literals as JavaScript Dates, truncated to the millisecond; the service
   keeps 100 ns and the store microseconds. Handled: odata sends DateTime
   bounds widened to whole milliseconds and every page is re-checked
   locally (`filters_on_typed_constants`).
11. Double literals with an exponent (`1E+20`): Azurite's lexer
   (/^-?[0-9]+(\\.[0-9]+)?L?$/) reads them as property names. Handled:
   odata writes doubles as plain decimal digits, valid for both.
12. Failure order in EGTs: the service (and the embedded store) report the
   first failing operation. AzureStore evaluates Merges while preparing the
   batch; when one fails it checks the earlier operations against what is
   stored first, so the same index is reported
   (`egt_reports_the_first_failing_operation`).
";

// ---- the harness --------------------------------------------------------------

/// Runs each listed case on both backends, in a fresh table each.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        /// The cases on the embedded store (in memory).
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let s = tablegate_store::LocalStore::in_memory();
                    let t = super::fresh_table(&s, stringify!($case)).await;
                    super::$case(&s, &t).await;
                    let _ = tablegate_store::TableStore::drop_table(&s, &t).await;
                }
            )*
        }
        /// The cases on Azurite.
        mod azure {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let s = crate::azurite::store().await;
                    let t = super::fresh_table(&s, stringify!($case)).await;
                    super::$case(&s, &t).await;
                    let _ = tablegate_store::TableStore::drop_table(&s, &t).await;
                }
            )*
        }
    };
}

conformance!(
    tables,
    insert_and_get,
    insert_of_existing_key,
    conditional_writes,
    writes_on_missing_entities,
    upserts,
    merge_with_null_removes,
    edm_types_round_trip,
    filters_on_typed_constants,
    projection_returns_only_named_properties,
    odd_keys,
    egt_of_100,
    egt_limits_and_failures,
    egt_reports_the_first_failing_operation,
    paging,
    continuation_tokens_are_bound_to_their_query,
    invalid_requests,
);

/// Creates a uniquely named table for a case.
async fn fresh_table(s: &dyn TableStore, case: &str) -> String {
    let tag: String = case
        .split('_')
        .map(|w| &w[..w.len().min(4)])
        .collect::<String>()
        .chars()
        .take(24)
        .collect();
    let t = crate::azurite::table_name(&tag);
    s.create_table(&t)
        .await
        .unwrap_or_else(|e| panic!("create table {t}: {e}"));
    t
}

/// Asserts a result is an error whose root matches the pattern.
macro_rules! assert_root {
    ($res:expr, $pat:pat $(if $guard:expr)?) => {
        match $res {
            Ok(v) => panic!("expected {}, got Ok({v:?})", stringify!($pat)),
            Err(e) => assert!(
                matches!(e.root(), $pat $(if $guard)?),
                "expected {}, got {e:?}",
                stringify!($pat)
            ),
        }
    };
}

fn w(pk: &str, rk: &str) -> EntityWrite {
    EntityWrite::new(pk, rk)
}

fn int(n: i32) -> Value {
    Value::Int32(n)
}

fn text(s: &str) -> Value {
    Value::String(s.to_owned())
}

fn props<const N: usize>(kv: [(&str, Value); N]) -> BTreeMap<String, Value> {
    kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The index of the failing operation, when the error names one.
pub fn failed_at(e: &StoreError) -> Option<usize> {
    match e {
        StoreError::BatchOperationFailed { index, .. } => Some(*index),
        _ => None,
    }
}

/// One operation's outcome with the entity it left: what a caller that
/// asks for it (RETURNING) gets.
#[derive(Debug)]
struct Done {
    existed: bool,
    entity: Option<Entity>,
    outcome: OpOutcome,
}

impl Done {
    fn etag(&self) -> Option<tablegate_store::ETag> {
        let etag = self.outcome.etag();
        assert_eq!(
            etag,
            self.entity.as_ref().map(Entity::etag),
            "the outcome's ETag is its entity's"
        );
        etag
    }
}

async fn one(s: &dyn TableStore, t: &str, op: Operation) -> Result<Done, StoreError> {
    let mut out = s.execute(t, vec![op.clone()].into()).await?;
    assert_eq!(out.len(), 1);
    let outcome = out.remove(0);
    Ok(Done {
        existed: outcome.existed,
        entity: outcome.entity(&op),
        outcome,
    })
}

async fn get(s: &dyn TableStore, t: &str, pk: &str, rk: &str) -> Option<Entity> {
    s.get(t, pk, rk)
        .await
        .unwrap_or_else(|e| panic!("get ({pk:?}, {rk:?}): {e}"))
}

/// The properties of an existing entity.
async fn state(s: &dyn TableStore, t: &str, pk: &str, rk: &str) -> BTreeMap<String, Value> {
    get(s, t, pk, rk)
        .await
        .unwrap_or_else(|| panic!("({pk:?}, {rk:?}) should exist"))
        .properties
}

/// Every entity of a query, page by page: pages may be short or empty with
/// a token; each has at most `page` entities.
pub async fn scan(s: &dyn TableStore, t: &str, q: &Query, page: usize) -> Vec<Entity> {
    let mut req = PageRequest::first(page);
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let p = s
            .query(t, q, &req)
            .await
            .unwrap_or_else(|e| panic!("query {q:?}: {e}"));
        assert!(p.entities.len() <= page, "{} > {page}", p.entities.len());
        out.extend(p.entities);
        match p.continuation {
            Some(c) => req = req.resume(c),
            None => return out,
        }
    }
    panic!("query {q:?} never ended");
}

fn keys(es: &[Entity]) -> Vec<(String, String)> {
    es.iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

// ---- the cases ------------------------------------------------------------------

/// Create, list, drop; TableExists and TableNotFound; names are
/// case-insensitive.
async fn tables(s: &dyn TableStore, t: &str) {
    let names = |v: Vec<TableInfo>| -> Vec<String> {
        v.into_iter().map(|i| i.name.to_ascii_lowercase()).collect()
    };
    assert!(names(s.list_tables().await.unwrap()).contains(&t.to_ascii_lowercase()));
    assert_root!(s.create_table(t).await, StoreError::TableExists { .. });
    assert_root!(
        s.create_table(&t.to_ascii_uppercase()).await,
        StoreError::TableExists { .. }
    );

    let other = format!("{t}b");
    assert_eq!(s.create_table(&other).await.unwrap().name, other);
    assert!(names(s.list_tables().await.unwrap()).contains(&other.to_ascii_lowercase()));
    one(s, &other, Operation::Insert(w("p", "r")))
        .await
        .unwrap();
    s.drop_table(&other).await.unwrap();
    assert!(!names(s.list_tables().await.unwrap()).contains(&other.to_ascii_lowercase()));

    assert_root!(s.drop_table(&other).await, StoreError::TableNotFound { .. });
    assert_root!(
        s.get(&other, "p", "r").await,
        StoreError::TableNotFound { .. }
    );
    assert_root!(
        s.execute(&other, vec![Operation::Insert(w("p", "r"))].into())
            .await,
        StoreError::TableNotFound { .. }
    );
    assert_root!(
        s.execute(
            &other,
            vec![
                Operation::Insert(w("p", "r")),
                Operation::Insert(w("p", "s"))
            ]
            .into()
        )
        .await,
        StoreError::TableNotFound { .. }
    );
    assert_root!(
        s.query(&other, &Query::full_scan(), &PageRequest::first(10))
            .await,
        StoreError::TableNotFound { .. }
    );

    // A dropped name can be used again, and the new table is empty.
    s.create_table(&other).await.unwrap();
    assert_eq!(get(s, &other, "p", "r").await, None);
    assert!(scan(s, &other, &Query::full_scan(), 1000).await.is_empty());
    s.drop_table(&other).await.unwrap();
}

/// Insert returns the entity as stored; get reads the same properties,
/// ETag and Timestamp; missing keys read as None.
async fn insert_and_get(s: &dyn TableStore, t: &str) {
    let before = now_micros();
    let out = one(
        s,
        t,
        Operation::Insert(w("p", "r").with("a", int(1)).with("b", text("x"))),
    )
    .await
    .unwrap();
    assert!(!out.existed);
    let e = out.entity.clone().expect("an insert leaves an entity");
    assert_eq!((e.partition_key.as_str(), e.row_key.as_str()), ("p", "r"));
    let expected = props([("a", int(1)), ("b", text("x"))]);
    assert_eq!(e.properties, expected);

    let got = get(s, t, "p", "r").await.expect("inserted");
    assert_eq!(got.properties, expected);
    assert_eq!(got.etag(), e.etag(), "the outcome's ETag is the stored one");
    assert_eq!(got.timestamp, e.timestamp);
    // The clocks are the same machine's (Azurite runs locally).
    let slack = 300_000_000;
    assert!(
        (before - slack..=now_micros() + slack).contains(&got.timestamp.micros()),
        "{:?}",
        got.timestamp
    );
    let scanned = scan(s, t, &Query::full_scan(), 1000).await;
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].properties, expected);
    assert_eq!(scanned[0].timestamp, got.timestamp);
    assert_eq!(scanned[0].etag(), got.etag());

    assert_eq!(get(s, t, "p", "missing").await, None);
    assert_eq!(get(s, t, "missing", "r").await, None);
    assert_eq!(get(s, t, "P", "r").await, None, "keys are case-sensitive");
}

/// Inserting an existing key fails with EntityAlreadyExists and changes
/// nothing.
async fn insert_of_existing_key(s: &dyn TableStore, t: &str) {
    one(s, t, Operation::Insert(w("p", "r").with("a", int(1))))
        .await
        .unwrap();
    let err = one(s, t, Operation::Insert(w("p", "r").with("a", int(2))))
        .await
        .unwrap_err();
    assert!(
        matches!(err.root(), StoreError::EntityAlreadyExists { partition_key, row_key }
            if partition_key == "p" && row_key == "r"),
        "{err:?}"
    );
    assert_eq!(failed_at(&err), Some(0), "{err:?}");
    assert_eq!(state(s, t, "p", "r").await, props([("a", int(1))]));
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cond {
    Replace,
    Merge,
    Delete,
}

fn conditional(kind: Cond, write: EntityWrite, if_match: IfMatch) -> Operation {
    match kind {
        Cond::Replace => Operation::Replace {
            entity: write,
            if_match,
        },
        Cond::Merge => Operation::Merge {
            entity: write,
            if_match,
        },
        Cond::Delete => Operation::Delete {
            partition_key: write.partition_key,
            row_key: write.row_key,
            if_match,
        },
    }
}

/// Replace, Merge and Delete with `*`, with the ETag just read, with the
/// ETag an earlier write returned, and with a stale ETag.
async fn conditional_writes(s: &dyn TableStore, t: &str) {
    for kind in [Cond::Replace, Cond::Merge, Cond::Delete] {
        let rk = format!("{kind:?}");
        let base = || w("p", &rk).with("a", int(1)).with("b", text("x"));
        let change = |n: i32| w("p", &rk).with("a", int(n));
        // What `change(n)` leaves on top of `base()`.
        let after = |n: i32| match kind {
            Cond::Replace => Some(props([("a", int(n))])),
            Cond::Merge => Some(props([("a", int(n)), ("b", text("x"))])),
            Cond::Delete => None,
        };
        let rk_ref: &str = &rk;
        let now = move || async move { get(s, t, "p", rk_ref).await.map(|e| e.properties) };

        // `*`.
        one(s, t, Operation::InsertOrReplace(base())).await.unwrap();
        let out = one(s, t, conditional(kind, change(2), IfMatch::Any))
            .await
            .unwrap();
        assert!(out.existed, "{kind:?}");
        assert_eq!(out.entity.as_ref().map(|e| e.properties.clone()), after(2));
        assert_eq!(now().await, after(2), "{kind:?} with *");

        // The ETag of a fresh read.
        one(s, t, Operation::InsertOrReplace(base())).await.unwrap();
        let etag = get(s, t, "p", &rk).await.unwrap().etag();
        one(s, t, conditional(kind, change(3), IfMatch::ETag(etag)))
            .await
            .unwrap_or_else(|e| panic!("{kind:?} with the current ETag: {e}"));
        assert_eq!(now().await, after(3), "{kind:?} with the current ETag");

        // The ETag the last write returned.
        let written = one(s, t, Operation::InsertOrReplace(base())).await.unwrap();
        let etag = written.etag().expect("an upsert leaves an entity");
        one(s, t, conditional(kind, change(4), IfMatch::ETag(etag)))
            .await
            .unwrap_or_else(|e| panic!("{kind:?} with the written ETag: {e}"));
        assert_eq!(now().await, after(4), "{kind:?} with the written ETag");

        // A stale ETag: another write came in between.
        one(s, t, Operation::InsertOrReplace(base())).await.unwrap();
        let stale = get(s, t, "p", &rk).await.unwrap().etag();
        let other = w("p", &rk).with("c", Value::Boolean(true));
        one(s, t, conditional(Cond::Replace, other, IfMatch::Any))
            .await
            .unwrap();
        let err = one(
            s,
            t,
            conditional(kind, change(5), IfMatch::ETag(stale.clone())),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err.root(), StoreError::ETagMismatch { partition_key, row_key, .. }
                if partition_key == "p" && *row_key == rk),
            "{kind:?}: {err:?}"
        );
        assert!(!err.is_retryable());
        assert_eq!(
            now().await,
            Some(props([("c", Value::Boolean(true))])),
            "{kind:?}: a refused write changes nothing"
        );
        // A stale ETag stays stale after the entity is deleted and recreated.
        one(s, t, conditional(Cond::Delete, w("p", &rk), IfMatch::Any))
            .await
            .unwrap();
        one(s, t, Operation::Insert(base())).await.unwrap();
        assert_root!(
            one(s, t, conditional(kind, change(6), IfMatch::ETag(stale))).await,
            StoreError::ETagMismatch { .. }
        );
    }
}

/// Replace, Merge and Delete of a missing entity: EntityNotFound, with `*`
/// and with an ETag; nothing is created.
async fn writes_on_missing_entities(s: &dyn TableStore, t: &str) {
    let written = one(s, t, Operation::Insert(w("p", "gone"))).await.unwrap();
    let etag = written.etag().unwrap();
    one(
        s,
        t,
        conditional(Cond::Delete, w("p", "gone"), IfMatch::Any),
    )
    .await
    .unwrap();
    for kind in [Cond::Replace, Cond::Merge, Cond::Delete] {
        for (pk, rk) in [("p", "gone"), ("p", "never"), ("q", "never")] {
            for m in [IfMatch::Any, IfMatch::ETag(etag.clone())] {
                let err = one(
                    s,
                    t,
                    conditional(kind, w(pk, rk).with("a", int(1)), m.clone()),
                )
                .await
                .unwrap_err();
                assert!(
                    matches!(err.root(), StoreError::EntityNotFound { partition_key, row_key }
                        if partition_key == pk && row_key == rk),
                    "{kind:?} ({pk}, {rk}) {m:?}: {err:?}"
                );
                assert_eq!(failed_at(&err), Some(0));
            }
        }
    }
    assert!(scan(s, t, &Query::full_scan(), 1000).await.is_empty());
}

/// InsertOrReplace and InsertOrMerge on missing and existing entities.
async fn upserts(s: &dyn TableStore, t: &str) {
    let ior = |rk: &str, kv: &[(&str, Value)]| {
        let mut e = w("p", rk);
        for (k, v) in kv {
            e = e.with(*k, v.clone());
        }
        e
    };
    // Missing: both create.
    let out = one(
        s,
        t,
        Operation::InsertOrReplace(ior("r", &[("a", int(1)), ("b", text("x"))])),
    )
    .await
    .unwrap();
    assert!(!out.existed);
    assert_eq!(
        state(s, t, "p", "r").await,
        props([("a", int(1)), ("b", text("x"))])
    );
    let out = one(
        s,
        t,
        Operation::InsertOrMerge(ior("m", &[("a", int(1)), ("b", text("x"))])),
    )
    .await
    .unwrap();
    assert!(!out.existed);
    assert_eq!(
        state(s, t, "p", "m").await,
        props([("a", int(1)), ("b", text("x"))])
    );

    // Existing: replace drops what it does not name, merge keeps it.
    let out = one(s, t, Operation::InsertOrReplace(ior("r", &[("c", int(3))])))
        .await
        .unwrap();
    assert_eq!(out.entity.unwrap().properties, props([("c", int(3))]));
    assert_eq!(state(s, t, "p", "r").await, props([("c", int(3))]));
    let out = one(
        s,
        t,
        Operation::InsertOrMerge(ior("m", &[("a", int(4)), ("c", int(3))])),
    )
    .await
    .unwrap();
    let expected = props([("a", int(4)), ("b", text("x")), ("c", int(3))]);
    assert_eq!(out.entity.unwrap().properties, expected);
    assert_eq!(state(s, t, "p", "m").await, expected);

    // An upsert's ETag guards the next write.
    let out = one(s, t, Operation::InsertOrMerge(ior("m", &[("d", int(5))])))
        .await
        .unwrap();
    one(
        s,
        t,
        Operation::Replace {
            entity: ior("m", &[("e", int(6))]),
            if_match: IfMatch::ETag(out.etag().unwrap()),
        },
    )
    .await
    .unwrap();
    assert_eq!(state(s, t, "p", "m").await, props([("e", int(6))]));
}

/// Inserts `p`/`r` with `a` = 1, `b` = 'x', `c` = true.
async fn insert_abc(s: &dyn TableStore, t: &str) {
    let e = w("p", "r")
        .with("a", int(1))
        .with("b", text("x"))
        .with("c", Value::Boolean(true));
    one(s, t, Operation::Insert(e)).await.unwrap();
}

/// A NULL in a Merge (or InsertOrMerge) removes the property; in an Insert
/// or Replace it is simply not stored.
async fn merge_with_null_removes(s: &dyn TableStore, t: &str) {
    insert_abc(s, t).await;
    let out = one(
        s,
        t,
        Operation::Merge {
            entity: w("p", "r").with_null("a").with("d", int(4)),
            if_match: IfMatch::Any,
        },
    )
    .await
    .unwrap();
    let expected = props([("b", text("x")), ("c", Value::Boolean(true)), ("d", int(4))]);
    assert_eq!(out.entity.unwrap().properties, expected);
    assert_eq!(state(s, t, "p", "r").await, expected);

    // With the ETag just read.
    let etag = get(s, t, "p", "r").await.unwrap().etag();
    one(
        s,
        t,
        Operation::Merge {
            entity: w("p", "r").with_null("b").with_null("never"),
            if_match: IfMatch::ETag(etag),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        state(s, t, "p", "r").await,
        props([("c", Value::Boolean(true)), ("d", int(4))])
    );

    one(s, t, Operation::InsertOrMerge(w("p", "r").with_null("c")))
        .await
        .unwrap();
    assert_eq!(state(s, t, "p", "r").await, props([("d", int(4))]));

    // Removing the last property leaves an entity with none.
    one(s, t, Operation::InsertOrMerge(w("p", "r").with_null("d")))
        .await
        .unwrap();
    assert_eq!(state(s, t, "p", "r").await, BTreeMap::new());

    one(
        s,
        t,
        Operation::InsertOrMerge(w("p", "new").with_null("z").with("y", int(1))),
    )
    .await
    .unwrap();
    assert_eq!(state(s, t, "p", "new").await, props([("y", int(1))]));

    one(
        s,
        t,
        Operation::Insert(w("p", "ins").with_null("z").with("y", int(1))),
    )
    .await
    .unwrap();
    assert_eq!(state(s, t, "p", "ins").await, props([("y", int(1))]));
    one(
        s,
        t,
        Operation::Replace {
            entity: w("p", "ins").with_null("y").with("x", int(2)),
            if_match: IfMatch::Any,
        },
    )
    .await
    .unwrap();
    assert_eq!(state(s, t, "p", "ins").await, props([("x", int(2))]));
    one(
        s,
        t,
        Operation::InsertOrReplace(w("p", "ins").with_null("x")),
    )
    .await
    .unwrap();
    assert_eq!(state(s, t, "p", "ins").await, BTreeMap::new());
}

fn guid(n: u128) -> Value {
    Value::Guid(n.to_be_bytes())
}

/// Every EDM type, with edge values, through insert, get, a scan, a
/// projection and a merge.
async fn edm_types_round_trip(s: &dyn TableStore, t: &str) {
    let values: Vec<(&str, Value)> = vec![
        ("s", text("it's \"quoted\" ünïcode 😀 \\ / % & + = ? #")),
        ("sEmpty", text("")),
        ("sLines", text("line 1\r\nline 2\ttab")),
        ("i32", int(-7)),
        ("i32Min", int(i32::MIN)),
        ("i32Max", int(i32::MAX)),
        ("i32Zero", int(0)),
        ("i64", Value::Int64(5)),
        ("i64Min", Value::Int64(i64::MIN)),
        ("i64Max", Value::Int64(i64::MAX)),
        ("i64Big", Value::Int64(9_007_199_254_740_993)),
        ("dTwo", Value::Double(2.0)),
        ("dZero", Value::Double(0.0)),
        ("dHalf", Value::Double(-0.5)),
        ("dTiny", Value::Double(5e-324)),
        ("dHuge", Value::Double(1.797_693_134_862_315_7e308)),
        ("dThird", Value::Double(1.0 / 3.0)),
        ("dNaN", Value::Double(f64::NAN)),
        ("dInf", Value::Double(f64::INFINITY)),
        ("dNegInf", Value::Double(f64::NEG_INFINITY)),
        ("bTrue", Value::Boolean(true)),
        ("bFalse", Value::Boolean(false)),
        ("dtEpoch", Value::DateTime(DateTime(0))),
        ("dtMicros", Value::DateTime(DateTime(1_795_636_800_123_456))),
        ("dtMin", Value::DateTime(DateTime::MIN)),
        ("dtMax", Value::DateTime(DateTime::MAX)),
        ("dtOld", Value::DateTime(DateTime(-1))),
        ("g", guid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
        ("gZero", guid(0)),
        ("gMax", guid(u128::MAX)),
        ("bin", Value::Binary((0..=255).collect())),
        ("binEmpty", Value::Binary(Vec::new())),
    ];
    let mut write = w("p", "r");
    for (k, v) in &values {
        write = write.with(*k, v.clone());
    }
    let expected: BTreeMap<String, Value> = values
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let out = one(s, t, Operation::Insert(write)).await.unwrap();
    assert_eq!(out.entity.unwrap().properties, expected);

    let check = |got: &BTreeMap<String, Value>, how: &str| {
        for (k, v) in &expected {
            let g = got.get(k);
            assert_eq!(g, Some(v), "{how}: property {k}");
            assert_eq!(g.map(Value::edm_type), Some(v.edm_type()), "{how}: {k}");
        }
        assert_eq!(got.len(), expected.len(), "{how}: {got:?}");
    };
    check(&state(s, t, "p", "r").await, "get");
    let scanned = scan(s, t, &Query::full_scan(), 1000).await;
    assert_eq!(scanned.len(), 1);
    check(&scanned[0].properties, "scan");

    // A projection returns just the named properties (and the keys).
    let q = Query::full_scan().with_projection(vec![
        "dTwo".into(),
        "i64Min".into(),
        "g".into(),
        "notThere".into(),
    ]);
    let projected = scan(s, t, &q, 1000).await;
    assert_eq!(keys(&projected), vec![("p".into(), "r".into())]);
    assert_eq!(
        projected[0].properties,
        props([
            ("dTwo", Value::Double(2.0)),
            ("g", guid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
            ("i64Min", Value::Int64(i64::MIN)),
        ])
    );

    // A merge (read, then a guarded replace on Azure) keeps every value.
    one(
        s,
        t,
        Operation::Merge {
            entity: w("p", "r").with("extra", int(1)),
            if_match: IfMatch::Any,
        },
    )
    .await
    .unwrap();
    let mut merged = state(s, t, "p", "r").await;
    assert_eq!(merged.remove("extra"), Some(int(1)));
    check(&merged, "merge");
}

/// A filter comparing a property with a constant of its own EDM type
/// finds exactly the entities [`Query::selects`] picks, for every type and
/// for the edge values: doubles whose shortest form has an exponent, and
/// DateTimes that differ below a millisecond.
async fn filters_on_typed_constants(s: &dyn TableStore, t: &str) {
    let values: Vec<(&str, Value)> = vec![
        ("s", text("it's \"quoted\" ünïcode 😀")),
        ("sEmpty", text("")),
        ("i32", int(-7)),
        ("i64Min", Value::Int64(i64::MIN)),
        ("i64Big", Value::Int64(9_007_199_254_740_993)),
        ("dTwo", Value::Double(2.0)),
        ("dThird", Value::Double(1.0 / 3.0)),
        ("dTiny", Value::Double(5e-324)),
        ("dSmall", Value::Double(1.5e-7)),
        ("dHuge", Value::Double(1.797_693_134_862_315_7e308)),
        ("dBig", Value::Double(1e20)),
        ("bTrue", Value::Boolean(true)),
        ("dtEpoch", Value::DateTime(DateTime(0))),
        ("dtMicros", Value::DateTime(DateTime(1_795_636_800_123_456))),
        ("dtMin", Value::DateTime(DateTime::MIN)),
        ("dtOld", Value::DateTime(DateTime(-1))),
        ("g", guid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
        ("bin", Value::Binary(vec![0, 1, 127, 128, 255])),
    ];
    let mut write = w("p", "r");
    for (k, v) in &values {
        write = write.with(*k, v.clone());
    }
    one(s, t, Operation::Insert(write)).await.unwrap();
    let stored = scan(s, t, &Query::full_scan(), 1000).await;

    let mut filters = Vec::new();
    for (k, v) in &values {
        filters.push(Filter::cmp(Field::prop(*k), CmpOp::Eq, v.clone()));
    }
    // Ordered comparisons that hold by less than a millisecond (the
    // store keeps microseconds, the service 100 ns) or near an exponent.
    let dt = |name: &str, op, micros| {
        Filter::cmp(Field::prop(name), op, Value::DateTime(DateTime(micros)))
    };
    let at = 1_795_636_800_123_456;
    filters.extend([
        dt("dtMicros", CmpOp::Gt, at - 1),
        dt("dtMicros", CmpOp::Ge, at - 56),
        dt("dtMicros", CmpOp::Lt, at + 1),
        dt("dtMicros", CmpOp::Le, at + 100),
        dt("dtMicros", CmpOp::Ne, at + 1),
        dt("dtEpoch", CmpOp::Lt, 1),
        dt("dtEpoch", CmpOp::Gt, -1),
        Filter::cmp(Field::prop("dTiny"), CmpOp::Gt, Value::Double(0.0)),
        Filter::cmp(Field::prop("dSmall"), CmpOp::Lt, Value::Double(2e-7)),
        Filter::cmp(Field::prop("dBig"), CmpOp::Ge, Value::Double(1e19)),
        Filter::cmp(Field::prop("dHuge"), CmpOp::Gt, Value::Double(1e300)),
    ]);
    let mut missed = Vec::new();
    for f in filters {
        let q = Query::full_scan().with_filter(f);
        let want = stored.iter().filter(|e| q.selects(e)).count();
        assert_eq!(want, 1, "the filter is meant to hold: {q:?}");
        let got = scan(s, t, &q, 1000).await.len();
        if got != want {
            let sent =
                tablegate_azure::odata::translate(&q, tablegate_azure::Service::Storage).filter;
            missed.push(format!("{:?}: sent as {sent:?}", q.filter.unwrap()));
        }
    }
    assert!(
        missed.is_empty(),
        "filters that miss the entity: {missed:#?}"
    );
}

/// A projection returns the keys, the Timestamp and the named properties
/// only, also when the filter reads other properties.
async fn projection_returns_only_named_properties(s: &dyn TableStore, t: &str) {
    insert_abc(s, t).await;
    let cases = [
        (Query::full_scan(), props([("a", int(1))])),
        (
            Query::full_scan().with_filter(Filter::cmp(Field::prop("b"), CmpOp::Eq, text("x"))),
            props([("a", int(1))]),
        ),
        (
            Query::full_scan().with_filter(Filter::And(vec![
                Filter::cmp(Field::prop("c"), CmpOp::Eq, Value::Boolean(true)),
                Filter::IsNull(Field::prop("zz")),
            ])),
            props([("a", int(1))]),
        ),
    ];
    for (q, want) in cases {
        let q = q.with_projection(vec!["a".into(), "zz".into()]);
        let got = scan(s, t, &q, 1000).await;
        assert_eq!(keys(&got), vec![("p".into(), "r".into())], "{q:?}");
        assert_eq!(got[0].properties, want, "{q:?}");
    }
}

/// Keys with spaces, quotes, percent signs, non-ASCII and the empty
/// RowKey, through single writes, EGTs, point reads and queries.
async fn odd_keys(s: &dyn TableStore, t: &str) {
    let pks = ["a b", "it's", "''", "é😀", "50%+&=", " ", "x"];
    let rks = ["", "x'y", "a b", "ü", "%2F", "1+1=2", "'"];
    for (i, pk) in pks.iter().enumerate() {
        if i % 2 == 0 {
            let ops = rks
                .iter()
                .map(|rk| Operation::Insert(w(pk, rk).with("k", text(&format!("{pk}|{rk}")))))
                .collect();
            s.execute(t, ops)
                .await
                .unwrap_or_else(|e| panic!("EGT in {pk:?}: {e}"));
        } else {
            for rk in rks {
                one(
                    s,
                    t,
                    Operation::Insert(w(pk, rk).with("k", text(&format!("{pk}|{rk}")))),
                )
                .await
                .unwrap_or_else(|e| panic!("insert ({pk:?}, {rk:?}): {e}"));
            }
        }
    }
    let mut expected: Vec<(String, String)> = pks
        .iter()
        .flat_map(|pk| rks.iter().map(|rk| ((*pk).to_owned(), (*rk).to_owned())))
        .collect();
    expected.sort();
    for (pk, rk) in &expected {
        assert_eq!(
            state(s, t, pk, rk).await,
            props([("k", text(&format!("{pk}|{rk}")))]),
            "({pk:?}, {rk:?})"
        );
    }
    let all = scan(s, t, &Query::full_scan(), 1000).await;
    assert_eq!(keys(&all), expected, "full scan in (PK, RK) order");
    for e in &all {
        assert_eq!(
            e.properties,
            props([("k", text(&format!("{}|{}", e.partition_key, e.row_key)))])
        );
    }
    let small = scan(s, t, &Query::full_scan(), 3).await;
    assert_eq!(keys(&small), expected, "full scan in pages of 3");

    for pk in pks {
        let q = Query::spans(vec![KeyBox::partition(pk)]);
        let got = scan(s, t, &q, 1000).await;
        let want: Vec<_> = expected.iter().filter(|(p, _)| p == pk).cloned().collect();
        assert_eq!(keys(&got), want, "partition {pk:?}");
        for rk in rks {
            let q = Query::spans(vec![KeyBox::point(pk, rk)]);
            assert_eq!(
                keys(&scan(s, t, &q, 1000).await),
                vec![(pk.to_owned(), rk.to_owned())],
                "point ({pk:?}, {rk:?})"
            );
        }
    }
    // Key filters on the residual side too.
    let q = Query::full_scan().with_filter(Filter::cmp(Field::RowKey, CmpOp::Eq, text("x'y")));
    assert_eq!(scan(s, t, &q, 1000).await.len(), pks.len());
    let q = Query::full_scan().with_filter(Filter::cmp(Field::RowKey, CmpOp::Eq, text("")));
    assert_eq!(scan(s, t, &q, 1000).await.len(), pks.len());

    // Replace, Merge (read first) and Delete address the same entities.
    for (pk, rk) in &expected {
        let etag = get(s, t, pk, rk).await.unwrap().etag();
        one(
            s,
            t,
            Operation::Replace {
                entity: w(pk, rk).with("v", int(1)),
                if_match: IfMatch::ETag(etag),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("replace ({pk:?}, {rk:?}): {e}"));
        one(
            s,
            t,
            Operation::Merge {
                entity: w(pk, rk).with("m", int(2)),
                if_match: IfMatch::Any,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("merge ({pk:?}, {rk:?}): {e}"));
        assert_eq!(
            state(s, t, pk, rk).await,
            props([("m", int(2)), ("v", int(1))])
        );
    }
    for pk in pks {
        let ops = rks
            .iter()
            .map(|rk| Operation::Delete {
                partition_key: pk.to_owned(),
                row_key: (*rk).to_owned(),
                if_match: IfMatch::Any,
            })
            .collect();
        s.execute(t, ops)
            .await
            .unwrap_or_else(|e| panic!("delete EGT in {pk:?}: {e}"));
    }
    assert!(scan(s, t, &Query::full_scan(), 1000).await.is_empty());
}

fn rk3(i: usize) -> String {
    format!("{i:03}")
}

/// Full-partition scan as a map.
async fn partition(
    s: &dyn TableStore,
    t: &str,
    pk: &str,
) -> BTreeMap<String, BTreeMap<String, Value>> {
    scan(s, t, &Query::spans(vec![KeyBox::partition(pk)]), 1000)
        .await
        .into_iter()
        .map(|e| (e.row_key, e.properties))
        .collect()
}

/// EGTs of 100 operations, every kind mixed, apply atomically.
async fn egt_of_100(s: &dyn TableStore, t: &str) {
    let ops = (0..100)
        .map(|i| Operation::Insert(w("g", &rk3(i)).with("n", int(i as i32))))
        .collect();
    let ops: std::sync::Arc<[Operation]> = ops;
    let out = s.execute(t, ops.clone()).await.unwrap();
    assert_eq!(out.len(), 100);
    for (i, o) in out.iter().enumerate() {
        let e = &o.entity(&ops[i]).unwrap();
        assert_eq!(e.row_key, rk3(i));
        assert_eq!(e.properties, props([("n", int(i as i32))]));
    }
    let before = partition(s, t, "g").await;
    assert_eq!(before.len(), 100);

    let mut ops = Vec::new();
    for i in 0..100 {
        let rk = rk3(i);
        ops.push(match i {
            0..25 => Operation::Replace {
                entity: w("g", &rk).with("n", int(1000 + i as i32)),
                if_match: IfMatch::Any,
            },
            25..50 => Operation::Merge {
                entity: w("g", &rk).with("m", Value::Boolean(true)),
                if_match: IfMatch::ETag(get(s, t, "g", &rk).await.unwrap().etag()),
            },
            50..75 => Operation::Delete {
                partition_key: "g".into(),
                row_key: rk.clone(),
                if_match: if i % 2 == 0 {
                    IfMatch::Any
                } else {
                    IfMatch::ETag(get(s, t, "g", &rk).await.unwrap().etag())
                },
            },
            75..90 => Operation::InsertOrReplace(w("g", &rk).with("n", int(-(i as i32)))),
            _ => Operation::InsertOrMerge(w("g", &rk).with("m", Value::Boolean(false))),
        });
    }
    let out = s.execute(t, ops.clone().into()).await.unwrap();
    assert_eq!(out.len(), 100);
    let after = partition(s, t, "g").await;
    assert_eq!(after.len(), 75);
    for (i, outcome) in out.iter().enumerate() {
        let n = i as i32;
        let want = match i {
            0..25 => Some(props([("n", int(1000 + n))])),
            25..50 => Some(props([("m", Value::Boolean(true)), ("n", int(n))])),
            50..75 => None,
            75..90 => Some(props([("n", int(-n))])),
            _ => Some(props([("m", Value::Boolean(false)), ("n", int(n))])),
        };
        assert_eq!(after.get(&rk3(i)), want.as_ref(), "row {i}");
        assert_eq!(
            outcome.entity(&ops[i]).as_ref().map(|e| &e.properties),
            want.as_ref(),
            "outcome {i}"
        );
    }

    // 100 inserts of new keys in another partition, and again as a
    // 100-operation delete.
    let ops = (0..100)
        .map(|i| Operation::InsertOrReplace(w("h", &rk3(i)).with("s", text(&"x".repeat(i)))))
        .collect();
    s.execute(t, ops).await.unwrap();
    assert_eq!(partition(s, t, "h").await.len(), 100);
    let ops = (0..100)
        .map(|i| Operation::Delete {
            partition_key: "h".into(),
            row_key: rk3(i),
            if_match: IfMatch::Any,
        })
        .collect();
    s.execute(t, ops).await.unwrap();
    assert!(partition(s, t, "h").await.is_empty());
}

/// Failing EGTs apply nothing and name the failing operation; the shape
/// limits are checked before anything is sent.
async fn egt_limits_and_failures(s: &dyn TableStore, t: &str) {
    let ops = (0..10)
        .map(|i| Operation::Insert(w("g", &rk3(i)).with("n", int(i as i32))))
        .collect();
    s.execute(t, ops).await.unwrap();
    let before = partition(s, t, "g").await;
    let stale = get(s, t, "g", &rk3(7)).await.unwrap().etag();
    one(
        s,
        t,
        Operation::InsertOrMerge(w("g", &rk3(7)).with("x", int(1))),
    )
    .await
    .unwrap();
    let before7 = state(s, t, "g", &rk3(7)).await;
    let mut before = before;
    before.insert(rk3(7), before7);

    let replace = |i: usize| Operation::Replace {
        entity: w("g", &rk3(i)).with("n", int(-1)),
        if_match: IfMatch::Any,
    };
    let insert_new = |i: usize| Operation::Insert(w("g", &format!("new{i}")));
    // (operations, failing index, the root error expected)
    type Check = fn(&StoreError) -> bool;
    let cases: Vec<(Vec<Operation>, usize, Check)> = vec![
        // Op 3 inserts an existing key.
        (
            vec![
                replace(0),
                insert_new(1),
                replace(1),
                Operation::Insert(w("g", &rk3(2))),
                replace(4),
            ],
            3,
            |e| matches!(e, StoreError::EntityAlreadyExists { row_key, .. } if row_key == "002"),
        ),
        // Op 1 deletes a missing entity.
        (
            vec![
                replace(0),
                Operation::Delete {
                    partition_key: "g".into(),
                    row_key: "missing".into(),
                    if_match: IfMatch::Any,
                },
                insert_new(2),
            ],
            1,
            |e| matches!(e, StoreError::EntityNotFound { row_key, .. } if row_key == "missing"),
        ),
        // Op 2 merges into a missing entity.
        (
            vec![
                insert_new(0),
                replace(1),
                Operation::Merge {
                    entity: w("g", "missing").with("a", int(1)),
                    if_match: IfMatch::Any,
                },
                replace(3),
            ],
            2,
            |e| matches!(e, StoreError::EntityNotFound { .. }),
        ),
        // Op 4 replaces with a stale ETag.
        (
            vec![
                replace(0),
                insert_new(1),
                Operation::InsertOrMerge(w("g", &rk3(2)).with("z", int(1))),
                Operation::InsertOrReplace(w("g", "fresh")),
                Operation::Replace {
                    entity: w("g", &rk3(7)).with("n", int(0)),
                    if_match: IfMatch::ETag(stale.clone()),
                },
                replace(5),
            ],
            4,
            |e| matches!(e, StoreError::ETagMismatch { row_key, .. } if row_key == "007"),
        ),
        // Op 2 merges with a stale ETag (Azure: found while preparing).
        (
            vec![
                replace(0),
                insert_new(1),
                Operation::Merge {
                    entity: w("g", &rk3(7)).with("n", int(0)),
                    if_match: IfMatch::ETag(stale.clone()),
                },
            ],
            2,
            |e| matches!(e, StoreError::ETagMismatch { .. }),
        ),
        // The last of 100 fails.
        (
            (0..99)
                .map(|i| Operation::InsertOrReplace(w("g", &format!("bulk{i:02}"))))
                .chain([Operation::Insert(w("g", &rk3(9)))])
                .collect(),
            99,
            |e| matches!(e, StoreError::EntityAlreadyExists { .. }),
        ),
    ];
    for (ops, index, check) in cases {
        let err = s.execute(t, ops.clone().into()).await.unwrap_err();
        assert_eq!(failed_at(&err), Some(index), "{err:?}");
        assert!(check(err.root()), "{err:?}");
        assert!(!err.is_retryable());
        assert_eq!(
            partition(s, t, "g").await,
            before,
            "nothing applied: {ops:?}"
        );
    }

    // 101 operations.
    let ops: Vec<_> = (0..101).map(insert_new).collect();
    assert_root!(
        s.execute(t, ops.into()).await,
        StoreError::BatchTooManyOperations {
            count: 101,
            limit: 100
        }
    );
    // Cross-partition (Azurite alone would apply this: see DIVERGENCES).
    let ops = vec![
        Operation::Insert(w("g", "x1")),
        Operation::Insert(w("g", "x2")),
        Operation::Insert(w("other", "x3")),
    ];
    assert_root!(
        s.execute(t, ops.into()).await,
        StoreError::BatchCrossPartition { index: 2, expected, found }
            if expected == "g" && found == "other"
    );
    assert_eq!(get(s, t, "other", "x3").await, None);
    // The same entity twice.
    let ops = vec![
        Operation::Insert(w("g", "y1")),
        Operation::Merge {
            entity: w("g", "y1"),
            if_match: IfMatch::Any,
        },
    ];
    assert_root!(
        s.execute(t, ops.into()).await,
        StoreError::BatchDuplicateEntity { index: 1, .. }
    );
    assert_root!(
        s.execute(t, Vec::new().into()).await,
        StoreError::EmptyBatch
    );
    assert_eq!(partition(s, t, "g").await, before, "nothing applied");
}

/// When several operations of an EGT would fail, the first of them is the
/// one reported (the service stops at the first failure; so does the
/// embedded store), whichever kinds they are.
async fn egt_reports_the_first_failing_operation(s: &dyn TableStore, t: &str) {
    one(s, t, Operation::Insert(w("g", "a").with("n", int(1))))
        .await
        .unwrap();
    one(s, t, Operation::Insert(w("g", "b").with("n", int(1))))
        .await
        .unwrap();
    let stale = get(s, t, "g", "a").await.unwrap().etag();
    one(
        s,
        t,
        Operation::InsertOrMerge(w("g", "a").with("n", int(2))),
    )
    .await
    .unwrap();
    let merge_missing = |rk: &str| Operation::Merge {
        entity: w("g", rk).with("x", int(1)),
        if_match: IfMatch::Any,
    };
    let delete_missing = |rk: &str| Operation::Delete {
        partition_key: "g".into(),
        row_key: rk.into(),
        if_match: IfMatch::Any,
    };
    type Check = fn(&StoreError) -> bool;
    let cases: Vec<(Vec<Operation>, usize, Check)> = vec![
        (
            vec![Operation::Insert(w("g", "a")), merge_missing("m1")],
            0,
            |e| matches!(e, StoreError::EntityAlreadyExists { row_key, .. } if row_key == "a"),
        ),
        (
            vec![delete_missing("d1"), merge_missing("m1")],
            0,
            |e| matches!(e, StoreError::EntityNotFound { row_key, .. } if row_key == "d1"),
        ),
        (
            vec![
                Operation::Replace {
                    entity: w("g", "b"),
                    if_match: IfMatch::ETag(stale.clone()),
                },
                Operation::Merge {
                    entity: w("g", "a"),
                    if_match: IfMatch::ETag(stale.clone()),
                },
            ],
            0,
            |e| matches!(e, StoreError::ETagMismatch { row_key, .. } if row_key == "b"),
        ),
        (
            vec![
                Operation::Insert(w("g", "new")),
                Operation::Insert(w("g", "b")),
                merge_missing("m1"),
            ],
            1,
            |e| matches!(e, StoreError::EntityAlreadyExists { row_key, .. } if row_key == "b"),
        ),
        (
            vec![merge_missing("m1"), Operation::Insert(w("g", "a"))],
            0,
            |e| matches!(e, StoreError::EntityNotFound { row_key, .. } if row_key == "m1"),
        ),
    ];
    let before = partition(s, t, "g").await;
    let mut wrong = Vec::new();
    for (ops, index, check) in cases {
        let err = s.execute(t, ops.clone().into()).await.unwrap_err();
        if failed_at(&err) != Some(index) || !check(err.root()) {
            wrong.push(format!(
                "{ops:?}\n    expected operation {index} to be reported, got {err:?}"
            ));
        }
        assert_eq!(
            partition(s, t, "g").await,
            before,
            "nothing applied: {ops:?}"
        );
    }
    assert!(
        wrong.is_empty(),
        "wrong failure reported:\n{}",
        wrong.join("\n")
    );
}

const PARTS: usize = 5;
const ROWS: usize = 500;

fn row_n(i: usize) -> i32 {
    (i % 50) as i32
}

/// 2,500 entities over five partitions, read back in pages: every entity
/// once, in (PK, RK) order, for a full scan and for filtered queries.
async fn paging(s: &dyn TableStore, t: &str) {
    let pk = |p: usize| format!("p{p}");
    let rk = |i: usize| format!("{i:04}");
    for p in 0..PARTS {
        for chunk in 0..ROWS / 100 {
            let ops = (chunk * 100..(chunk + 1) * 100)
                .map(|i| {
                    Operation::Insert(
                        w(&pk(p), &rk(i))
                            .with("n", int(row_n(i)))
                            .with("s", text(&format!("s{}", i % 7))),
                    )
                })
                .collect();
            s.execute(t, ops).await.unwrap();
        }
    }
    let all: Vec<(String, String)> = (0..PARTS)
        .flat_map(|p| (0..ROWS).map(move |i| (pk(p), rk(i))))
        .collect();

    // The full scan, at most 1000 per page.
    let mut req = PageRequest::first(1000);
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let page = s.query(t, &Query::full_scan(), &req).await.unwrap();
        assert!(page.entities.len() <= 1000);
        pages += 1;
        got.extend(page.entities);
        match page.continuation {
            Some(c) => req = req.resume(c),
            None => break,
        }
        assert!(pages < 1000, "the scan does not end");
    }
    assert!(
        pages >= 3,
        "2,500 entities in pages of 1,000 take 3 pages or more"
    );
    assert_eq!(keys(&got), all);
    for e in &got {
        let i: usize = e.row_key.parse().unwrap();
        assert_eq!(e.properties["n"], int(row_n(i)));
    }
    assert_eq!(keys(&scan(s, t, &Query::full_scan(), 777).await), all);

    // PartitionKey in [p1, p3), 10 <= n < 13: pages of 1000 and of 7.
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::new(Bound::Included(pk(1)), Bound::Excluded(pk(3))),
        rk: KeyInterval::all(),
    }])
    .with_filter(Filter::And(vec![
        Filter::cmp(Field::prop("n"), CmpOp::Ge, int(10)),
        Filter::cmp(Field::prop("n"), CmpOp::Lt, int(13)),
    ]));
    let want: Vec<(String, String)> = all
        .iter()
        .filter(|(p, r)| {
            let n = row_n(r.parse().unwrap());
            (p == "p1" || p == "p2") && (10..13).contains(&n)
        })
        .cloned()
        .collect();
    assert_eq!(want.len(), 2 * 30);
    assert_eq!(keys(&scan(s, t, &q, 1000).await), want);
    assert_eq!(keys(&scan(s, t, &q, 7).await), want);

    // A sparse filter over every partition, with a RowKey range.
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk: KeyInterval::new(Bound::Excluded(rk(100)), Bound::Included(rk(449))),
    }])
    .with_filter(Filter::Or(vec![
        Filter::cmp(Field::prop("n"), CmpOp::Eq, int(49)),
        Filter::In {
            field: Field::prop("s"),
            values: vec![text("s3")],
        },
    ]));
    let want: Vec<(String, String)> = all
        .iter()
        .filter(|(_, r)| {
            let i: usize = r.parse().unwrap();
            (101..=449).contains(&i) && (row_n(i) == 49 || i % 7 == 3)
        })
        .cloned()
        .collect();
    assert_eq!(keys(&scan(s, t, &q, 1000).await), want);
    assert_eq!(keys(&scan(s, t, &q, 13).await), want);

    // Two boxes (a point and a partition tail), in pages of 1.
    let q = Query::spans(vec![
        KeyBox::point(pk(0), rk(3)),
        KeyBox {
            pk: KeyInterval::point(pk(4)),
            rk: KeyInterval::new(Bound::Included(rk(497)), Bound::Unbounded),
        },
    ]);
    let want = vec![
        (pk(0), rk(3)),
        (pk(4), rk(497)),
        (pk(4), rk(498)),
        (pk(4), rk(499)),
    ];
    assert_eq!(keys(&scan(s, t, &q, 1).await), want);
}

/// A continuation token resumes only the query that issued it.
async fn continuation_tokens_are_bound_to_their_query(s: &dyn TableStore, t: &str) {
    let ops = (0..10)
        .map(|i| Operation::Insert(w("p", &rk3(i)).with("n", int(i as i32))))
        .collect();
    s.execute(t, ops).await.unwrap();
    let q = Query::full_scan();
    let page = s.query(t, &q, &PageRequest::first(3)).await.unwrap();
    assert_eq!(page.entities.len(), 3);
    let token = page.continuation.expect("more to read");
    let resume = PageRequest::first(3).resume(token.clone());
    // The same query resumes.
    let next = s.query(t, &q, &resume).await.unwrap();
    assert_eq!(
        next.entities.first().map(|e| e.row_key.as_str()),
        Some("003")
    );

    let others = [
        Query::full_scan().with_filter(Filter::cmp(Field::prop("n"), CmpOp::Ge, int(0))),
        Query::spans(vec![KeyBox::partition("p")]),
        Query::full_scan().with_projection(vec!["n".into()]),
    ];
    for other in &others {
        assert_root!(
            s.query(t, other, &resume).await,
            StoreError::InvalidContinuationToken { .. }
        );
    }
    // Another table.
    let t2 = format!("{t}two");
    s.create_table(&t2).await.unwrap();
    assert_root!(
        s.query(&t2, &q, &resume).await,
        StoreError::InvalidContinuationToken { .. }
    );
    s.drop_table(&t2).await.unwrap();
    // Not a token at all.
    for junk in ["", "nonsense", "!!", "az1!!", "AQ"] {
        let req =
            PageRequest::first(3).resume(tablegate_store::ContinuationToken::from_string(junk));
        assert_root!(
            s.query(t, &q, &req).await,
            StoreError::InvalidContinuationToken { .. }
        );
    }
}

/// What both backends refuse before anything is stored.
async fn invalid_requests(s: &dyn TableStore, t: &str) {
    for n in [0, 1001] {
        assert_root!(
            s.query(t, &Query::full_scan(), &PageRequest::first(n))
                .await,
            StoreError::InvalidQuery { .. }
        );
    }
    for bad in ["a/b", "a\\b", "a#b", "a?b", "a\u{1}b", "\u{7f}"] {
        assert_root!(
            one(s, t, Operation::Insert(w(bad, "r"))).await,
            StoreError::ForbiddenKeyCharacter { .. }
        );
        assert_root!(
            one(s, t, Operation::Insert(w("p", bad))).await,
            StoreError::ForbiddenKeyCharacter { .. }
        );
    }
    assert_root!(
        one(s, t, Operation::Insert(w(&"k".repeat(1025), "r"))).await,
        StoreError::KeyTooLong { .. }
    );
    for name in ["Timestamp", "PartitionKey", "1x", "a-b", ""] {
        assert_root!(
            one(s, t, Operation::Insert(w("p", "r").with(name, int(1)))).await,
            StoreError::InvalidPropertyName { .. }
        );
    }
    assert_root!(
        one(
            s,
            t,
            Operation::Insert(w("p", "r").with("big", text(&"x".repeat(40_000))))
        )
        .await,
        StoreError::ValueTooLarge { .. }
    );
    assert_root!(
        one(
            s,
            t,
            Operation::Insert(
                w("p", "r").with("d", Value::DateTime(DateTime(DateTime::MAX.0 + 1)))
            )
        )
        .await,
        StoreError::DateTimeOutOfRange { .. }
    );
    assert!(scan(s, t, &Query::full_scan(), 1000).await.is_empty());
    // An empty span set selects nothing.
    let page = s
        .query(t, &Query::spans(Vec::new()), &PageRequest::first(10))
        .await
        .unwrap();
    assert!(page.entities.is_empty() && page.continuation.is_none());
}

// ---- Azure only: the deliberate differences -----------------------------------

async fn azure_with_table(tag: &str) -> (AzureStore, String) {
    let s = crate::azurite::store().await;
    let t = fresh_table(&s, tag).await;
    (s, t)
}

/// DIVERGENCES 1, shown: Azurite itself applies a changeset that spans
/// PartitionKeys (the service refuses it), so AzureStore must check EGTs
/// itself, and does.
#[tokio::test]
async fn azurite_alone_accepts_cross_partition_batches() {
    use tablegate_azure::batch;
    use tablegate_azure::http::{Client, Request};
    let (s, t) = azure_with_table("cross").await;
    let client = Client::new(s.account().clone()).unwrap();
    let parts = [("p1", "a"), ("p2", "b")].map(|(pk, rk)| batch::Part {
        method: "POST",
        url: client.url(&format!("/{t}")),
        if_match: None,
        body: Some(serde_json::json!({ "PartitionKey": pk, "RowKey": rk })),
    });
    let (body, content_type) = batch::body(&parts);
    let mut req = Request::new(reqwest::Method::POST, "/$batch".into());
    req.body = Some((content_type, body.into_bytes()));
    let r = client.send(req).await.unwrap();
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(r.status.is_success(), "{}: {text}", r.status);
    let outcome = batch::parse(&text, parts.len()).unwrap();
    assert!(
        matches!(outcome, batch::Outcome::Applied(_)),
        "Azurite now refuses cross-partition batches ({outcome:?}): update DIVERGENCES"
    );
    assert!(get(&s, &t, "p1", "a").await.is_some());
    assert!(get(&s, &t, "p2", "b").await.is_some());

    // Through the store the same shape is refused and nothing is sent.
    assert_root!(
        s.execute(
            &t,
            vec![
                Operation::Insert(w("p3", "a")),
                Operation::Insert(w("p4", "b"))
            ]
            .into()
        )
        .await,
        StoreError::BatchCrossPartition { index: 1, .. }
    );
    assert_eq!(get(&s, &t, "p3", "a").await, None);
    s.drop_table(&t).await.unwrap();
}

/// Statistics are refused on Azure; the embedded store counts.
#[tokio::test]
async fn azure_refuses_statistics() {
    let (s, t) = azure_with_table("stats").await;
    one(&s, &t, Operation::Insert(w("p", "r"))).await.unwrap();
    assert_root!(s.table_stats(&t).await, StoreError::InvalidQuery { .. });
    assert_root!(
        s.partition_stats(&t, Bound::Unbounded, Bound::Unbounded, 10)
            .await,
        StoreError::InvalidQuery { .. }
    );
    s.drop_table(&t).await.unwrap();

    let local = LocalStore::in_memory();
    local.create_table("tbl").await.unwrap();
    one(&local, "tbl", Operation::Insert(w("p", "r")))
        .await
        .unwrap();
    let st = local.table_stats("tbl").await.unwrap();
    assert_eq!((st.entities, st.partitions), (1, 1));
}

/// `existed` of an upsert is unknown on Azure (false), known locally.
#[tokio::test]
async fn azure_upsert_outcome_does_not_know_existed() {
    let (s, t) = azure_with_table("existed").await;
    let local = LocalStore::in_memory();
    local.create_table(&t).await.unwrap();
    for store in [&s as &dyn TableStore, &local] {
        one(store, &t, Operation::Insert(w("p", "r")))
            .await
            .unwrap();
    }
    for op in [
        Operation::InsertOrReplace(w("p", "r").with("a", int(1))),
        Operation::InsertOrMerge(w("p", "r").with("b", int(2))),
    ] {
        let remote = one(&s, &t, op.clone()).await.unwrap();
        let embedded = one(&local, &t, op.clone()).await.unwrap();
        assert!(embedded.existed, "{op:?}");
        if matches!(op, Operation::InsertOrReplace(_)) {
            assert!(!remote.existed, "the service does not say: {op:?}");
        } else {
            assert!(remote.existed, "a merge reads first: {op:?}");
        }
        assert_eq!(
            remote.entity.unwrap().properties,
            embedded.entity.unwrap().properties
        );
    }
    s.drop_table(&t).await.unwrap();
}

/// Table names with `_` and the reserved `tgsys` prefix are refused by the
/// user view; the system view stores `tgsys_x` as `tgsysx` and the user view
/// does not list it.
#[tokio::test]
async fn azure_table_names() {
    let s = crate::azurite::store().await;
    assert_root!(
        s.create_table("has_underscore").await,
        StoreError::InvalidTableName { .. }
    );
    let unique = crate::azurite::table_name("sys");
    let user_name = format!("tgsys{unique}");
    assert_root!(
        s.create_table(&user_name).await,
        StoreError::InvalidTableName { .. }
    );
    assert_root!(
        s.get(&user_name, "p", "r").await,
        StoreError::InvalidTableName { .. }
    );
    let system = s.system();
    let sys_name = format!("tgsys_{unique}");
    system.create_table(&sys_name).await.unwrap();
    let user_list: Vec<String> = s
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.to_ascii_lowercase())
        .collect();
    assert!(
        !user_list.iter().any(|n| n.starts_with("tgsys")),
        "{user_list:?}"
    );
    let sys_list: Vec<String> = system
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name.to_ascii_lowercase())
        .collect();
    assert!(
        sys_list.contains(&user_name.to_ascii_lowercase()),
        "{sys_list:?}"
    );
    one(system.as_ref(), &sys_name, Operation::Insert(w("p", "r")))
        .await
        .unwrap();
    assert!(get(system.as_ref(), &sys_name, "p", "r").await.is_some());
    system.drop_table(&sys_name).await.unwrap();
    assert!(s.describe().contains("devstoreaccount1"));
}

// ---- the error mapping (throttling cannot be provoked on Azurite) --------------

/// `http::service_error`: throttling is `ServerBusy` and retryable; the
/// rest map to meaning-based errors that are not.
#[test]
fn service_errors_map_to_store_errors() {
    use reqwest::StatusCode;
    let entity = Subject::Entity {
        table: "t",
        pk: "p",
        rk: "r",
    };
    let table = Subject::Table("t");
    let map = |status: u16, code: &str, about| {
        service_error(
            StatusCode::from_u16(status).unwrap(),
            code,
            "the service's message",
            about,
        )
    };

    for (status, code) in [
        (503, "ServerBusy"),
        (500, "OperationTimedOut"),
        (429, "TooManyRequests"),
        (429, ""),
        (503, "ServiceUnavailable"),
    ] {
        for about in [entity, table] {
            let e = map(status, code, about);
            assert!(
                matches!(e, StoreError::ServerBusy { .. }),
                "{status} {code}: {e:?}"
            );
            assert!(e.is_retryable(), "{status} {code}");
            // Wrapped as an EGT operation's failure it stays retryable.
            assert!(e.at_operation(3).is_retryable());
        }
    }

    type Check = fn(&StoreError) -> bool;
    let cases: Vec<(u16, &str, Subject<'_>, Check)> = vec![
        (409, "EntityAlreadyExists", entity, |e| {
            matches!(e, StoreError::EntityAlreadyExists { partition_key, row_key }
                if partition_key == "p" && row_key == "r")
        }),
        (
            409,
            "TableAlreadyExists",
            table,
            |e| matches!(e, StoreError::TableExists { name } if name == "t"),
        ),
        (404, "ResourceNotFound", entity, |e| {
            matches!(e, StoreError::EntityNotFound { partition_key, row_key }
                if partition_key == "p" && row_key == "r")
        }),
        (
            404,
            "TableNotFound",
            entity,
            |e| matches!(e, StoreError::TableNotFound { name } if name == "t"),
        ),
        (
            404,
            "ResourceNotFound",
            table,
            |e| matches!(e, StoreError::TableNotFound { name } if name == "t"),
        ),
        (412, "UpdateConditionNotSatisfied", entity, |e| {
            matches!(e, StoreError::ETagMismatch { partition_key, row_key, .. }
                if partition_key == "p" && row_key == "r")
        }),
        (400, "InvalidInput", entity, |e| {
            matches!(e, StoreError::Remote { status: Some(400), code, message }
                if code == "InvalidInput" && message.contains("the service's message"))
        }),
        (400, "OutOfRangeInput", table, |e| {
            matches!(
                e,
                StoreError::Remote {
                    status: Some(400),
                    ..
                }
            )
        }),
        (403, "AuthenticationFailed", table, |e| {
            matches!(e, StoreError::Remote { status: Some(403), code, .. }
                if code == "AuthenticationFailed")
        }),
    ];
    for (status, code, about, check) in cases {
        let e = map(status, code, about);
        assert!(check(&e), "{status} {code} {about:?}: {e:?}");
        assert!(!e.is_retryable(), "{status} {code}: {e:?}");
    }
}

/// The divergence list is kept with the tests (and is not empty).
#[test]
fn divergences_are_listed() {
    for topic in [
        "Cross-partition",
        "Throttling",
        "existed",
        "Statistics",
        "Timestamp",
    ] {
        assert!(DIVERGENCES.contains(topic), "{topic}");
    }
}
