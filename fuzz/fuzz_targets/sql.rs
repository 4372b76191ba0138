//! SQL text through every stage the native path runs before and after the
//! store: parse (with the statement budget), plan, bind, classify,
//! estimate and render EXPLAIN (text and JSON), translate to the Azure
//! backend's OData filter, and execute against a small in-memory table.
//! Any input must get an answer or an error, never a panic or a stack
//! overflow.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use tablegate_planner::{ExecOptions, Plan, Planner, exec, explain};
use tablegate_store::partition::PartitionConfig;
use tablegate_store::{EntityWrite, LocalStore, Operation, PartitionedStore, TableStore, Value};

struct Fixture {
    runtime: tokio::runtime::Runtime,
    planner: Planner,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let planner = runtime.block_on(async {
        let store = PartitionedStore::new(
            LocalStore::in_memory(),
            PartitionConfig {
                targets: None,
                move_offline: std::time::Duration::ZERO,
                ..Default::default()
            },
        )
        .unwrap();
        let p = Planner::open(store.clone()).await.unwrap();
        for sql in [
            "CREATE TABLE tbl (pk TEXT, rk TEXT, name TEXT, n INT, big BIGINT, x DOUBLE PRECISION, \
             b BOOLEAN, ts TIMESTAMPTZ, u UUID, bin BYTEA, PRIMARY KEY (pk, rk))",
            "CREATE TABLE ones (id TEXT PRIMARY KEY, v TEXT)",
        ] {
            let stmt = &Planner::parse(sql).unwrap()[0];
            let plan = p.plan(stmt, sql).unwrap();
            p.run_ddl(&plan).await.unwrap();
        }
        let mut ops = Vec::new();
        for i in 0..20 {
            ops.push(Operation::Insert(
                EntityWrite::new("a", format!("r{i:02}"))
                    .with("name", Value::String(format!("n{}", i % 3)))
                    .with("n", Value::Int32(i))
                    .with("x", Value::Double(f64::from(i) / 3.0)),
            ));
        }
        store.execute("tbl", ops.into()).await.unwrap();
        p
    });
    Fixture { runtime, planner }
});

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let f = &*FIXTURE;
    let Ok(stmts) = Planner::parse(sql) else {
        return;
    };
    for stmt in &stmts {
        let Ok(plan) = f.planner.plan(stmt, sql) else {
            continue;
        };
        let select = match &plan {
            Plan::Select(s) => s.clone(),
            Plan::Explain(e) => e.select.clone(),
            _ => continue,
        };
        let params: Vec<Option<Value>> = (0..select.param_types.len())
            .map(|i| match i % 3 {
                0 => Some(Value::String("a".into())),
                1 => Some(Value::Int32(7)),
                _ => None,
            })
            .collect();
        let Ok(bound) = select.bind(&params) else {
            continue;
        };
        if let Ok(est) = explain::estimate(f.planner.store(), &bound, 1000) {
            let _ = explain::render_text(&bound, &est, None, explain::IndexUse::On);
            let _ = explain::render_json(&bound, &est, None, explain::IndexUse::On);
            let _ = explain::advice(&bound, &est);
        }
        let query = exec::store_query(&bound);
        if !query.spans.is_empty() {
            for service in [
                tablegate_azure::Service::Storage,
                tablegate_azure::Service::Cosmos,
            ] {
                let _ = tablegate_azure::odata::translate(&query, service);
            }
        }
        if matches!(select.route, tablegate_planner::plan::Route::Native) {
            let opts = ExecOptions::default();
            let sel = Arc::clone(&select);
            let _ = f.runtime.block_on(async {
                match f.planner.execute(&sel, &params, &opts) {
                    Ok(rows) => rows.collect().await.map(|_| ()),
                    Err(e) => Err(e),
                }
            });
        }
    }
});
