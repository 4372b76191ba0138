//! Crash safety: acknowledged EGTs survive `kill -9`, and no EGT is ever
//! partly visible.
//!
//! The parent re-runs this test binary as a child (`crash_child`, ignored in
//! normal runs) that commits entity-group transactions into a durable store
//! and prints `ACK <k>` after each one returns. The parent kills it with
//! SIGKILL at a random moment, reopens the store, and checks every EGT:
//! acknowledged ones are fully present; the rest are fully present or fully
//! absent. Several rounds reuse one directory, so recovery runs on data that
//! earlier crashes left behind. The store has 256 KiB memtables, so every
//! round crosses table-file flushes, and the rounds together write past
//! fjall's journal rotation point (64 MB), with the journal zero-fill
//! running (synced durability).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use tablegate_store::*;

const TABLE: &str = "crashtest";
const ROUNDS: u32 = 6;
const DIR_ENV: &str = "TABLEGATE_CRASH_DIR";
const ROUND_ENV: &str = "TABLEGATE_CRASH_ROUND";
/// Small enough that each round rotates the journal and flushes.
const MEMTABLE_BYTES: u64 = 256 * 1024;

/// Entities written by EGT `k` (1..=100, varied so sizes differ).
fn egt_size(k: u64) -> usize {
    1 + ((k * 37 + 11) % 100) as usize
}

fn partition(round: u32, k: u64) -> String {
    format!("r{round}-p{k:06}")
}

/// Padding, large enough that the rounds together write past fjall's
/// journal rotation point (64 MB of journal), varied per EGT.
fn pad(k: u64) -> String {
    "x".repeat(1_000 + (k as usize * 977) % 4_000)
}

/// Every 4th EGT rewrites the previous EGT's partition with a new
/// generation instead of inserting, so updates are checked for atomicity too.
fn is_update(k: u64) -> bool {
    k % 4 == 3
}

/// The child: writes EGTs until killed. Run only by `crash_recovery`.
#[test]
#[ignore = "run as a child process by crash_recovery"]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let round: u32 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let store = LocalStore::open(
        &dir,
        StoreOptions {
            memtable_bytes: Some(MEMTABLE_BYTES),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    if round == 0 {
        store.create_table_blocking(TABLE).unwrap();
    }
    let mut out = std::io::stdout().lock();
    // Round 0 first writes past fjall's journal rotation point (64 MB of
    // journal) before the parent's kill timer starts, so every later
    // round recovers across a rotated journal and flushed table files.
    let warm_up: usize = if round == 0 { 70_000_000 } else { 0 };
    let mut written = 0;
    let mut ready = false;
    for k in 0u64.. {
        if !ready && written >= warm_up {
            // The test harness has printed "test crash_child ... " without a newline.
            writeln!(out, "\nREADY").unwrap();
            out.flush().unwrap();
            ready = true;
        }
        let ops: Vec<Operation> = if is_update(k) {
            let target = k - 1;
            (0..egt_size(target))
                .map(|i| Operation::Merge {
                    entity: EntityWrite::new(partition(round, target), format!("{i:03}"))
                        .with("gen", Value::Int64(k as i64)),
                    if_match: IfMatch::Any,
                })
                .collect()
        } else {
            (0..egt_size(k))
                .map(|i| {
                    Operation::Insert(
                        EntityWrite::new(partition(round, k), format!("{i:03}"))
                            .with("egt", Value::Int64(k as i64))
                            .with("gen", Value::Int64(k as i64))
                            .with("pad", Value::String(pad(k))),
                    )
                })
                .collect()
        };
        store.execute_blocking(TABLE, &ops).unwrap();
        // A merge rewrites its partition's chunks: about as many bytes.
        written += egt_size(if is_update(k) { k - 1 } else { k }) * pad(k).len();
        writeln!(out, "ACK {k}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn crash_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = fastrand::Rng::with_seed(
        0x9E37_79B9_7F4A_7C15u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64,
    );
    let mut total_acked = 0u64;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, dir.path())
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Read acknowledgements on a thread; once the child has opened the
        // store, kill it after a random delay.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut ready = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == "READY" {
                    ready = true;
                    let _ = ready_tx.send(());
                } else if let Some(k) = line.strip_prefix("ACK ") {
                    acked.push(k.parse::<u64>().unwrap());
                }
            }
            (ready, acked)
        });
        let _ = ready_rx.recv_timeout(Duration::from_secs(120));
        let delay = Duration::from_millis(20 + rng.u64(..500));
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (was_ready, acked) = reader.join().unwrap();
        assert!(was_ready, "round {round}: the child never opened the store");
        let last_acked = acked.last().copied();
        total_acked += acked.len() as u64;

        let store = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
        check_round(&store, round, last_acked);
        drop(store);
    }
    assert!(
        total_acked > 0,
        "no EGT was acknowledged in {ROUNDS} rounds"
    );
    // The rounds crossed rotations (journals are numbered from 0) and
    // flushes (table files exist).
    let journals: Vec<u64> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".jnl")?.parse().ok())
        .collect();
    let newest = journals.iter().max().copied().unwrap_or(0);
    let tables = walk_files(&dir.path().join("keyspaces"))
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("tables")))
        .count();
    eprintln!("acked {total_acked} journals {journals:?} tables {tables}");
    assert!(newest >= 1, "journal {newest} is the newest: no rotation");
    assert!(tables > 0, "no table file was flushed");
    eprintln!(
        "crash_recovery: {total_acked} EGTs acknowledged over {ROUNDS} kill -9 rounds, \
         {newest} journal rotations, {tables} table files"
    );
}

/// Checks one round's partitions after a crash.
fn check_round(store: &LocalStore, round: u32, last_acked: Option<u64>) {
    // Everything acknowledged, plus at most the one in flight, may exist.
    let upto = last_acked.map_or(0, |k| k + 1);
    // The generation each insert EGT's partition must have reached: that of
    // the last acknowledged update of it.
    let mut final_gen = std::collections::HashMap::new();
    for k in (0..=upto).filter(|k| is_update(*k)) {
        if last_acked.is_some_and(|l| k <= l) {
            final_gen.insert(k - 1, k as i64);
        }
    }
    for k in (0..=upto).filter(|k| !is_update(*k)) {
        let pk = partition(round, k);
        let entities = scan_partition(store, &pk);
        let acknowledged = last_acked.is_some_and(|l| k <= l);
        let n = egt_size(k);
        if acknowledged {
            assert_eq!(
                entities.len(),
                n,
                "round {round}: acknowledged EGT {k} has {} of {n} entities",
                entities.len()
            );
        } else {
            assert!(
                entities.is_empty() || entities.len() == n,
                "round {round}: unacknowledged EGT {k} is partly present ({} of {n})",
                entities.len()
            );
        }
        // Updates are atomic: every entity of a partition has one generation,
        // at least the last acknowledged one.
        let gens: std::collections::BTreeSet<i64> = entities
            .iter()
            .map(|e| match e.properties["gen"] {
                Value::Int64(g) => g,
                ref other => panic!("gen is {other:?}"),
            })
            .collect();
        assert!(
            gens.len() <= 1,
            "round {round}: EGT {k}'s partition mixes generations {gens:?}"
        );
        if let (Some(expected), Some(&got)) = (final_gen.get(&k), gens.iter().next()) {
            assert!(
                got >= *expected,
                "round {round}: acknowledged update lost on EGT {k}: gen {got} < {expected}"
            );
        }
    }
    // The in-flight update may or may not have landed; the next write
    // after it was never started. Nothing beyond `upto + 1` exists.
    let beyond = partition(round, upto + 2);
    assert!(scan_partition(store, &beyond).is_empty());
}

fn scan_partition(store: &LocalStore, pk: &str) -> Vec<Entity> {
    let q = Query::spans(vec![KeyBox::partition(pk)]);
    let mut req = PageRequest::first(1000);
    let mut out = Vec::new();
    loop {
        let page = store.query_blocking(TABLE, &q, &req).unwrap();
        out.extend(page.entities);
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return out,
        }
    }
}

/// Every file under `dir`.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
