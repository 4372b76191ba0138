//! Scans of a store whose range partitions are unknown (a remote service):
//! the first page, then the rest cut at probed PartitionKey boundaries and
//! read in parallel. Whatever the keys, the spans and the page size, the
//! scan returns exactly what reading page by page returns, in the same
//! order; on a table of many partitions it does cut.

use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;
use tablegate_store::partition::sample;
use tablegate_store::partition::scan::{ScanOptions, remote};
use tablegate_store::*;

fn store_with(pks: &[String], rows: usize) -> Arc<dyn TableStore> {
    let s = LocalStore::in_memory();
    s.create_table_blocking("remote").unwrap();
    for pk in pks {
        let ops: Vec<_> = (0..rows)
            .map(|r| {
                Operation::InsertOrReplace(
                    EntityWrite::new(pk, format!("{r:03}")).with("n", Value::Int32(r as i32)),
                )
            })
            .collect();
        s.execute_blocking("remote", &ops).unwrap();
    }
    Arc::new(s)
}

fn keys(es: &[Entity]) -> Vec<(String, String)> {
    es.iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

async fn page_by_page(store: &dyn TableStore, q: &Query, page: usize) -> Vec<Entity> {
    let mut req = PageRequest::first(page);
    let mut out = Vec::new();
    loop {
        let p = store.query("remote", q, &req).await.unwrap();
        out.extend(p.entities);
        match p.continuation {
            Some(t) => req = req.resume(t),
            None => return out,
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn scan(
    rt: &tokio::runtime::Runtime,
    store: Arc<dyn TableStore>,
    table: &str,
    query: Query,
    opts: ScanOptions,
) -> (Vec<Entity>, partition::scan::ScanStats) {
    rt.block_on(async { remote(store, table, query, opts).collect().await })
        .unwrap()
}

fn parallel(page_size: usize, parallelism: usize) -> ScanOptions {
    ScanOptions {
        page_size,
        parallelism,
        ..Default::default()
    }
}

#[test]
fn a_large_remote_scan_is_cut_at_probed_boundaries() {
    let pks: Vec<String> = (0..500).map(|i| format!("tenant-{i:05}")).collect();
    let store = store_with(&pks, 4);
    let rt = runtime();
    let (got, stats) = scan(
        &rt,
        store.clone(),
        "remote",
        Query::full_scan(),
        parallel(100, 4),
    );
    let want = rt.block_on(page_by_page(store.as_ref(), &Query::full_scan(), 100));
    assert_eq!(keys(&got), keys(&want));
    assert_eq!(got.len(), 2000);
    // Up to 4 × 4 segments: the boundaries lie inside `tenant-`, spread
    // over the 500 keys.
    assert!(stats.segments >= 8, "{stats:?}");
    // No entity is read twice: the first segment ends where the second begins.
    assert_eq!(stats.scanned, 2000, "{stats:?}");
    assert!(stats.probes > 0 && stats.probes <= 128, "{stats:?}");

    // One page, or a single task: no probes.
    let (got, stats) = scan(
        &rt,
        store.clone(),
        "remote",
        Query::full_scan(),
        parallel(1000, 4),
    );
    assert_eq!(got.len(), 2000);
    assert!(stats.probes > 0, "2000 entities are two pages of 1000");
    let one = Query {
        spans: vec![KeyBox {
            pk: KeyInterval::new(Bound::Unbounded, Bound::Excluded("tenant-00100".into())),
            rk: KeyInterval::all(),
        }],
        ..Query::full_scan()
    };
    let (got, stats) = scan(&rt, store.clone(), "remote", one, parallel(1000, 4));
    assert_eq!((got.len(), stats.segments, stats.probes), (400, 1, 0));
    let (_, stats) = scan(&rt, store, "remote", Query::full_scan(), parallel(100, 1));
    assert_eq!((stats.segments, stats.probes), (1, 0));
}

#[test]
fn boundaries_are_keys_inside_the_range() {
    let pks: Vec<String> = (0..200u64)
        .map(|i| format!("{:08x}", i * 21_474_836))
        .collect();
    let store = store_with(&pks, 1);
    let rt = runtime();
    let s = rt
        .block_on(sample::boundaries(
            store,
            "remote",
            "1",
            Some("e"),
            15,
            4,
            &retry::RetryPolicy::default(),
        ))
        .unwrap();
    assert!(s.boundaries.len() >= 8, "{s:?}");
    assert!(s.boundaries.windows(2).all(|w| w[0] < w[1]));
    for b in &s.boundaries {
        assert!(
            pks.contains(b) && b.as_str() > "1" && b.as_str() < "e",
            "{b}"
        );
    }
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c]{0,3}",
        "k-[0-9]{1,3}",
        "[a\u{4e00}\u{e000}\u{1f600}]{1,3}",
        "tenant-00[0-9]{2}",
    ]
}

fn interval() -> impl Strategy<Value = KeyInterval> {
    (
        proptest::option::of((key(), any::<bool>())),
        proptest::option::of((key(), any::<bool>())),
    )
        .prop_map(|(lo, hi)| {
            let b = |x: Option<(String, bool)>| match x {
                None => Bound::Unbounded,
                Some((k, true)) => Bound::Included(k),
                Some((k, false)) => Bound::Excluded(k),
            };
            KeyInterval::new(b(lo), b(hi))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn remote_scans_return_what_paging_returns(
        pks in proptest::collection::btree_set(key(), 0..60),
        rows in 1usize..4,
        spans in proptest::collection::vec((interval(), interval()), 1..3),
        page in 1usize..9,
        parallelism in 1usize..5,
        odd in any::<bool>(),
    ) {
        let pks: Vec<String> = pks.into_iter().collect();
        let store = store_with(&pks, rows);
        let query = Query {
            spans: spans.into_iter().map(|(pk, rk)| KeyBox { pk, rk }).collect(),
            // A filter the store finishes: pages can come back short or empty.
            filter: odd.then(|| Filter::cmp(Field::prop("n"), CmpOp::Ne, Value::Int32(1))),
            projection: None,
        };
        let rt = runtime();
        let want = rt.block_on(page_by_page(store.as_ref(), &query, page));
        let (got, _) = scan(&rt, store, "remote", query, parallel(page, parallelism));
        prop_assert_eq!(keys(&got), keys(&want));
    }
}
