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

/// Concurrent read-modify-write on one entity with If-Match: every
/// successful write is counted exactly once (no lost update), and a stale
/// ETag always fails instead of overwriting.
#[test]
fn concurrent_if_match_updates_never_lose_an_update() {
    for (name, s, _dir) in stores() {
        s.create_table_blocking("counter").unwrap();
        s.execute_blocking(
            "counter",
            &[Operation::Insert(
                EntityWrite::new("c", "").with("n", Value::Int64(0)),
            )],
        )
        .unwrap();
        let (threads, per_thread) = (4, 50);
        let conflicts: u64 = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut conflicts = 0u64;
                        let mut done = 0;
                        while done < per_thread {
                            let e = s.get_blocking("counter", "c", "").unwrap().unwrap();
                            let Value::Int64(n) = e.properties["n"] else {
                                panic!()
                            };
                            let op = Operation::Replace {
                                entity: EntityWrite::new("c", "").with("n", Value::Int64(n + 1)),
                                if_match: IfMatch::ETag(e.etag()),
                            };
                            match s.execute_blocking("counter", &[op]) {
                                Ok(_) => done += 1,
                                Err(err)
                                    if matches!(err.root(), StoreError::ETagMismatch { .. }) =>
                                {
                                    conflicts += 1
                                }
                                Err(err) => panic!("{err}"),
                            }
                        }
                        conflicts
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        let e = s.get_blocking("counter", "c", "").unwrap().unwrap();
        assert_eq!(
            e.properties["n"],
            Value::Int64(threads * per_thread),
            "{name}: lost updates"
        );
        eprintln!(
            "{name}: {} updates, {conflicts} ETag conflicts retried",
            threads * per_thread
        );
    }
}

/// Long batches read the entities they touch with one scan (sparse spans)
/// or with lookups (spans crowded with other entities): both see exactly
/// the stored entities, so Insert fails on the one that exists, upserts
/// report what existed, and nothing of a failed batch is applied.
#[test]
fn long_batches_see_existing_entities_in_sparse_and_crowded_spans() {
    for (name, s, _dir) in stores() {
        s.create_table_blocking("batches").unwrap();
        // Even RowKeys 000..098 exist in "sparse"; every key 000..299 in "crowded".
        let evens: Vec<_> = (0..100)
            .step_by(2)
            .map(|i| {
                Operation::Insert(
                    EntityWrite::new("sparse", format!("{i:03}")).with("v", Value::Int32(i)),
                )
            })
            .collect();
        s.execute_blocking("batches", &evens).unwrap();
        let all: Vec<_> = (0..300)
            .map(|i| {
                Operation::Insert(
                    EntityWrite::new("crowded", format!("{i:03}")).with("v", Value::Int32(i)),
                )
            })
            .collect();
        for chunk in all.chunks(100) {
            s.execute_blocking("batches", chunk).unwrap();
        }

        // 20 new odd keys and one existing even key (operation 13), in no order.
        let mut ops: Vec<_> = (0..20)
            .map(|i| Operation::Insert(EntityWrite::new("sparse", format!("{:03}", 97 - 4 * i))))
            .collect();
        ops.insert(13, Operation::Insert(EntityWrite::new("sparse", "050")));
        match s.execute_blocking("batches", &ops) {
            Err(StoreError::BatchOperationFailed { index, source }) => {
                assert_eq!(index, 13, "{name}");
                assert!(
                    matches!(*source, StoreError::EntityAlreadyExists { .. }),
                    "{name}: {source}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(
            s.get_blocking("batches", "sparse", "097")
                .unwrap()
                .is_none(),
            "{name}: nothing applied"
        );
        ops.remove(13);
        let out = s.execute_blocking("batches", &ops).unwrap();
        assert!(out.iter().all(|o| !o.existed), "{name}");

        // Upserts over every 10th key of "crowded" (the span holds ten times
        // as many entities as the batch) and of "sparse" (half exist).
        for pk in ["crowded", "sparse"] {
            let ops: Vec<_> = (0..30)
                .map(|i| {
                    Operation::InsertOrMerge(
                        EntityWrite::new(pk, format!("{:03}", i * 10)).with("w", Value::Int32(i)),
                    )
                })
                .collect();
            let out = s.execute_blocking("batches", &ops).unwrap();
            for (i, o) in out.iter().enumerate() {
                let key = i * 10;
                let existed = pk == "crowded" || key < 100;
                assert_eq!(o.existed, existed, "{name} {pk} {key}");
                let e = &o.entity(&ops[i]).unwrap();
                assert_eq!(
                    e.properties.contains_key("v"),
                    existed,
                    "{name} {pk} {key}: merged"
                );
                assert_eq!(
                    e.properties["w"],
                    Value::Int32(i as i32),
                    "{name} {pk} {key}"
                );
            }
        }
    }
}
