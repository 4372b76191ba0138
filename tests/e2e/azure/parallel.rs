//! Parallel remote scans over Azurite: a scan that passes its first page is
//! cut at PartitionKey boundaries probed from the table and read in
//! segments at once; it returns the same rows in the same order as a scan
//! read page by page (`tablegate.scan_parallelism = 1`), reads no entity
//! twice, and EXPLAIN says so. Through the fault proxy, each query request
//! waits 20 ms, as over a network; the times of both are printed, not
//! asserted.

use std::time::{Duration, Instant};

use super::faults::{Fault, serve_through_proxy};
use super::{line, plan, psql_at, psql_script, rows};

#[test]
fn azure_large_scans_run_in_parallel_segments_in_key_order() {
    let (proxy, a, t, _drop) = serve_through_proxy(
        "par",
        "tenant text, id text, n int, PRIMARY KEY (tenant, id)",
    );
    // 20,000 entities: 400 tenants of 50 (COPY, one EGT per tenant).
    let mut copy = format!("COPY {t} FROM STDIN;\n");
    for i in 0..20_000 {
        copy.push_str(&format!("tenant-{:05}\t{:03}\t{i}\n", i / 50, i % 50));
    }
    copy.push_str("\\.\n");
    let (out, err, ok) = psql_script(&a.s, &["-v", "ON_ERROR_STOP=1"], &copy);
    assert!(ok && out.contains("COPY 20000"), "{out}{err}");

    proxy.fail(
        "GET",
        &t,
        Fault::Delay(Duration::from_millis(20)),
        usize::MAX,
    );
    let all = format!("SELECT tenant, id, n FROM {t}");
    let timed = |setting: &str| {
        let started = Instant::now();
        let (out, err, ok) = psql_at(&a.s, &[setting, &all]);
        assert!(ok, "{err}");
        let rows: Vec<String> = out.lines().skip(1).map(str::to_owned).collect();
        (rows, started.elapsed())
    };
    let (one, sequential) = timed("SET tablegate.scan_parallelism = 1");
    let (many, parallel) = timed("SET tablegate.scan_parallelism = 8");
    assert_eq!(one.len(), 20_000);
    assert_eq!(many, one, "same rows, same (key) order");
    let mut sorted = one.clone();
    sorted.sort();
    assert_eq!(one, sorted);
    println!(
        "20,000 entities, 20 ms a request: page by page {sequential:?}, 8 segments at once {parallel:?} ({:.2}x)",
        sequential.as_secs_f64() / parallel.as_secs_f64()
    );

    let p = plan(&a.s, "EXPLAIN", &all);
    assert!(
        line(&p, "Past its first page, cut at PartitionKey boundaries").contains("in parallel"),
        "{p:?}"
    );
    let p = plan(&a.s, "EXPLAIN ANALYZE", &all);
    let scanned = line(&p, "Actual: entities scanned");
    assert!(
        scanned.starts_with("Actual: entities scanned 20000, returned 20000"),
        "no entity read twice: {scanned}"
    );
    let cut = p
        .iter()
        .find(|l| l.starts_with("Actual: ") && l.contains("segments read in parallel"))
        .unwrap_or_else(|| panic!("{p:?}"));
    let n: usize = cut
        .trim_start_matches("Actual: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{cut}"));
    assert!(n >= 4, "{cut}");

    // A partition-range scan is cut too, within its range; aggregates on
    // the analytics engine read the same segments.
    let range = format!(
        "SELECT count(*), sum(n) FROM {t} WHERE tenant >= 'tenant-00100' AND tenant < 'tenant-00300'"
    );
    assert_eq!(
        rows(&a.s, &range),
        [format!("10000|{}", (5_000..15_000).sum::<i64>())]
    );
    // A LIMIT reads on page by page: nothing to cut.
    let p = plan(&a.s, "EXPLAIN ANALYZE", &format!("{all} LIMIT 5"));
    assert!(
        !p.iter()
            .any(|l| l.starts_with("Actual: ") && l.contains("segments read in parallel")),
        "{p:?}"
    );
}
