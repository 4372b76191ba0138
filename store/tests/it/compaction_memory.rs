//! The vendored lsm-tree patch (`vendor/README.md`): a compaction holds
//! only its output's keys, not the input blocks they were read from.
//!
//! Without the patch, the table writer kept each output block's last key
//! as a view into the decompressed input block it came from, so a
//! compaction held about one input block per output block until its
//! output table was finished: for one output table, the whole input.
//! The parent writes four tables with lsm-tree directly (the
//! engine under fjall), then re-runs this binary as a child
//! (`compaction_memory_child`, ignored in normal runs) that opens them,
//! merges them into one table and reports how far its peak resident
//! memory rose. The child is a fresh process so that memory the parent
//! freed cannot hide the growth. Linux only: it reads the peak from
//! `/proc`.
#![cfg(target_os = "linux")]

use std::process::Command;
use std::sync::Arc;

use lsm_tree::config::{BlockSizePolicy, CompressionPolicy, PinningPolicy, RestartIntervalPolicy};
use lsm_tree::{AbstractTree, Cache, CompressionType, Config, SequenceNumberCounter};

const DIR_ENV: &str = "TABLEGATE_COMPACTION_DIR";
const ENTRIES: u64 = 400_000;
const TABLES: u64 = 4;

/// Every key is a restart head (stored whole, so read back as a view into
/// its block) and longer than byteview's 20-byte inline limit; blocks are
/// uncompressed so the input's size in memory is its size on disk. The
/// index is one block, not partitioned: a partitioned index writer (the
/// default for the last level, where a major compaction writes) keeps only
/// one key per index partition.
fn open(dir: &std::path::Path) -> lsm_tree::AnyTree {
    Config::new(
        dir,
        SequenceNumberCounter::default(),
        SequenceNumberCounter::default(),
    )
    .use_cache(Arc::new(Cache::with_capacity_bytes(1 << 20)))
    .data_block_restart_interval_policy(RestartIntervalPolicy::all(1))
    .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
    .data_block_size_policy(BlockSizePolicy::all(4 * 1024))
    .index_block_partitioning_policy(PinningPolicy::all(false))
    .open()
    .unwrap()
}

fn key(i: u64) -> String {
    format!("compaction-memory/key/{i:012}")
}

/// A `/proc/self/status` field in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// The child: merges the parent's tables into one and prints how far its
/// peak resident memory rose while it did. Run only by
/// `a_compaction_does_not_hold_its_input_blocks`.
#[test]
#[ignore = "run as a child process by a_compaction_does_not_hold_its_input_blocks"]
fn compaction_memory_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let tree = open(std::path::Path::new(&dir));
    assert_eq!(tree.table_count(), TABLES as usize);
    // Writing 5 resets the peak (VmHWM) to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_bytes("VmRSS:");
    tree.major_compact(u64::MAX, 0).unwrap();
    let peak = status_bytes("VmHWM:");
    assert_eq!(tree.table_count(), 1, "one output table");
    println!("\nGROWTH {}", peak.saturating_sub(before));
}

#[test]
fn a_compaction_does_not_hold_its_input_blocks() {
    let dir = tempfile::tempdir().unwrap();
    {
        let tree = open(dir.path());
        let value = vec![b'v'; 60];
        let mut seqno = 0;
        // Disjoint key ranges: each output block's last key then comes
        // from a different input block (interleaved tables would share
        // one input block among several output blocks).
        let per_table = ENTRIES / TABLES;
        for t in 0..TABLES {
            for i in t * per_table..(t + 1) * per_table {
                tree.insert(key(i), value.clone(), seqno);
                seqno += 1;
            }
            tree.flush_active_memtable(0).unwrap();
        }
        assert_eq!(tree.table_count(), TABLES as usize);
    }
    let input: u64 = std::fs::read_dir(dir.path().join("tables"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "compaction_memory::compaction_memory_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let growth: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("GROWTH "))
        .unwrap_or_else(|| panic!("no GROWTH line in: {stdout}"))
        .parse()
        .unwrap();
    println!("merged {input} bytes of tables; peak resident size grew by {growth} bytes");
    // Holding the input blocks would grow by about the input's size; the
    // keys, the filter's hashes and one block at a time stay well under
    // half of it.
    assert!(
        growth < input / 2,
        "merging {input} bytes of tables grew the peak resident size by {growth} bytes: \
         the compaction holds its input blocks"
    );
}
