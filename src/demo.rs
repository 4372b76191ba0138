//! `tablegate demo`: the seeds' race registrations in a durable store, and
//! one SQL query of each access class with its EXPLAIN ANALYZE.

use std::path::Path;
use std::time::{Duration, Instant};

use tablegate_planner::{ExecOptions, Plan, Planner};
use tablegate_store::{
    Durability, LocalStore, PartitionConfig, PartitionedStore, StoreError, StoreOptions,
};

use crate::race;

/// The demo table.
pub const TABLE: &str = "registrations";

/// Its definition: the seeds' PartitionKey (event and distance) and RowKey
/// (`BIB:…` / `AGE:…`), and the runner's properties.
pub const CREATE_TABLE: &str = "CREATE TABLE registrations (
    race TEXT,            -- PartitionKey: event and distance
    runner TEXT,          -- RowKey: 'BIB:01234__John__M__55' or 'AGE:055__01234__John__M'
    bib INTEGER,
    name TEXT,
    gender TEXT,
    age INTEGER,
    registered TIMESTAMPTZ,
    PRIMARY KEY (race, runner))";

/// One example query per access class, as a person would type them.
pub fn example_queries() -> Vec<(&'static str, String)> {
    let nyc = race::partition_key("2026 New York City Marathon", "Full");
    let r = race::runner(&nyc, 1233);
    vec![
        (
            "point",
            format!("SELECT name, age FROM registrations WHERE race = '{nyc}' AND runner = '{}'", race::bib_key(&r)),
        ),
        (
            "row-range",
            format!("SELECT name, age FROM registrations WHERE race = '{nyc}' AND runner LIKE 'AGE:03%'"),
        ),
        (
            "partition-range",
            "SELECT race, name, age FROM registrations WHERE race LIKE '2026 New York City Marathon%' AND runner LIKE 'AGE:03%'"
                .to_owned(),
        ),
        (
            "full-scan",
            "SELECT race, name, age FROM registrations WHERE name = 'Grace' AND age >= 75".to_owned(),
        ),
        (
            "analytics (DataFusion over a row-range scan)",
            format!("SELECT gender, count(*), round(avg(age), 1) AS avg_age FROM registrations WHERE race = '{nyc}' AND runner LIKE 'BIB:%' GROUP BY gender ORDER BY gender"),
        ),
    ]
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Bulk load: buffered durability while loading (synced when the store
/// closes), one entity-group transaction per runner as in the seeds.
async fn load(dir: &Path, runners: u32) -> Result<(), String> {
    let started = Instant::now();
    let local = LocalStore::open(
        dir,
        StoreOptions {
            durability: Durability::Buffered,
            ..Default::default()
        },
    )
    .map_err(err)?;
    let store = PartitionedStore::new(
        local,
        PartitionConfig {
            // Loading is set-up: no throttling, and the initial range layout
            // is assigned, not moved under load, so no offline period.
            targets: None,
            move_offline: Duration::ZERO,
            ..Default::default()
        },
    )
    .map_err(err)?;
    let planner = Planner::open(store.clone()).await.map_err(err)?;
    let stmt = &Planner::parse(CREATE_TABLE).map_err(err)?[0];
    let plan = planner.plan(stmt, CREATE_TABLE).map_err(err)?;
    planner.run_ddl(&plan).await.map_err(err)?;
    // One range partition per event, spread over the servers, as the
    // balancer would leave a busy registration table.
    for (i, event) in race::EVENTS.iter().enumerate().skip(1) {
        let at = race::partition_key(event, race::DISTANCES[0]);
        store.split_blocking(TABLE, &at).map_err(err)?;
        store
            .move_range_blocking(TABLE, &at, i % store.config().servers)
            .map_err(err)?;
    }
    let pks = race::partition_keys();
    let total = pks.len() as u64 * u64::from(runners) * 2;
    eprintln!(
        "loading {total} entities ({} partitions × {runners} runners × 2 rows) into {} ...",
        pks.len(),
        dir.display()
    );
    let store2 = store.clone();
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|s| -> Result<(), StoreError> {
            let workers: Vec<_> = pks
                .chunks(pks.len().div_ceil(4))
                .map(|chunk| {
                    let store = &store2;
                    s.spawn(move || -> Result<(), StoreError> {
                        for pk in chunk {
                            for i in 0..runners {
                                let r = race::runner(pk, i);
                                store.execute_blocking(TABLE, &race::registration(pk, &r))?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("loader thread")?;
            }
            Ok(())
        })
    })
    .await
    .map_err(err)?
    .map_err(err)?;
    eprintln!("loaded in {:.1?}", started.elapsed());
    Ok(())
}

/// Opens the demo data directory, loading it on first use.
pub async fn open(dir: &Path, runners: u32) -> Result<Planner, String> {
    let marker = dir.join("tablegate-demo-loaded");
    if !marker.exists() {
        load(dir, runners).await?;
        std::fs::write(&marker, format!("{runners}\n")).map_err(err)?;
    }
    let local = LocalStore::open(dir, StoreOptions::default()).map_err(err)?;
    let store = PartitionedStore::new(local, PartitionConfig::default()).map_err(err)?;
    Planner::open(store).await.map_err(err)
}

/// Prints the demo's orientation: table layout and the queries to try
/// (the server prints how to connect once it listens).
pub fn describe(planner: &Planner) -> Result<(), String> {
    let store = planner
        .store()
        .partitioned()
        .ok_or("the demo runs on the embedded engine")?;
    let stats = store.table_stats_blocking(TABLE).map_err(err)?;
    println!(
        "table {TABLE}: {} entities in {} partitions",
        stats.entities, stats.partitions
    );
    for r in store.ranges(TABLE).map_err(err)? {
        println!(
            "  range partition [{:?} .. {}) on partition server {}: {} entities",
            r.lo,
            r.hi.map_or("end".to_owned(), |h| format!("{h:?}")),
            r.server,
            r.entities
        );
    }
    println!("\nTry one query of each class, with EXPLAIN ANALYZE in front to see what it costs:");
    for (class, sql) in example_queries() {
        println!("  -- {class}\n  {sql};");
    }
    println!("  -- and the guardrail:\n  SET tablegate.allow_full_scan = off;");
    println!("  -- what the store is doing: \\dv tablegate.*  then e.g.");
    println!("  SELECT * FROM tablegate.query_counters;");
    Ok(())
}

/// Prints EXPLAIN ANALYZE of every example query (no server).
pub async fn explain_examples(planner: &Planner) -> Result<(), String> {
    let opts = ExecOptions::default();
    for (class, sql) in example_queries() {
        println!("\n=== {class}\n{sql};\n");
        let stmt = &Planner::parse(&sql).map_err(err)?[0];
        let select = match planner.plan(stmt, &sql) {
            Ok(Plan::Select(select)) => select,
            Ok(Plan::Analytics { reason, .. }) => {
                println!("(runs in the analytics engine: {reason}; EXPLAIN it in psql)");
                continue;
            }
            Ok(_) => return Err(format!("not a query: {sql}")),
            Err(e) => return Err(e.to_string()),
        };
        for line in planner
            .explain(&select, &[], true, false, None, &opts)
            .await
            .map_err(err)?
        {
            println!("{line}");
        }
    }
    Ok(())
}
