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

/// The second table's name.
pub const RUNNERS: &str = "entrants";

/// The second table: one row per runner, keyed by race and bib, and
/// [`CREATE_RUNNERS_INDEX`] in place of the hand-written `AGE:` rows.
pub const CREATE_RUNNERS: &str = "CREATE TABLE entrants (
    race TEXT,            -- PartitionKey: event and distance
    bib INTEGER,          -- RowKey
    name TEXT,
    gender TEXT,
    age INTEGER,
    registered TIMESTAMPTZ,
    PRIMARY KEY (race, bib))";

/// The name of [`CREATE_RUNNERS_INDEX`]'s index.
pub const RUNNERS_INDEX: &str = "entrants_age";

/// The index the gateway maintains for `entrants`: the seeds' `AGE:` rows,
/// written in the same entity-group transaction as each runner.
pub const CREATE_RUNNERS_INDEX: &str = "CREATE INDEX entrants_age ON entrants (age)";

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
            "row-range through the index entrants_age (SET tablegate.use_indexes = off to compare)",
            format!("SELECT bib, name, age FROM entrants WHERE race = '{nyc}' AND age BETWEEN 30 AND 34"),
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
    eprintln!("loading the demo data into {} ...", dir.display());
    let store = loading_store(dir)?;
    let planner = Planner::open(store.clone()).await.map_err(err)?;
    load_registrations(&planner, &store, runners).await?;
    load_runners(&planner, runners).await?;
    eprintln!("loaded in {:.1?}", started.elapsed());
    Ok(())
}

/// Set-up's store: buffered durability, no throttling.
fn loading_store(dir: &Path) -> Result<PartitionedStore, String> {
    let local = LocalStore::open(
        dir,
        StoreOptions {
            durability: Durability::Buffered,
            ..Default::default()
        },
    )
    .map_err(err)?;
    PartitionedStore::new(
        local,
        PartitionConfig {
            // Loading is set-up: no throttling, and the initial range layout
            // is assigned, not moved under load, so no offline period.
            targets: None,
            move_offline: Duration::ZERO,
            ..Default::default()
        },
    )
    .map_err(err)
}

/// The seeds' `registrations`: each runner a `BIB:` and an `AGE:` row.
async fn load_registrations(
    planner: &Planner,
    store: &PartitionedStore,
    runners: u32,
) -> Result<(), String> {
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
        "loading {total} entities ({} partitions × {runners} runners × 2 rows) into {TABLE} ...",
        pks.len(),
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
    Ok(())
}

/// Runs one statement of the set-up through the planner: DDL or a write.
async fn run_sql(planner: &Planner, sql: &str) -> Result<(), String> {
    let stmt = &Planner::parse(sql).map_err(err)?[0];
    match planner.plan(stmt, sql).map_err(err)? {
        Plan::Write(w) => planner
            .write(&w, &[], None, &ExecOptions::default())
            .await
            .map(drop)
            .map_err(err),
        plan => planner.run_ddl(&plan).await.map(drop).map_err(err),
    }
}

/// True when `entrants` and its built index are there.
fn runners_loaded(planner: &Planner) -> bool {
    planner
        .catalog()
        .table(RUNNERS)
        .is_ok_and(|t| t.index(RUNNERS_INDEX).is_some_and(|ix| !ix.building))
}

/// The `entrants` table: one row per runner through the gateway's write
/// path, then `CREATE INDEX` builds the age index over them. Finishes
/// what an interrupted run left (each step skips what is there).
async fn load_runners(planner: &Planner, runners: u32) -> Result<(), String> {
    run_sql(
        planner,
        &CREATE_RUNNERS.replacen("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1),
    )
    .await?;
    let pks = race::partition_keys();
    eprintln!(
        "loading {} runners into entrants, then {CREATE_RUNNERS_INDEX} ...",
        pks.len() as u64 * u64::from(runners)
    );
    for pk in &pks {
        let rows: Vec<String> = (0..runners)
            .map(|i| {
                let r = race::runner(pk, i);
                format!(
                    "('{pk}', {}, '{}', '{}', {}, '{}')",
                    r.bib, r.name, r.gender, r.age, r.registered
                )
            })
            .collect();
        for chunk in rows.chunks(500) {
            run_sql(
                planner,
                &format!(
                    "INSERT INTO entrants VALUES {} ON CONFLICT DO NOTHING",
                    chunk.join(", ")
                ),
            )
            .await?;
        }
    }
    // A build cut short leaves the index building: built again.
    run_sql(planner, &format!("DROP INDEX IF EXISTS {RUNNERS_INDEX}")).await?;
    run_sql(planner, CREATE_RUNNERS_INDEX).await
}

/// Opens the demo data directory, loading it on first use.
pub async fn open(dir: &Path, runners: u32) -> Result<Planner, String> {
    let marker = dir.join("tablegate-demo-loaded");
    if !marker.exists() {
        load(dir, runners).await?;
        std::fs::write(&marker, format!("{runners}\n")).map_err(err)?;
    } else {
        // A demo directory from before `entrants` existed gets it now
        // (and one whose loading of it was interrupted, the rest of it).
        let store = loading_store(dir)?;
        let planner = Planner::open(store).await.map_err(err)?;
        if !runners_loaded(&planner) {
            let loaded = std::fs::read_to_string(&marker).map_err(err)?;
            load_runners(&planner, loaded.trim().parse().unwrap_or(runners)).await?;
        }
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
