//! Smoke tests of the public API on both engines.

use tablegate_store::*;

fn stores() -> Vec<(&'static str, LocalStore, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let durable = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
    vec![
        ("memory", LocalStore::in_memory(), None),
        ("fjall", durable, Some(dir)),
    ]
}

#[test]
fn insert_get_query_round_trip() {
    for (name, s, _dir) in stores() {
        s.create_table_blocking("people").unwrap();
        let ops: Vec<_> = (0..10)
            .map(|i| {
                Operation::Insert(EntityWrite::new("p", format!("r{i}")).with("n", Value::Int32(i)))
            })
            .collect();
        s.execute_blocking("people", &ops).unwrap();
        let e = s.get_blocking("PEOPLE", "p", "r3").unwrap().unwrap();
        assert_eq!(e.properties["n"], Value::Int32(3), "{name}");
        let page = s
            .query_blocking("people", &Query::full_scan(), &PageRequest::first(4))
            .unwrap();
        assert_eq!(page.entities.len(), 4, "{name}");
        assert!(page.continuation.is_some(), "{name}");
        assert_eq!(
            s.table_stats_blocking("people").unwrap().entities,
            10,
            "{name}"
        );
    }
}

#[test]
fn estimates_count_whole_and_partial_partitions() {
    let s = LocalStore::in_memory();
    s.create_table_blocking("est").unwrap();
    for p in 0..5 {
        let ops: Vec<_> = (0..(p + 1) * 10)
            .map(|i| Operation::Insert(EntityWrite::new(format!("p{p}"), format!("{i:03}"))))
            .collect();
        s.execute_blocking("est", &ops).unwrap();
    }
    let full = s
        .estimate_blocking("est", &Query::full_scan(), 1000)
        .unwrap();
    assert_eq!(
        (full.scanned, full.partitions, full.largest_partition),
        (150, 5, 50)
    );
    // Row range inside p4 (50 entities): 010..=019 → probe counts 10.
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::point("p4"),
        rk: KeyInterval::new(
            std::ops::Bound::Included("010".into()),
            std::ops::Bound::Included("019".into()),
        ),
    }]);
    let e = s.estimate_blocking("est", &q, 1000).unwrap();
    assert_eq!((e.scanned, e.partitions), (10, 1));
    // A partition range with a RowKey condition scans whole partitions.
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::new(
            std::ops::Bound::Included("p1".into()),
            std::ops::Bound::Included("p2".into()),
        ),
        rk: KeyInterval::point("005"),
    }]);
    let e = s.estimate_blocking("est", &q, 1000).unwrap();
    assert_eq!((e.scanned, e.partitions), (50, 2));
    let page = s
        .query_blocking("est", &q, &PageRequest::default())
        .unwrap();
    assert_eq!(page.scanned, 50);
    // A missing point costs nothing in the estimate.
    let e = s
        .estimate_blocking("est", &Query::spans(vec![KeyBox::point("zz", "1")]), 1000)
        .unwrap();
    assert_eq!(e.scanned, 0);
}
