//! Planning cost: parse + bind + classify a point query, and the bind-only
//! cost of a prepared statement (what a driver pays per Execute).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use tablegate_planner::{Plan, Planner};
use tablegate_store::{LocalStore, PartitionConfig, PartitionedStore, Value};

fn planner(rt: &tokio::runtime::Runtime) -> Planner {
    rt.block_on(async {
        let store = PartitionedStore::new(LocalStore::in_memory(), PartitionConfig::default()).unwrap();
        let p = Planner::open(store).await.unwrap();
        let sql = "CREATE TABLE entities (pk TEXT, rk TEXT, n INT, s TEXT, d DOUBLE PRECISION, PRIMARY KEY (pk, rk))";
        let stmt = &Planner::parse(sql).unwrap()[0];
        let plan = p.plan(stmt, sql).unwrap();
        p.run_ddl(&plan).await.unwrap();
        p
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let p = planner(&rt);
    let sql = "SELECT pk, rk, n, s, d FROM entities WHERE pk = 'p000123' AND rk = 'r000456'";
    c.bench_function("plan/point: parse+bind+classify", |b| {
        b.iter(|| {
            let stmt = &Planner::parse(sql).unwrap()[0];
            let Plan::Select(select) = p.plan(stmt, sql).unwrap() else {
                unreachable!()
            };
            let bound = select.bind(&[]).unwrap();
            assert_eq!(bound.access.class, tablegate_planner::AccessClass::Point);
            bound
        })
    });
    let psql = "SELECT pk, rk, n, s, d FROM entities WHERE pk = $1 AND rk = $2";
    let stmt = &Planner::parse(psql).unwrap()[0];
    let Plan::Select(prepared) = p.plan(stmt, psql).unwrap() else {
        unreachable!()
    };
    let prepared: Arc<_> = prepared;
    let params = [
        Some(Value::String("p000123".into())),
        Some(Value::String("r000456".into())),
    ];
    c.bench_function("plan/point prepared: bind+classify", |b| {
        b.iter(|| prepared.bind(&params).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
