//! Planner bugs found while reviewing the golden files and writing the
//! differential and estimate tests. Each test states the correct behaviour
//! (PostgreSQL semantics); all eight are fixed and the
//! tests stay as their regression tests. A new finding goes here first,
//! `#[ignore]`d with its number, so no wrong output is blessed in a golden
//! file.

use arrow_array::cast::AsArray;
use tablegate_planner::{ExecOptions, Plan, Planner, Result};
use tablegate_store::{EntityWrite, Operation, Value};

use crate::fixture;

async fn select(p: &Planner, sql: &str) -> std::sync::Arc<tablegate_planner::SelectPlan> {
    match p.plan(&Planner::parse(sql).unwrap()[0], sql).unwrap() {
        Plan::Select(s) => s,
        other => panic!("{sql}: {other:?}"),
    }
}

/// The (first, second) text columns of every row, in result order.
async fn keys(p: &Planner, sql: &str, opts: &ExecOptions) -> Result<Vec<(String, String)>> {
    let s = select(p, sql).await;
    let (batches, _) = p.execute(&s, &[], opts)?.collect().await?;
    Ok(batches
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_string::<i32>();
            let c = b.column(1).as_string::<i32>();
            (0..b.num_rows()).map(move |i| (a.value(i).to_owned(), c.value(i).to_owned()))
        })
        .collect())
}

async fn plan_json(p: &Planner, sql: &str) -> serde_json::Value {
    let s = select(p, sql).await;
    let out = p
        .explain(&s, &[], false, true, None, &fixture::opts())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
    v[0]["Plan"].clone()
}

/// BUG (wrong results). `race IN (41 values) AND runner IN (41 values)`
/// intersects into 1,681 boxes, over the 1,024-box budget, so the key set is
/// widened to its hull — PartitionKey range × every RowKey — and marked
/// lossy. But `Access::from_where` decides per conjunct whether it stays in
/// the residual, and each IN list on its own is exact, so both are dropped:
/// the store returns every row of the hull. Here: all 100 rows of
/// '2026 NYC__Full' instead of the one row in both lists.
#[tokio::test]
async fn in_lists_whose_product_exceeds_the_box_budget_stay_exact() {
    let p = fixture::planner().await;
    let races: Vec<String> = (0..40)
        .map(|i| format!("'2026 NYC__Full{i:02}'"))
        .chain(["'2026 NYC__Full'".to_owned()])
        .collect();
    let runners: Vec<String> = (0..40)
        .map(|i| format!("'BIB:{i:05}'"))
        .chain(["'BIB:00003__Hiro'".to_owned()])
        .collect();
    let sql = format!(
        "SELECT race, runner FROM registrations WHERE race IN ({}) AND runner IN ({})",
        races.join(", "),
        runners.join(", ")
    );
    let got = keys(&p, &sql, &fixture::opts()).await.unwrap();
    assert_eq!(got.len(), 1, "rows returned, first ones: {:?}", &got[..3]);
    assert_eq!(got[0], ("2026 NYC__Full".into(), "BIB:00003__Hiro".into()));
}

/// BUG (wrong results). LIMIT is pushed into the scan driver as
/// `ScanOptions::limit`, and each parallel segment stops once the rows
/// returned by *all* segments reach it. Later segments run ahead, so the
/// first segment stops before it has produced its share and the result is
/// not the first LIMIT rows in key order (it skips rows of the first
/// range partition and takes rows of later ones). Here, with pages of 10
/// (`SET tablegate.page_size = 10`), LIMIT 25 over three range partitions.
/// `differential::limit_and_offset_match_brute_force` finds the same bug
/// with random predicates, limits and offsets.
#[tokio::test]
async fn limit_over_several_segments_returns_the_first_rows() {
    let p = fixture::planner().await;
    let opts = ExecOptions {
        page_size: 10,
        ..Default::default()
    };
    let all = keys(&p, "SELECT race, runner FROM registrations", &opts)
        .await
        .unwrap();
    for (limit, offset) in [(25, 0), (30, 45), (70, 0)] {
        let sql = format!("SELECT race, runner FROM registrations LIMIT {limit} OFFSET {offset}");
        let got = keys(&p, &sql, &opts).await.unwrap();
        let want: Vec<_> = all.iter().skip(offset).take(limit).cloned().collect();
        assert_eq!(got, want, "{sql}");
    }
}

/// BUG (an error where a result is due). A row comparison with a NULL
/// element is not a key predicate and not a store filter either, so the
/// residual is "not pushable" and execution fails with "needs the analytics
/// engine" — while EXPLAIN says `Route: native`. In SQL,
/// `(race, runner) > ('X', NULL)` is `race > 'X' OR (race = 'X' AND NULL)`:
/// TRUE exactly where `race > 'X'` (a partition-range), and
/// `(race, runner) = ('X', NULL)` is never TRUE (empty).
#[tokio::test]
async fn row_comparison_with_a_null_element_runs_natively() {
    let p = fixture::planner().await;
    let opts = fixture::opts();
    let want = keys(
        &p,
        "SELECT race, runner FROM registrations WHERE race > '2026 NYC__Full'",
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(want.len(), 120);
    let got = keys(
        &p,
        "SELECT race, runner FROM registrations WHERE (race, runner) > ('2026 NYC__Full', NULL)",
        &opts,
    )
    .await
    .map_err(|e| e.to_string());
    assert_eq!(got.as_ref().map(Vec::len), Ok(want.len()));
    assert_eq!(got, Ok(want));
    let got = keys(
        &p,
        "SELECT race, runner FROM registrations WHERE (race, runner) = ('2026 NYC__Full', NULL)",
        &opts,
    )
    .await
    .map_err(|e| e.to_string());
    assert_eq!(got, Ok(Vec::new()));
}

/// BUG (an error where a result is due). `etag` is a text column;
/// a literal that is not a well-formed ETag cannot equal any row's ETag, so
/// `etag = 'nonsense'` selects nothing and `etag <> 'nonsense'` selects every
/// row. Today the literal does not convert to a Timestamp filter, the
/// residual is "not pushable" and the query fails with "needs the analytics
/// engine" (EXPLAIN: `Route: native`, residual not pushable).
#[tokio::test]
async fn a_malformed_etag_literal_matches_no_row() {
    let p = fixture::planner().await;
    let opts = fixture::opts();
    let eq = keys(
        &p,
        "SELECT race, runner FROM registrations WHERE race = '2026 NYC__Full' AND etag = 'nonsense'",
        &opts,
    )
    .await;
    assert_eq!(eq.map(|v| v.len()).map_err(|e| e.to_string()), Ok(0));
    let ne = keys(
        &p,
        "SELECT race, runner FROM registrations WHERE race = '2026 NYC__Full' AND etag <> 'nonsense'",
        &opts,
    )
    .await;
    assert_eq!(ne.map(|v| v.len()).map_err(|e| e.to_string()), Ok(100));
}

/// BUG (wrong estimate). "Estimated partitions" adds the store's estimate
/// per key box, so a PartitionKey reached by two boxes counts twice: a
/// row-range (one partition by definition) shows `partitions 2`, and the
/// minimum time then takes the multi-partition formula (1.2 ms at 10,000/s
/// per server) instead of the 2,000/s partition target (12 entities: 6 ms).
/// Same for two point lookups in one partition (`partitions 2`, 200 µs,
/// although one lookup alone is 500 µs). Golden files showing it:
/// boolean_logic.out (`runner < 'AGE:020' OR runner > 'BIB:00040'`),
/// key_forms_nulls_and_one_key_tables.out (`runner IN (… duplicates …)`,
/// `(race, runner) <> (…)`: partitions 7 of a 6-partition table).
#[tokio::test]
async fn estimated_partitions_count_each_partition_key_once() {
    let p = fixture::planner().await;
    let v = plan_json(
        &p,
        "SELECT name FROM registrations WHERE race = '2026 NYC__Full' \
         AND (runner < 'AGE:020' OR runner > 'BIB:00040')",
    )
    .await;
    assert_eq!(v["Class"], "row-range");
    assert_eq!(v["Estimated Entities Scanned"], 12);
    assert_eq!(v["Estimated Partitions"], 1, "{v:#}");
    assert_eq!(v["Minimum Seconds At Targets"], 0.006, "{v:#}");
    let v = plan_json(
        &p,
        "SELECT name FROM registrations WHERE race = '2026 NYC__Full' \
         AND runner IN ('BIB:00003__Hiro', 'BIB:00004__Ada')",
    )
    .await;
    assert_eq!(v["Class"], "point");
    assert_eq!(v["Estimated Partitions"], 1, "{v:#}");
    let v = plan_json(
        &p,
        "SELECT name FROM registrations WHERE (race, runner) <> ('2026 NYC__Full', 'BIB:00003__Hiro')",
    )
    .await;
    assert_eq!(v["Estimated Partitions"], 6, "{v:#}");
}

/// BUG (wrong estimate). For accesses over several partitions the minimum
/// time only applies the per-server (10,000/s) and account (20,000/s)
/// targets and forgets the 2,000/s per-PartitionKey target, so adding a
/// partition to a query makes it "faster": `race = '2026 NYC__Full'` (100
/// entities) is 50 ms, `race IN ('2026 NYC__Full', '2026 Berlin__Full')`
/// (the same 100 plus 20) is 6 ms. The largest partition touched bounds the
/// time from below: 100 / 2,000 s = 50 ms. Likewise two point lookups in two
/// partitions (200 µs) against one lookup (500 µs). This shows in the
/// golden files on every partition-range and full-scan access.
#[tokio::test]
async fn minimum_time_respects_the_partition_target_across_partitions() {
    let p = fixture::planner().await;
    let one = plan_json(
        &p,
        "SELECT name FROM registrations WHERE race = '2026 NYC__Full'",
    )
    .await["Minimum Seconds At Targets"]
        .as_f64()
        .unwrap();
    let two = plan_json(
        &p,
        "SELECT name FROM registrations WHERE race IN ('2026 NYC__Full', '2026 Berlin__Full')",
    )
    .await["Minimum Seconds At Targets"]
        .as_f64()
        .unwrap();
    assert!(two >= one, "one partition {one} s, a superset {two} s");
    let point = plan_json(&p, "SELECT title FROM events WHERE id = 'ev001'").await
        ["Minimum Seconds At Targets"]
        .as_f64()
        .unwrap();
    let points = plan_json(
        &p,
        "SELECT title FROM events WHERE id IN ('ev001', 'ev002')",
    )
    .await["Minimum Seconds At Targets"]
        .as_f64()
        .unwrap();
    assert!(
        points >= point,
        "one lookup {point} s, two lookups {points} s"
    );
}

/// BUG (wrong class). key spans come from IN and from NOT
/// combinations. `race <> 'x'`, `NOT (race = 'x')` and `race NOT BETWEEN …`
/// give key spans (partition-range), but `race NOT IN ('x')` and
/// `NOT (race IN ('x'))` — the same predicate — are a full scan with the
/// whole list as residual (predicates.out blesses this today).
#[tokio::test]
async fn not_in_on_the_partition_key_gives_key_spans() {
    let p = fixture::planner().await;
    let ne = plan_json(
        &p,
        "SELECT name FROM registrations WHERE race <> '2026 NYC__Full' AND race <> '2026 NYC__Half'",
    )
    .await;
    assert_eq!(ne["Class"], "partition-range");
    for sql in [
        "SELECT name FROM registrations WHERE race NOT IN ('2026 NYC__Full', '2026 NYC__Half')",
        "SELECT name FROM registrations WHERE NOT (race IN ('2026 NYC__Full', '2026 NYC__Half'))",
    ] {
        let v = plan_json(&p, sql).await;
        assert_eq!(v["Class"], ne["Class"], "{sql}");
        assert_eq!(v["Key Spans"], ne["Key Spans"], "{sql}");
        assert_eq!(v["Residual Filter"], serde_json::Value::Null, "{sql}");
    }
}

/// BUG (wrong estimate, beyond the 2x bound). The store's estimator probes a
/// partly covered partition by counting keys up to 10,000 and, past that,
/// falls back to the *whole* partition's count. A RowKey range covering
/// 11,500 of a 30,000-entity partition is estimated at 30,000 (2.6x).
/// `estimates.rs` stays within 2x only because its skewed partition has
/// 5,000 entities. (The cap lives in `PartitionedStore::estimate_blocking`;
/// the fallback in `LocalStore::estimate_blocking`.)
#[tokio::test]
async fn estimate_of_a_partly_covered_huge_partition_is_within_2x() {
    let (p, store) = fixture::empty_planner().await;
    fixture::run(
        &p,
        "CREATE TABLE huge (pk TEXT, rk TEXT, n INT, PRIMARY KEY (pk, rk))",
    )
    .await;
    let ops: Vec<_> = (0..30_000)
        .map(|r| {
            Operation::Insert(
                EntityWrite::new("p0", format!("r{r:05}")).with("n", Value::Int32(r % 10)),
            )
        })
        .collect();
    for chunk in ops.chunks(100) {
        store.execute_blocking("huge", chunk).unwrap();
    }
    let sql = "SELECT * FROM huge WHERE pk = 'p0' AND rk >= 'r00500' AND rk < 'r12000'";
    let s = select(&p, sql).await;
    let out = p
        .explain(&s, &[], true, true, None, &fixture::opts())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out[0]).unwrap();
    let est = v[0]["Plan"]["Estimated Entities Scanned"].as_u64().unwrap();
    let actual = v[0]["Plan"]["Actual Entities Scanned"].as_u64().unwrap();
    assert_eq!(actual, 11_500);
    assert!(
        2 * est >= actual && est <= 2 * actual,
        "estimated {est}, actual {actual}"
    );
}
