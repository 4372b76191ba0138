//! `tablegate demo`: the seeds' race registrations in a durable store, and
//! one access of each class with its real cost.

use std::path::Path;
use std::time::Instant;

use tablegate_store::partition::scan::{ScanOptions, ScanStats};
use tablegate_store::{
    CmpOp, Durability, Field, Filter, KeyBox, KeyInterval, LocalStore, PartitionConfig,
    PartitionedStore, Query, StoreError, StoreOptions, Value,
};

use crate::race;

/// The demo table.
pub const TABLE: &str = "registrations";

/// Opens (loading on first use) the demo store in `dir`.
pub fn open_loaded(dir: &Path, runners: u32) -> Result<PartitionedStore, StoreError> {
    let fresh = !dir.join("loaded").exists();
    if fresh {
        load(dir, runners)?;
        std::fs::write(dir.join("loaded"), format!("{runners}\n"))
            .map_err(|e| StoreError::Engine(e.to_string()))?;
    }
    let local = LocalStore::open(dir, StoreOptions::default())?;
    PartitionedStore::new(local, PartitionConfig::default())
}

/// Bulk load: buffered durability while loading (the store is synced when
/// it closes), one entity-group transaction per runner as in the seeds.
fn load(dir: &Path, runners: u32) -> Result<(), StoreError> {
    let started = Instant::now();
    let local = LocalStore::open(
        dir,
        StoreOptions {
            durability: Durability::Buffered,
            ..Default::default()
        },
    )?;
    let store = PartitionedStore::new(
        local,
        PartitionConfig {
            // Loading is setup: no throttling, and the initial range layout
            // is assigned, not moved under load, so no offline period.
            targets: None,
            move_offline: std::time::Duration::ZERO,
            ..Default::default()
        },
    )?;
    match store.create_table_blocking(TABLE) {
        Ok(_) | Err(StoreError::TableExists { .. }) => {}
        Err(e) => return Err(e),
    }
    // One range partition per event, spread over the servers, as the
    // balancer would leave a busy registration table.
    for (i, event) in race::EVENTS.iter().enumerate().skip(1) {
        let at = race::partition_key(event, race::DISTANCES[0]);
        store.split_blocking(TABLE, &at)?;
        store.move_range_blocking(TABLE, &at, i % store.config().servers)?;
    }
    let pks = race::partition_keys();
    let total = pks.len() as u64 * u64::from(runners) * 2;
    eprintln!(
        "loading {total} entities ({} partitions × {runners} runners × 2 rows) into {} ...",
        pks.len(),
        dir.display()
    );
    std::thread::scope(|s| -> Result<(), StoreError> {
        let workers: Vec<_> = pks
            .chunks(pks.len().div_ceil(4))
            .map(|chunk| {
                let store = &store;
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
    })?;
    eprintln!("loaded in {:.1?}", started.elapsed());
    Ok(())
}

struct Shown {
    class: &'static str,
    what: String,
    stats: ScanStats,
}

/// Runs the demo.
pub async fn run(dir: &Path, runners: u32) -> Result<(), String> {
    let store = {
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || open_loaded(&dir, runners))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
    };
    let nyc_full = race::partition_key("2026 New York City Marathon", "Full");
    let r = race::runner(&nyc_full, 1233);
    let queries = vec![
        (
            "point",
            format!(
                "PartitionKey = '{nyc_full}' AND RowKey = '{}'",
                race::bib_key(&r)
            ),
            Query::spans(vec![KeyBox::point(nyc_full.clone(), race::bib_key(&r))]),
        ),
        (
            "row-range",
            format!("PartitionKey = '{nyc_full}' AND RowKey LIKE 'AGE:03%'"),
            Query::spans(vec![KeyBox {
                pk: KeyInterval::point(nyc_full.clone()),
                rk: KeyInterval::prefix("AGE:03"),
            }]),
        ),
        (
            "partition-range",
            "PartitionKey LIKE '2026 New York City Marathon__%' AND RowKey LIKE 'AGE:03%'"
                .to_owned(),
            Query::spans(vec![KeyBox {
                pk: KeyInterval::prefix("2026 New York City Marathon__"),
                rk: KeyInterval::prefix("AGE:03"),
            }]),
        ),
        (
            "full-scan",
            "name = 'Grace' AND age >= 75 AND RowKey LIKE 'BIB:%'".to_owned(),
            Query::full_scan().with_filter(Filter::And(vec![
                Filter::cmp(
                    Field::prop("name"),
                    CmpOp::Eq,
                    Value::String("Grace".into()),
                ),
                Filter::cmp(Field::prop("age"), CmpOp::Ge, Value::Int32(75)),
                Filter::Like {
                    field: Field::RowKey,
                    pattern: "BIB:%".into(),
                    escape: None,
                    case_insensitive: false,
                },
            ])),
        ),
    ];
    let stats = store
        .table_stats_blocking(TABLE)
        .map_err(|e| e.to_string())?;
    println!(
        "\ntable {TABLE}: {} entities in {} partitions",
        stats.entities, stats.partitions
    );
    for r in store.ranges(TABLE).map_err(|e| e.to_string())? {
        println!(
            "  range partition [{:?} .. {}) on server {}: {} entities",
            r.lo,
            r.hi.map_or("end".to_owned(), |h| format!("{h:?}")),
            r.server,
            r.entities
        );
    }
    let mut shown = Vec::new();
    for (class, what, q) in queries {
        let stream = store
            .scan(TABLE, &q, ScanOptions::default())
            .map_err(|e| e.to_string())?;
        let (_, stats) = stream.collect().await.map_err(|e| e.to_string())?;
        shown.push(Shown { class, what, stats });
    }
    println!(
        "\n{:<16} {:>9} {:>9} {:>6} {:>8} {:>9}  predicate",
        "class", "returned", "scanned", "pages", "servers", "time"
    );
    for s in &shown {
        println!(
            "{:<16} {:>9} {:>9} {:>6} {:>8} {:>8.1?}  {}",
            s.class,
            s.stats.returned,
            s.stats.scanned,
            s.stats.pages,
            s.stats.servers.len(),
            s.stats.elapsed,
            s.what
        );
    }
    println!(
        "\nAt the seeds' targets a partition serves 2,000 entities/s and the account 20,000/s:\n\
         the full scan's {} scanned entities cost at least {:.1} s of the account's capacity,\n\
         the point query one entity.",
        shown[3].stats.scanned,
        shown[3].stats.scanned as f64 / 20_000.0
    );
    println!(
        "\nData is in {}; run again to query it without reloading.",
        dir.display()
    );
    println!("SQL over psql arrives with the gateway (issue 5); this demo uses the store API.");
    Ok(())
}
