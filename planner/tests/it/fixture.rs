//! A deterministic data set behind a planner, shared by the planner tests.

use tablegate_planner::{ExecOptions, Plan, Planner};
use tablegate_store::partition::PartitionConfig;
use tablegate_store::{LocalStore, PartitionedStore};

/// Partitions of `registrations` and rows in each (skewed on purpose:
/// partition i has 10·(i+1) runners, two rows each).
pub const RACES: [&str; 6] = [
    "2026 Berlin__Full",
    "2026 Berlin__Half",
    "2026 Boston__Full",
    "2026 NYC__10K",
    "2026 NYC__Full",
    "2026 NYC__Half",
];

/// A planner over an empty in-memory store: throttling off and range moves
/// instant, so tests see exact behaviour, not the targets.
pub async fn empty_planner() -> (Planner, PartitionedStore) {
    let store = PartitionedStore::new(
        LocalStore::in_memory(),
        PartitionConfig {
            targets: None,
            move_offline: std::time::Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    (Planner::open(store.clone()).await.unwrap(), store)
}

/// Runs one statement to completion (DDL or SELECT), for set-up.
pub async fn run(p: &Planner, sql: &str) {
    for stmt in Planner::parse(sql).unwrap() {
        match p.plan(&stmt, sql).unwrap() {
            plan @ (Plan::CreateTable { .. } | Plan::DropTable { .. } | Plan::AddColumn { .. }) => {
                p.run_ddl(&plan).await.unwrap();
            }
            other => panic!("set-up statement not DDL: {other:?}"),
        }
    }
}

/// A planner over an in-memory store (throttling off) holding:
/// - `registrations(race, runner, name, age, city, registered)` keyed
///   (race, runner) with BIB: and AGE: rows per runner, 420 entities in 6
///   partitions spread over 3 range partitions on different servers;
/// - `events(id, title, capacity)` keyed by `id` alone, 20 entities;
/// - `readings(device bigint, ts timestamptz, v)`, typed keys: devices -2
///   ..= 2, 24 hourly readings each from 2026-01-01;
/// - `tickets(id uuid, n)`: 10 entities, id bytes all `17·n`.
pub async fn planner() -> Planner {
    let (p, store) = empty_planner().await;
    run(
        &p,
        "CREATE TABLE registrations (race TEXT, runner TEXT, name TEXT, age INT, city TEXT, \
         registered TIMESTAMPTZ, PRIMARY KEY (race, runner))",
    )
    .await;
    run(
        &p,
        "CREATE TABLE events (id TEXT PRIMARY KEY, title TEXT, capacity INT)",
    )
    .await;
    let names = [
        "Ada", "Ben", "Chloé", "Dmitri", "Emma", "Farid", "Grace", "Hiro",
    ];
    let cities = ["Berlin", "Boston", "Paris", "Tokyo"];
    for (i, race) in RACES.iter().enumerate() {
        let mut ops = Vec::new();
        for r in 0..10 * (i + 1) {
            let age = 18 + ((r * 7 + i * 3) % 60) as i32;
            let name = names[(r + i) % names.len()];
            let city = cities[(r * 3 + i) % cities.len()];
            let rows = [
                format!("BIB:{r:05}__{name}"),
                format!("AGE:{age:03}__{r:05}__{name}"),
            ];
            for rk in rows {
                let mut w = tablegate_store::EntityWrite::new(*race, rk)
                    .with("name", tablegate_store::Value::String(name.into()))
                    .with("age", tablegate_store::Value::Int32(age))
                    .with(
                        "registered",
                        tablegate_store::Value::DateTime(tablegate_store::DateTime(
                            1_767_225_600_000_000 + (r as i64) * 86_400_000_000,
                        )),
                    );
                if r % 5 != 4 {
                    w = w.with("city", tablegate_store::Value::String(city.into()));
                }
                ops.push(tablegate_store::Operation::Insert(w));
            }
        }
        for chunk in ops.chunks(100) {
            store.execute_blocking("registrations", chunk).unwrap();
        }
    }
    for i in 0..20 {
        let w = tablegate_store::EntityWrite::new(format!("ev{i:03}"), "")
            .with(
                "title",
                tablegate_store::Value::String(format!("Event {i}")),
            )
            .with("capacity", tablegate_store::Value::Int32(100 * (i + 1)));
        store
            .execute_blocking("events", &[tablegate_store::Operation::Insert(w)])
            .unwrap();
    }
    // Typed keys: devices -2 ..= 2, one reading an hour for a day.
    run(
        &p,
        "CREATE TABLE readings (device BIGINT, ts TIMESTAMPTZ, v DOUBLE PRECISION, \
         PRIMARY KEY (device, ts))",
    )
    .await;
    run(&p, "CREATE TABLE tickets (id UUID PRIMARY KEY, n INT)").await;
    let key = |ty: tablegate_catalog::SqlType, v: tablegate_store::Value| {
        ty.encode_key(&v).expect("a key value")
    };
    for device in -2i64..=2 {
        let mut ops = Vec::new();
        for h in 0..24i64 {
            let ts = tablegate_store::DateTime(1_767_225_600_000_000 + h * 3_600_000_000);
            let w = tablegate_store::EntityWrite::new(
                key(
                    tablegate_catalog::SqlType::Int8,
                    tablegate_store::Value::Int64(device),
                ),
                key(
                    tablegate_catalog::SqlType::Timestamptz,
                    tablegate_store::Value::DateTime(ts),
                ),
            )
            .with(
                "v",
                tablegate_store::Value::Double((device * 100 + h) as f64),
            );
            ops.push(tablegate_store::Operation::Insert(w));
        }
        store.execute_blocking("readings", &ops).unwrap();
    }
    for i in 0..10u8 {
        let id = tablegate_store::Value::Guid([i * 17; 16]);
        let w = tablegate_store::EntityWrite::new(key(tablegate_catalog::SqlType::Uuid, id), "")
            .with("n", tablegate_store::Value::Int32(i32::from(i)));
        store
            .execute_blocking("tickets", &[tablegate_store::Operation::Insert(w)])
            .unwrap();
    }
    // Three range partitions on three different servers.
    for (at, server) in [("2026 Boston", 1), ("2026 NYC__Full", 2)] {
        store.split_blocking("registrations", at).unwrap();
        store
            .move_range_blocking("registrations", at, server)
            .unwrap();
    }
    store.move_range_blocking("registrations", "", 0).unwrap();
    p
}

/// Default execution options for tests.
pub fn opts() -> ExecOptions {
    ExecOptions::default()
}
