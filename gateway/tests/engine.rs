#![cfg(feature = "analytics")]
//! The analytics engine over an in-memory store: EXPLAIN of DataFusion
//! plans shows the store scans with their pushed key spans (golden file:
//! `tests/golden/engine_explain.out`; regenerate with
//! `UPDATE_GOLDENFILES=1 cargo test -p tablegate-gateway --test engine`,
//! then read the diff), results come back through the scans, and random
//! WHERE clauses get the same rows natively and through the engine.

use futures::StreamExt;
use tablegate_gateway::analytics::{Engine, Pool};
use tablegate_planner::{ExecOptions, Plan, Planner};
use tablegate_store::partition::PartitionConfig;
use tablegate_store::{LocalStore, PartitionedStore};

async fn planner() -> Planner {
    let store = PartitionedStore::new(
        LocalStore::in_memory(),
        PartitionConfig {
            targets: None,
            move_offline: std::time::Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    let p = Planner::open(store).await.unwrap();
    for sql in [
        "CREATE TABLE runners (race TEXT, runner TEXT, age INT, city TEXT, PRIMARY KEY (race, runner))",
        "CREATE TABLE races (race TEXT PRIMARY KEY, title TEXT)",
    ] {
        let stmt = Planner::parse(sql).unwrap().remove(0);
        let plan = p.plan(&stmt, sql).unwrap();
        p.run_ddl(&plan).await.unwrap();
    }
    let mut values = Vec::new();
    for (i, race) in ["berlin", "boston", "nyc"].iter().enumerate() {
        for r in 0..40 {
            values.push(format!(
                "('{race}', 'BIB:{r:03}', {}, 'c{}')",
                20 + (r * 7 + i) % 50,
                r % 4
            ));
        }
    }
    for sql in [
        format!("INSERT INTO runners VALUES {}", values.join(", ")),
        "INSERT INTO races VALUES ('berlin', 'Berlin'), ('boston', 'Boston'), ('nyc', 'NYC')"
            .to_owned(),
    ] {
        let stmt = Planner::parse(&sql).unwrap().remove(0);
        let Plan::Write(w) = p.plan(&stmt, &sql).unwrap() else {
            panic!()
        };
        p.write(&w, &[], None, &ExecOptions::default())
            .await
            .unwrap();
    }
    p
}

const EXPLAINED: &[&str] = &[
    "SELECT count(*) FROM runners",
    "SELECT race, avg(age) FROM runners WHERE race = 'boston' GROUP BY race",
    "SELECT runner, age FROM runners WHERE race >= 'bo' AND age > 40 ORDER BY age DESC LIMIT 3",
    "SELECT r.title, count(*) FROM runners u JOIN races r ON u.race = r.race WHERE u.race IN ('nyc', 'berlin') AND upper(u.city) = 'C1' GROUP BY r.title",
    "SELECT DISTINCT city FROM runners WHERE race = 'nyc' AND runner < 'BIB:010'",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_pushed_key_spans() {
    let p = planner().await;
    let engine = Engine::new(p, Pool::current(1 << 30), "tablegate").unwrap();
    let mut out = String::new();
    for sql in EXPLAINED {
        let plan = engine.plan(sql, "test").await.unwrap();
        let lines = engine
            .explain(&plan, &[], false, ExecOptions::default())
            .await
            .unwrap();
        out.push_str(&format!("-- {sql}\n{}\n\n", lines.join("\n")));
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/golden/engine_explain.out"
    );
    if std::env::var_os("UPDATE_GOLDENFILES").is_some() {
        std::fs::write(path, &out).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        out, want,
        "EXPLAIN changed: rerun with UPDATE_GOLDENFILES=1 and read the diff"
    );
    assert!(
        out.contains("class=row-range, spans=[PartitionKey = 'boston']"),
        "{out}"
    );
    assert!(out.contains("residual=[age > 40]"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_errors() {
    let p = planner().await;
    let engine = Engine::new(p, Pool::current(1 << 30), "tablegate").unwrap();
    let run = |sql: &'static str| {
        let engine = &engine;
        async move {
            let plan = engine.plan(sql, "test").await?;
            let mut s = engine.execute(&plan, &[], ExecOptions::default()).await?;
            let mut rows = 0;
            while let Some(b) = s.next().await {
                rows += b?.num_rows();
            }
            Ok::<_, datafusion::common::DataFusionError>(rows)
        }
    };
    assert_eq!(run("SELECT * FROM runners").await.unwrap(), 120);
    assert_eq!(
        run("SELECT race FROM runners GROUP BY race").await.unwrap(),
        3
    );
    assert_eq!(
        run("SELECT * FROM runners WHERE race = 'nyc' AND age > 200")
            .await
            .unwrap(),
        0
    );
    // Errors map to SQLSTATEs, not XX000.
    let code = |e: datafusion::common::DataFusionError| {
        tablegate_gateway::sqlstate::PgError::from(&e).code
    };
    assert_eq!(
        code(run("SELECT nope FROM runners").await.unwrap_err()),
        "42703"
    );
    assert_eq!(code(run("SELECT * FROM nope").await.unwrap_err()), "42P01");
    assert_eq!(
        code(run("SELECT age / 0 FROM runners").await.unwrap_err()),
        "22012"
    );
    // The full-scan guardrail holds on this path too.
    let plan = engine
        .plan("SELECT count(*) FROM runners", "test")
        .await
        .unwrap();
    let opts = ExecOptions {
        allow_full_scan: false,
        ..ExecOptions::default()
    };
    let mut s = engine.execute(&plan, &[], opts).await.unwrap();
    let mut err = None;
    while let Some(b) = s.next().await {
        if let Err(e) = b {
            err = Some(e);
            break;
        }
    }
    assert_eq!(code(err.expect("refused")), "TG001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_is_an_error_not_an_oom() {
    let p = planner().await;
    // 64 KiB: far less than a hash join's build side over a cross product.
    let engine = Engine::new(p, Pool::current(64 << 10), "tablegate").unwrap();
    let sql = "SELECT a.runner, count(*) FROM runners a JOIN runners b ON a.city = b.city \
               JOIN runners c ON b.city = c.city GROUP BY a.runner, b.runner, c.runner";
    let plan = engine.plan(sql, "test").await.unwrap();
    let result = async {
        let mut s = engine.execute(&plan, &[], ExecOptions::default()).await?;
        while let Some(b) = s.next().await {
            b?;
        }
        Ok::<_, datafusion::common::DataFusionError>(())
    }
    .await;
    let e = result.expect_err("over the memory limit");
    assert_eq!(
        tablegate_gateway::sqlstate::PgError::from(&e).code,
        "53200",
        "{e}"
    );
}

/// A WHERE clause from a small grammar: comparisons of every column with
/// literals (either side), NULL tests, IN, BETWEEN, prefix and other LIKEs,
/// row values over the key, boolean literals, under AND / OR / NOT.
fn predicate() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let op = prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]);
    let text_col = prop::sample::select(vec!["pk", "rk", "city"]);
    let text_lit = prop::sample::select(vec![
        "''", "'a'", "'b'", "'bb'", "'c'", "'e'", "'r05'", "'r1'", "'r10'", "'x'", "'y'",
    ]);
    let num_col = prop::sample::select(vec!["age", "score"]);
    let leaf = prop_oneof![
        (text_col.clone(), op.clone(), text_lit.clone())
            .prop_map(|(c, o, l)| format!("{c} {o} {l}")),
        (text_lit.clone(), op.clone(), text_col.clone())
            .prop_map(|(l, o, c)| format!("{l} {o} {c}")),
        (num_col.clone(), op, -2i32..62).prop_map(|(c, o, n)| format!("{c} {o} {n}")),
        (
            prop::sample::select(vec!["pk", "rk", "age", "city", "score"]),
            any::<bool>()
        )
            .prop_map(|(c, n)| format!("{c} IS {}NULL", if n { "NOT " } else { "" })),
        (
            text_col.clone(),
            any::<bool>(),
            prop::collection::vec(text_lit.clone(), 1..4)
        )
            .prop_map(|(c, n, l)| format!(
                "{c} {}IN ({})",
                if n { "NOT " } else { "" },
                l.join(", ")
            )),
        (text_col.clone(), any::<bool>(), text_lit.clone(), text_lit).prop_map(|(c, n, a, b)| {
            format!("{c} {}BETWEEN {a} AND {b}", if n { "NOT " } else { "" })
        }),
        (num_col, -2i32..62, 0i32..30)
            .prop_map(|(c, a, w)| format!("{c} BETWEEN {a} AND {}", a + w)),
        (
            text_col,
            prop::sample::select(vec!["'b%'", "'r1%'", "'%x'", "'r_5'", "''", "'%'"])
        )
            .prop_map(|(c, p)| format!("{c} LIKE {p}")),
        (
            prop::sample::select(vec![">", ">=", "<", "="]),
            prop::sample::select(vec!["'a'", "'b'", "'c'"]),
            prop::sample::select(vec!["'r00'", "'r10'", "'r99'"])
        )
            .prop_map(|(o, p, r)| format!("(pk, rk) {o} ({p}, {r})")),
        prop::sample::select(vec!["TRUE", "FALSE"]).prop_map(str::to_owned),
    ];
    leaf.prop_recursive(3, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
}

/// Rows of a result as text, in arrival order.
fn rows_of(batches: &[datafusion::arrow::array::RecordBatch]) -> Vec<Vec<String>> {
    use datafusion::arrow::util::display::array_value_to_string;
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        if c.is_null(r) {
                            "NULL".to_owned()
                        } else {
                            array_value_to_string(c, r).unwrap()
                        }
                    })
                    .collect(),
            );
        }
    }
    out
}

/// Random WHERE clauses over keys and values with NULLs: the native path
/// answers exactly what the analytics engine answers for the same SELECT
/// (which runs the same predicate in DataFusion, over a scan that pushes
/// only what the store evaluates exactly), or both refuse it with a
/// SQLSTATE other than XX000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_answers_match_the_analytics_engine() {
    use proptest::strategy::Strategy;
    use proptest::test_runner::{Config, TestRunner};
    let p = planner().await;
    let ddl = "CREATE TABLE people (pk TEXT, rk TEXT, age INT, city TEXT, score DOUBLE PRECISION, PRIMARY KEY (pk, rk))";
    let stmt = Planner::parse(ddl).unwrap().remove(0);
    p.run_ddl(&p.plan(&stmt, ddl).unwrap()).await.unwrap();
    let mut values = Vec::new();
    for (i, pk) in ["a", "b", "bb", "c"].iter().enumerate() {
        for r in 0..20 {
            let n = i * 20 + r;
            let age = if n % 7 == 0 {
                "NULL".to_owned()
            } else {
                (n % 60).to_string()
            };
            let city = ["'x'", "'y'", "NULL", "'xx'"][n % 4];
            let score = if n % 5 == 0 {
                "NULL".to_owned()
            } else {
                format!("{}.5", n % 9)
            };
            values.push(format!("('{pk}', 'r{r:02}', {age}, {city}, {score})"));
        }
    }
    let insert = format!("INSERT INTO people VALUES {}", values.join(", "));
    let Plan::Write(w) = p
        .plan(&Planner::parse(&insert).unwrap().remove(0), &insert)
        .unwrap()
    else {
        panic!()
    };
    p.write(&w, &[], None, &ExecOptions::default())
        .await
        .unwrap();
    let engine = Engine::new(p.clone(), Pool::current(1 << 30), "tablegate").unwrap();
    let handle = tokio::runtime::Handle::current();
    let query = (predicate(), proptest::option::of(0u64..30)).prop_map(|(w, limit)| match limit {
        Some(n) => format!(
            "SELECT pk, rk, age, city, score FROM people WHERE {w} ORDER BY pk, rk LIMIT {n}"
        ),
        None => format!("SELECT pk, rk, age, city, score FROM people WHERE {w}"),
    });
    let native_runs = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 1_000,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&query, |sql| {
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let code = |e: tablegate_gateway::sqlstate::PgError| e.code;
                let native = async {
                    let stmt = Planner::parse(&sql)?.remove(0);
                    let s = match p.plan(&stmt, &sql)? {
                        Plan::Select(s) => s,
                        Plan::Analytics { .. } => return Ok(None),
                        other => unreachable!("a SELECT, not {other:?}"),
                    };
                    let mut rows = p.execute(&s, &[], &ExecOptions::default())?;
                    let mut batches = Vec::new();
                    while let Some(b) = rows.next().await {
                        batches.push(b?);
                    }
                    Ok::<_, tablegate_planner::PlanError>(Some(rows_of(&batches)))
                }
                .await
                .map_err(|e| code((&e).into()));
                let analytic = async {
                    let plan = engine.plan(&sql, "test").await?;
                    let mut s = engine.execute(&plan, &[], ExecOptions::default()).await?;
                    let mut batches = Vec::new();
                    while let Some(b) = s.next().await {
                        batches.push(b?);
                    }
                    Ok::<_, datafusion::common::DataFusionError>(rows_of(&batches))
                }
                .await
                .map_err(|e| code((&e).into()));
                for r in [native.as_ref().err(), analytic.as_ref().err()]
                    .into_iter()
                    .flatten()
                {
                    proptest::prop_assert_ne!(
                        *r,
                        "XX000",
                        "{}: {:?} / {:?}",
                        sql,
                        native,
                        analytic
                    );
                }
                // A statement the native path runs, the engine runs too,
                // and the other way round.
                if let Ok(Some(_)) | Err(_) = native {
                    proptest::prop_assert_eq!(
                        native.is_ok(),
                        analytic.is_ok(),
                        "{}: {:?} / {:?}",
                        sql,
                        native,
                        analytic
                    );
                }
                if let (Ok(Some(mut n)), Ok(mut a)) = (native.clone(), analytic.clone()) {
                    native_runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if !sql.contains("ORDER BY") {
                        n.sort();
                        a.sort();
                    }
                    proptest::prop_assert_eq!(n, a, "{}", sql);
                }
                Ok(())
            })
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let native = native_runs.into_inner();
    assert!(native > 500, "only {native} of 1,000 cases ran natively");
}
