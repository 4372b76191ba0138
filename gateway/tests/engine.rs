//! The analytics engine over an in-memory store: EXPLAIN of DataFusion
//! plans shows the store scans with their pushed key spans (golden file:
//! `tests/golden/engine_explain.out`; regenerate with
//! `UPDATE_GOLDENFILES=1 cargo test -p tablegate-gateway --test engine`,
//! then read the diff), and results come back through the scans.

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
