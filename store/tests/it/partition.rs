//! The partition layer: throttling at the targets, pages ending at server
//! boundaries, parallel scans in key order, balancing, moves, detection.
//! All but one test drive a manual clock; the real-time test measures the
//! admitted rate of one hot PartitionKey against the 2,000/s target.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tablegate_store::partition::scan::ScanOptions;
use tablegate_store::partition::{BalanceAction, InsertPatternKind};
use tablegate_store::retry::{RetryStats, with_retry};
use tablegate_store::*;

fn manual() -> Arc<ManualClock> {
    Arc::new(ManualClock::at(1_700_000_000_000_000))
}

fn store_with(clock: Arc<ManualClock>, config: PartitionConfig) -> PartitionedStore {
    let local = LocalStore::in_memory_with_clock(clock.clone());
    PartitionedStore::with_clock(local, config, clock).unwrap()
}

fn unthrottled() -> PartitionConfig {
    PartitionConfig {
        targets: None,
        ..Default::default()
    }
}

fn put(pk: &str, rk: &str) -> Operation {
    Operation::InsertOrReplace(EntityWrite::new(pk, rk).with("n", Value::Int32(1)))
}

/// Loads `pks` × `rows` entities, one EGT per partition.
fn load(s: &PartitionedStore, table: &str, pks: &[String], rows: usize) {
    for pk in pks {
        let ops: Vec<_> = (0..rows).map(|r| put(pk, &format!("{r:04}"))).collect();
        s.execute_blocking(table, &ops).unwrap();
    }
}

fn keys(es: &[Entity]) -> Vec<(String, String)> {
    es.iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

fn scan_all(s: &PartitionedStore, table: &str, q: &Query, page: usize) -> (Vec<Entity>, usize) {
    let mut req = PageRequest::first(page);
    let mut out = Vec::new();
    let mut pages = 0;
    loop {
        let p = s.query_blocking(table, q, &req).unwrap();
        pages += 1;
        out.extend(p.entities);
        match p.continuation {
            Some(t) => req = req.resume(t),
            None => return (out, pages),
        }
    }
}

#[test]
fn partition_target_throttles_and_names_partition_and_target() {
    let clock = manual();
    let s = store_with(clock.clone(), PartitionConfig::default());
    s.create_table_blocking("hot").unwrap();
    // The bucket starts with its 0.1 s burst (200 entities).
    let mut admitted = 0;
    let err = loop {
        match s.execute_blocking("hot", &[put("p", &admitted.to_string())]) {
            Ok(_) => admitted += 1,
            Err(e) => break e,
        }
        assert!(admitted <= 200, "burst exceeded");
    };
    assert_eq!(admitted, 200);
    match &err {
        StoreError::ServerBusy {
            scope,
            target_per_sec,
            retry_after,
            ..
        } => {
            assert!(scope.contains("\"p\"") && scope.contains("hot"), "{scope}");
            assert_eq!(*target_per_sec, Some(2_000));
            assert!(*retry_after > Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_retryable());
    // Refusals cost nothing; reads of another partition are unaffected.
    assert!(s.get_blocking("hot", "other", "x").is_ok());

    // Over 5 simulated seconds, driven every millisecond, it admits the
    // target rate (plus at most the burst).
    let mut admitted = 0u64;
    for ms in 0..5_000 {
        clock.advance(Duration::from_millis(1));
        for i in 0..4 {
            if s.execute_blocking("hot", &[put("p", &format!("{ms}-{i}"))])
                .is_ok()
            {
                admitted += 1;
            }
        }
    }
    assert!(
        (9_900..=10_300).contains(&admitted),
        "admitted {admitted} in 5 s"
    );
    assert!(s.throttle_counts().partition > 0);
}

/// A scan pays for what it reads: a page scans no more than the buckets
/// hold, so a query that reads 6,000 entities of one PartitionKey and
/// returns none takes its pages over the seconds the target allows, and
/// the next, unrelated request is not left a debt to wait out.
#[test]
fn a_scan_pays_for_its_own_reading_page_by_page() {
    let clock = manual();
    let s = store_with(clock.clone(), PartitionConfig::default());
    s.create_table_blocking("big").unwrap();
    for chunk in 0..60 {
        clock.advance(Duration::from_millis(50));
        let ops: Vec<_> = (0..100)
            .map(|r| put("p", &format!("{:05}", chunk * 100 + r)))
            .collect();
        s.execute_blocking("big", &ops).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    let q = Query {
        spans: vec![KeyBox::partition("p")],
        filter: Some(Filter::Compare {
            field: Field::Property("n".into()),
            op: CmpOp::Eq,
            value: Value::Int32(7),
        }),
        projection: None,
    };
    let mut req = PageRequest::first(1000);
    let (mut pages, mut scanned, mut refused) = (0, 0u64, 0);
    let start = clock.now_micros();
    loop {
        match s.query_blocking("big", &q, &req) {
            Ok(p) => {
                pages += 1;
                assert!(
                    p.scanned <= 200,
                    "a page scanned {} past the burst",
                    p.scanned
                );
                assert!(p.entities.is_empty());
                scanned += p.scanned;
                match p.continuation {
                    Some(t) => req = req.resume(t),
                    None => break,
                }
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                refused += 1;
                clock.advance(Duration::from_millis(10));
            }
        }
    }
    assert_eq!(scanned, 6_000);
    assert!(pages >= 30, "{pages} pages");
    assert!(refused > 0);
    // 6,000 entities at 2,000/s: about 3 s of the query's own time.
    let took = Duration::from_micros((clock.now_micros() - start) as u64);
    assert!(took >= Duration::from_millis(2_500), "{took:?}");
    // The partition owes nothing beyond one page: another request waits
    // at most one page's worth (100 ms at the target).
    clock.advance(Duration::from_millis(100));
    assert!(s.get_blocking("big", "p", "00001").is_ok());
}

#[test]
fn a_page_ends_at_another_servers_range_and_resumes_there() {
    let clock = manual();
    let s = store_with(clock.clone(), unthrottled());
    s.create_table_blocking("tee").unwrap();
    let pks: Vec<String> = ('a'..='z').map(String::from).collect();
    load(&s, "tee", &pks, 10);
    s.split_blocking("tee", "m").unwrap();
    // Same server on both sides: a page runs straight through.
    let first = s
        .query_blocking("tee", &Query::full_scan(), &PageRequest::first(1000))
        .unwrap();
    assert_eq!(first.entities.len(), 260);
    assert!(first.continuation.is_none());

    let server = s.ranges("tee").unwrap()[1].server;
    s.move_range_blocking("tee", "m", (server + 1) % 4).unwrap();
    clock.advance(Duration::from_secs(1)); // the move completes
    let p1 = s
        .query_blocking("tee", &Query::full_scan(), &PageRequest::first(1000))
        .unwrap();
    assert_eq!(p1.entities.len(), 120, "a..l on the first server");
    assert_eq!(p1.entities.last().unwrap().partition_key, "l");
    let token = p1.continuation.expect("a token at the server boundary");
    let p2 = s
        .query_blocking(
            "tee",
            &Query::full_scan(),
            &PageRequest::first(1000).resume(token),
        )
        .unwrap();
    assert_eq!(p2.entities.len(), 140);
    assert_eq!(p2.entities[0].partition_key, "m");
    assert!(p2.continuation.is_none());
}

/// 40 partitions × 25 rows over 8 ranges spread across all 4 servers.
fn spread_store(clock: Arc<ManualClock>) -> (PartitionedStore, Vec<(String, String)>) {
    let s = store_with(clock.clone(), unthrottled());
    s.create_table_blocking("wide").unwrap();
    let pks: Vec<String> = (0..40).map(|i| format!("p{i:03}")).collect();
    load(&s, "wide", &pks, 25);
    for (n, i) in (5..40).step_by(5).enumerate() {
        let at = format!("p{i:03}");
        s.split_blocking("wide", &at).unwrap();
        s.move_range_blocking("wide", &at, (n + 1) % 4).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    let expected = pks
        .iter()
        .flat_map(|p| (0..25).map(move |r| (p.clone(), format!("{r:04}"))))
        .collect();
    (s, expected)
}

/// The server a point lookup reports (read in place) is the one the range
/// layout names for its key, on both sides of every boundary; an unknown
/// table has none.
#[test]
fn server_of_agrees_with_the_layout() {
    let (s, _) = spread_store(manual());
    let layout = s.layout("wide").unwrap();
    assert_eq!(layout.len(), 8);
    let servers: std::collections::BTreeSet<_> = layout.iter().map(|r| r.2).collect();
    assert_eq!(servers.len(), 4, "the ranges are spread: {layout:?}");
    let expected = |pk: &str| {
        layout
            .iter()
            .find(|(lo, hi, _)| lo.as_str() <= pk && hi.as_deref().is_none_or(|h| pk < h))
            .map(|r| r.2)
    };
    let keys = (0..40)
        .flat_map(|i| [format!("p{i:03}"), format!("p{i:03}~")])
        .chain(["".to_owned(), "a".to_owned(), "z".to_owned()]);
    for pk in keys {
        assert_eq!(
            s.server_of("wide", &pk),
            expected(&pk),
            "{pk:?} in {layout:?}"
        );
        assert_eq!(s.server_of("WIDE", &pk), expected(&pk), "names fold case");
    }
    assert_eq!(s.server_of("nosuch", "p000"), None);
}

#[test]
fn a_full_scan_over_many_ranges_returns_every_entity_once_in_order() {
    let (s, expected) = spread_store(manual());
    assert_eq!(s.ranges("wide").unwrap().len(), 8);
    let (all, pages) = scan_all(&s, "wide", &Query::full_scan(), 7);
    assert_eq!(keys(&all), expected);
    assert!(pages > 1000 / 7);
    // A partition-range scan crossing three ranges.
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::new(
            std::ops::Bound::Included("p003".into()),
            std::ops::Bound::Excluded("p017".into()),
        ),
        rk: KeyInterval::all(),
    }]);
    let (part, _) = scan_all(&s, "wide", &q, 1000);
    assert_eq!(part.len(), 14 * 25);
    assert!(keys(&part).windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_scan_fans_out_across_servers_in_key_order() {
    let (s, expected) = spread_store(manual());
    let segments = s.segments("wide", &Query::full_scan()).unwrap();
    assert_eq!(segments.len(), 8);
    for parallelism in [1, 2, 8] {
        let stream = s
            .scan(
                "wide",
                &Query::full_scan(),
                ScanOptions {
                    page_size: 9,
                    parallelism,
                    ..Default::default()
                },
            )
            .unwrap();
        let (all, stats) = stream.collect().await.unwrap();
        assert_eq!(keys(&all), expected, "parallelism {parallelism}");
        assert_eq!(stats.servers.len(), 4);
        assert_eq!(stats.returned, 1000);
        assert_eq!(stats.segments, 8);
        assert!(stats.tokens_followed > 0);
    }
    // A scan touching only two segments.
    let q = Query::spans(vec![
        KeyBox::partition("p002"),
        KeyBox::point("p031", "0003"),
    ]);
    let (some, stats) = s
        .scan("wide", &q, ScanOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(some.len(), 26);
    assert_eq!(stats.segments, 2);
}

#[test]
fn a_sustained_hot_server_is_split_and_the_load_spreads() {
    let clock = manual();
    let config = PartitionConfig {
        targets: Some(Targets {
            per_partition: 1_000_000,
            per_server: 1_000,
            per_account: 1_000_000,
            burst: 0.1,
        }),
        balance_window: Duration::from_secs(3),
        load_window: Duration::from_secs(2),
        move_offline: Duration::from_millis(100),
        ..Default::default()
    };
    let s = store_with(clock.clone(), config);
    s.create_table_blocking("busy").unwrap();
    let hot_server = s.ranges("busy").unwrap()[0].server;
    let pks: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    // 2,000 writes/s offered against a 1,000/s server, for up to 6 s.
    let mut events = Vec::new();
    let mut n = 0u64;
    for step in 0..600 {
        clock.advance(Duration::from_millis(10));
        for _ in 0..20 {
            let pk = &pks[(n % 8) as usize];
            let _ = s.execute_blocking("busy", &[put(pk, &n.to_string())]);
            n += 1;
        }
        if step % 100 == 99 {
            events.extend(s.rebalance());
            if !events.is_empty() {
                break;
            }
        }
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e.action, BalanceAction::Split { .. })),
        "no split: {events:?}"
    );
    let moved_to = events
        .iter()
        .find_map(|e| match e.action {
            BalanceAction::Move { from, to, .. } if from == hot_server => Some(to),
            _ => None,
        })
        .expect("a move off the hot server");
    let ranges = s.ranges("busy").unwrap();
    assert_eq!(ranges.len(), 2);
    assert!(ranges.iter().any(|r| r.server == moved_to));
    // Keep driving: both servers now carry part of the load.
    for _ in 0..300 {
        clock.advance(Duration::from_millis(10));
        for _ in 0..20 {
            let pk = &pks[(n % 8) as usize];
            let _ = s.execute_blocking("busy", &[put(pk, &n.to_string())]);
            n += 1;
        }
    }
    let servers = s.servers();
    assert!(servers[hot_server].load_per_sec > 100.0, "{servers:?}");
    assert!(servers[moved_to].load_per_sec > 100.0, "{servers:?}");
    // Together they now admit more than one server's capacity.
    assert!(servers[hot_server].load_per_sec + servers[moved_to].load_per_sec > 1_200.0);
}

#[test]
fn a_single_hot_partition_alone_on_its_server_is_not_split() {
    let clock = manual();
    let config = PartitionConfig {
        targets: Some(Targets {
            per_partition: 1_000_000,
            per_server: 500,
            per_account: 1_000_000,
            burst: 0.1,
        }),
        balance_window: Duration::from_secs(2),
        ..Default::default()
    };
    let s = store_with(clock.clone(), config);
    s.create_table_blocking("one").unwrap();
    for i in 0..400 {
        clock.advance(Duration::from_millis(10));
        for j in 0..10 {
            let _ = s.execute_blocking("one", &[put("only", &format!("{i}-{j}"))]);
        }
    }
    assert!(s.rebalance().is_empty());
    assert_eq!(s.ranges("one").unwrap().len(), 1);
}

#[test]
fn requests_to_a_moving_range_get_server_busy_then_succeed() {
    let clock = manual();
    let s = store_with(clock.clone(), unthrottled());
    s.create_table_blocking("mvv").unwrap();
    load(&s, "mvv", &["a".to_owned(), "q".to_owned()], 3);
    s.split_blocking("mvv", "m").unwrap();
    let to = (s.ranges("mvv").unwrap()[1].server + 1) % 4;
    s.move_range_blocking("mvv", "m", to).unwrap();
    let err = s.get_blocking("mvv", "q", "0000").unwrap_err();
    match &err {
        StoreError::ServerBusy {
            scope,
            target_per_sec: None,
            retry_after,
            reason,
        } => {
            assert!(scope.contains("\"m\""), "{scope}");
            assert!(reason.contains("moving"), "{reason}");
            assert!(*retry_after <= Duration::from_millis(200));
        }
        other => panic!("{other:?}"),
    }
    // The other range keeps serving.
    assert!(s.get_blocking("mvv", "a", "0000").unwrap().is_some());
    clock.advance(Duration::from_millis(201));
    assert!(s.get_blocking("mvv", "q", "0000").unwrap().is_some());
}

#[tokio::test]
async fn the_retry_policy_rides_out_a_move_in_real_time() {
    let s = PartitionedStore::new(
        LocalStore::in_memory(),
        PartitionConfig {
            move_offline: Duration::from_millis(150),
            ..unthrottled()
        },
    )
    .unwrap();
    s.create_table("rtt").await.unwrap();
    s.execute("rtt", vec![put("z", "1")].into()).await.unwrap();
    s.split_blocking("rtt", "m").unwrap();
    s.move_range_blocking("rtt", "m", (s.ranges("rtt").unwrap()[1].server + 1) % 4)
        .unwrap();
    let mut stats = RetryStats::default();
    let got = with_retry(&RetryPolicy::default(), &mut stats, || {
        s.get("rtt", "z", "1")
    })
    .await
    .unwrap();
    assert!(got.is_some());
    assert!(stats.retries >= 1, "{stats:?}");
    assert!(stats.backoff >= Duration::from_millis(100), "{stats:?}");
}

/// Real time, default targets: two clients drive one PartitionKey as hard
/// as they can for 3 s; the admitted rate must be 2,000/s ± 10%.
#[test]
fn one_partition_driven_flat_out_admits_two_thousand_per_second() {
    let s = PartitionedStore::new(LocalStore::in_memory(), PartitionConfig::default()).unwrap();
    s.create_table_blocking("rate").unwrap();
    let run = Duration::from_secs(3);
    let start = Instant::now();
    let admitted: u64 = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let s = &s;
                sc.spawn(move || {
                    let mut ok = 0u64;
                    let mut i = 0u64;
                    while start.elapsed() < run {
                        i += 1;
                        match s.execute_blocking("rate", &[put("hot", &format!("{w}-{i}"))]) {
                            Ok(_) => ok += 1,
                            Err(e) if e.is_retryable() => {
                                std::thread::sleep(Duration::from_micros(200))
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    ok
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let rate = admitted as f64 / start.elapsed().as_secs_f64();
    eprintln!(
        "one hot partition: {admitted} admitted in {:?} = {rate:.0} entities/s",
        start.elapsed()
    );
    assert!(
        (1_800.0..=2_200.0).contains(&rate),
        "admitted rate {rate:.0}/s"
    );
}

#[test]
fn append_only_inserts_are_detected_random_keys_are_not() {
    let s = PartitionedStore::new(LocalStore::in_memory(), unthrottled()).unwrap();
    s.create_table_blocking("logs").unwrap();
    s.create_table_blocking("users").unwrap();
    s.create_table_blocking("rev").unwrap();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..300u64 {
        s.execute_blocking("logs", &[put(&format!("2026-11-22T10:{i:06}"), "")])
            .unwrap();
        s.execute_blocking("rev", &[put(&format!("{:06}", 999_999 - i), "")])
            .unwrap();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let guid = format!(
            "{:08x}-{:04x}-4{:03x}",
            x >> 32,
            (x >> 16) & 0xffff,
            x & 0xfff
        );
        s.execute_blocking("users", &[put(&guid, "")]).unwrap();
    }
    let patterns = s.insert_patterns();
    let kinds: Vec<_> = patterns
        .iter()
        .map(|p| (p.table.as_str(), p.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("logs", InsertPatternKind::AppendOnly),
            ("rev", InsertPatternKind::PrependOnly)
        ],
        "{patterns:?}"
    );
}

#[test]
fn hot_partitions_are_reported_with_their_level() {
    let clock = manual();
    let s = store_with(clock.clone(), unthrottled());
    s.create_table_blocking("hhh").unwrap();
    // 1,900/s on "hot", 1,200/s on "warm", 100/s on "cold" for 10 s.
    for step in 0..1_000 {
        clock.advance(Duration::from_millis(10));
        for (pk, per_step) in [("hot", 19), ("warm", 12), ("cold", 1)] {
            let ops: Vec<_> = (0..per_step)
                .map(|i| put(pk, &format!("{step}-{i}")))
                .collect();
            s.execute_blocking("hhh", &ops).unwrap();
        }
    }
    let hot = s.hot_partitions(10);
    let levels: Vec<_> = hot
        .iter()
        .map(|h| (h.partition_key.as_str(), h.level))
        .collect();
    use tablegate_store::partition::HotLevel;
    assert_eq!(
        levels,
        vec![("hot", HotLevel::Hot), ("warm", HotLevel::Warm)],
        "{hot:?}"
    );
    assert!((hot[0].load_per_sec - 1_900.0).abs() < 50.0, "{hot:?}");
}

#[test]
fn the_partition_map_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let s = PartitionedStore::new(
            LocalStore::open(dir.path(), StoreOptions::default()).unwrap(),
            unthrottled(),
        )
        .unwrap();
        s.create_table_blocking("kept").unwrap();
        s.split_blocking("kept", "g").unwrap();
        s.split_blocking("kept", "t").unwrap();
        s.move_range_blocking("kept", "t", (s.ranges("kept").unwrap()[2].server + 1) % 4)
            .unwrap();
        s.ranges("kept").unwrap()
    };
    let s = PartitionedStore::new(
        LocalStore::open(dir.path(), StoreOptions::default()).unwrap(),
        unthrottled(),
    )
    .unwrap();
    let after = s.ranges("kept").unwrap();
    let strip = |v: Vec<partition::RangeInfo>| {
        v.into_iter()
            .map(|r| (r.lo, r.hi, r.server))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(before), strip(after));
    // Dropping the table drops its map: a new table of that name starts whole.
    s.drop_table_blocking("kept").unwrap();
    s.create_table_blocking("kept").unwrap();
    assert_eq!(s.ranges("kept").unwrap().len(), 1);
}

#[test]
fn the_system_table_is_hidden_and_reserved() {
    let s = PartitionedStore::new(LocalStore::in_memory(), unthrottled()).unwrap();
    s.create_table_blocking("visible").unwrap();
    let names: Vec<_> = s
        .list_tables_blocking()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, vec!["visible"]);
    assert!(matches!(
        s.create_table_blocking("TGSYS_mine"),
        Err(StoreError::InvalidTableName { .. })
    ));
    assert!(matches!(
        s.query_blocking(
            "tgsys_partition_map",
            &Query::full_scan(),
            &PageRequest::default()
        ),
        Err(StoreError::TableNotFound { .. })
    ));
}

/// Every entity of `pieces` (each scanned on its own), in key order.
fn scan_pieces(s: &PartitionedStore, pieces: &[Vec<KeyBox>]) -> Vec<(String, String)> {
    pieces
        .iter()
        .flat_map(|spans| keys(&scan_all(s, "wide", &Query::spans(spans.clone()), 1000).0))
        .collect()
}

#[test]
fn a_large_scan_is_cut_by_partition_counts_into_balanced_pieces_selecting_the_same() {
    let (s, expected) = spread_store(manual());
    let all = Query::full_scan().spans;
    // 1,000 entities, at least 100 a piece: 4 pieces of ~250.
    let pieces = s.split_by_counts("wide", &all, 4, 100).unwrap();
    assert_eq!(pieces.len(), 4);
    assert_eq!(scan_pieces(&s, &pieces), expected);
    for p in &pieces {
        let n = scan_all(&s, "wide", &Query::spans(p.clone()), 1000).0.len();
        assert!((225..=275).contains(&n), "unbalanced piece of {n}");
    }
    // Too few entities for more pieces: 1,000 / 400 → 2.
    assert_eq!(s.split_by_counts("wide", &all, 8, 400).unwrap().len(), 2);
    assert_eq!(
        s.split_by_counts("wide", &all, 8, 5_000).unwrap(),
        vec![all]
    );

    // Spans that are not whole partitions keep their RowKey bounds, and a
    // point span stays where it belongs.
    let spans = vec![
        KeyBox {
            pk: KeyInterval::new(
                std::ops::Bound::Included("p010".into()),
                std::ops::Bound::Excluded("p030".into()),
            ),
            rk: KeyInterval::new(
                std::ops::Bound::Included("0010".into()),
                std::ops::Bound::Unbounded,
            ),
        },
        KeyBox::point("p035", "0003"),
    ];
    let whole = keys(&scan_all(&s, "wide", &Query::spans(spans.clone()), 1000).0);
    assert_eq!(whole.len(), 20 * 15 + 1);
    let pieces = s.split_by_counts("wide", &spans, 3, 50).unwrap();
    assert_eq!(pieces.len(), 3);
    assert_eq!(scan_pieces(&s, &pieces), whole);
}

#[test]
fn encoded_pages_hold_the_same_entities_as_decoded_ones() {
    let (s, _) = spread_store(manual());
    let queries = [
        Query::full_scan(),
        Query::spans(vec![KeyBox::partition("p007")]),
        // Not byte-exact: every RowKey of p010..p012 is scanned.
        Query::spans(vec![KeyBox {
            pk: KeyInterval::new(
                std::ops::Bound::Included("p010".into()),
                std::ops::Bound::Included("p012".into()),
            ),
            rk: KeyInterval::point("0004"),
        }]),
        Query::spans(vec![KeyBox::partition("p020")]).with_filter(Filter::Compare {
            field: Field::Property("n".into()),
            op: CmpOp::Eq,
            value: Value::Int32(1),
        }),
    ];
    for q in queries {
        let mut req = PageRequest::first(7);
        let mut enc = PageRequest {
            encoded: true,
            ..PageRequest::first(7)
        };
        loop {
            let a = s.query_blocking("wide", &q, &req).unwrap();
            let b = s.query_blocking("wide", &q, &enc).unwrap();
            assert!(b.entities.is_empty());
            let decoded: Vec<Entity> = b.encoded.iter().map(|e| e.decode().unwrap()).collect();
            assert_eq!(decoded, a.entities, "{q:?}");
            assert_eq!((a.scanned, &a.continuation), (b.scanned, &b.continuation));
            match (a.continuation, b.continuation) {
                (Some(t), Some(u)) => {
                    req = req.resume(t);
                    enc = enc.resume(u);
                }
                _ => break,
            }
        }
    }
}

/// The key visualizer's history is written as slots finish and at
/// shutdown, read back on open (the same picture, the statements that
/// caused it included), aged out of the system table, and dropped with
/// its table.
#[test]
fn the_key_visualizer_history_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = manual();
    let config = PartitionConfig {
        keyviz_slot: Duration::from_secs(1),
        keyviz_slots: 20,
        ..unthrottled()
    };
    let open = || {
        let local = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
        PartitionedStore::with_clock(local, config.clone(), clock.clone()).unwrap()
    };
    let window = Duration::from_secs(60);
    let saved_slots = |s: &PartitionedStore| {
        s.local()
            .query_blocking("tgsys_keyviz", &Query::full_scan(), &PageRequest::default())
            .unwrap()
            .entities
            .len()
    };
    let (view, statements) = {
        let s = open();
        s.create_table_blocking("seen").unwrap();
        for step in 0..30 {
            let pk = format!("p{}", step % 3);
            tablegate_store::api::in_statement(42, || {
                s.execute_blocking("seen", &[put(&pk, &step.to_string())])
                    .unwrap()
            });
            s.get_blocking("seen", "p0", "0").unwrap();
            clock.advance(Duration::from_millis(700));
            if step % 5 == 0 {
                s.save_key_visualizer_blocking().unwrap();
            }
        }
        s.save_key_visualizer_blocking().unwrap();
        let v = s.key_visualizer("seen", 100, window).unwrap();
        let from = v.slot_starts[0];
        let st = s
            .key_visualizer_statements("seen", ("p1", "p2"), (from, i64::MAX), window)
            .unwrap();
        (v, st)
    };
    assert_eq!(view.buckets.len(), 3);
    assert_eq!(statements, (vec![(42, 20)], 20));
    let s = open();
    assert_eq!(s.key_visualizer("seen", 100, window).unwrap(), view);
    let from = view.slot_starts[0];
    assert_eq!(
        s.key_visualizer_statements("seen", ("p1", "p2"), (from, i64::MAX), window)
            .unwrap(),
        statements
    );
    // A minute later the base tier's old slots age out of the table too.
    let before = saved_slots(&s);
    clock.advance(Duration::from_secs(60));
    s.get_blocking("seen", "p0", "0").unwrap();
    clock.advance(Duration::from_secs(1));
    s.get_blocking("seen", "p0", "0").unwrap();
    s.save_key_visualizer_blocking().unwrap();
    assert!(saved_slots(&s) < before, "{} < {before}", saved_slots(&s));
    s.drop_table_blocking("seen").unwrap();
    assert_eq!(saved_slots(&s), 0);
    s.create_table_blocking("seen").unwrap();
    assert!(
        s.key_visualizer("seen", 100, window)
            .unwrap()
            .buckets
            .is_empty()
    );
}
