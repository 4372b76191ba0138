//! Where the key visualizer's history ([`super::keyviz`]) persists: the
//! system table `tgsys_keyviz`, PartitionKey = table, RowKey = tier, slot
//! start and chunk. A slot's encoding is cut into chunks under the binary
//! property limit and written as one entity-group transaction, so a slot
//! is replaced whole or not at all; chunk 0 says how many chunks count
//! (a rewrite with fewer leaves stale ones behind, ignored).
//!
//! Written by the balancer's tick (finished slots, once each) and at
//! shutdown (the filling slot too); a crash loses at most the slot that
//! was filling and one tick. Damaged entries are skipped with a warning,
//! and a table that cannot be read at all leaves the history in memory
//! only for that run (nothing is pruned or overwritten): the history is
//! an aid, never a reason not to start.

use std::collections::BTreeMap;

use super::keyviz::SavedSlot;
use super::{KEYVIZ_TABLE, Shared};
use crate::entity::{EntityWrite, Value};
use crate::error::Result;
use crate::ops::Operation;
use crate::query::{KeyBox, KeyInterval, PageRequest, Query};

/// Bytes of a slot's encoding per entity (under the 64 KiB binary limit).
const CHUNK: usize = 60_000;

/// `tier-start-chunk`, in key order of tier then time.
fn row_key(tier: usize, start: i64, chunk: usize) -> String {
    let offset = (i128::from(start) - i128::from(i64::MIN)) as u64;
    format!("{tier}-{offset:020}-{chunk:03}")
}

fn parse_row_key(rk: &str) -> Option<(usize, i64, usize)> {
    let mut it = rk.split('-');
    let tier = it.next()?.parse().ok()?;
    let offset: u64 = it.next()?.parse().ok()?;
    let chunk = it.next()?.parse().ok()?;
    let start = (i128::from(offset) + i128::from(i64::MIN)) as i64;
    it.next().is_none().then_some((tier, start, chunk))
}

impl Shared {
    /// Every saved slot, chunks put back together.
    pub(super) fn load_history(&self) -> Result<Vec<SavedSlot>> {
        // (table, tier, start) → (chunks expected, width, rolled, chunks)
        type Parts = (Option<usize>, i64, bool, BTreeMap<usize, Vec<u8>>);
        let mut parts: BTreeMap<(String, usize, i64), Parts> = BTreeMap::new();
        let q = Query::spans(vec![KeyBox::all()]);
        let mut req = PageRequest::first(crate::limits::MAX_PAGE_SIZE);
        loop {
            let page = self.store.query_blocking(KEYVIZ_TABLE, &q, &req)?;
            for e in page.entities {
                let Some((tier, start, chunk)) = parse_row_key(&e.row_key) else {
                    continue;
                };
                let p = parts.entry((e.partition_key, tier, start)).or_default();
                if chunk == 0 {
                    if let Some(Value::Int32(n)) = e.properties.get("chunks") {
                        p.0 = Some((*n).max(0) as usize);
                    }
                    if let Some(Value::Int64(w)) = e.properties.get("width") {
                        p.1 = *w;
                    }
                    p.2 = matches!(e.properties.get("rolled"), Some(Value::Boolean(true)));
                }
                if let Some(Value::Binary(b)) = e.properties.get("data") {
                    p.3.insert(chunk, b.clone());
                }
            }
            match page.continuation {
                Some(t) => req = req.resume(t),
                None => break,
            }
        }
        let mut out = Vec::with_capacity(parts.len());
        let mut damaged = 0;
        for ((table, tier, start), (chunks, width, rolled, data)) in parts {
            let Some(n) = chunks.filter(|n| (0..*n).all(|i| data.contains_key(&i))) else {
                damaged += 1;
                continue;
            };
            out.push(SavedSlot {
                table,
                tier,
                start,
                width,
                rolled,
                data: data.into_values().take(n).flatten().collect(),
            });
        }
        if damaged > 0 {
            tracing::warn!(
                slots = damaged,
                "key visualizer history: skipped slots with missing chunks"
            );
        }
        Ok(out)
    }

    /// Writes what changed in the history since the last call (with
    /// `current`, the filling slot too) and deletes what aged out.
    ///
    /// Base slots go first, and coarse slots only once every base slot
    /// was written: a coarse slot on disk never holds a base slot whose
    /// row still says it is not rolled up (a restore would add it twice).
    /// One save at a time (the balancer's tick, shutdown, a dropped
    /// table): an older snapshot of a slot never lands after a newer one.
    pub(super) fn save_history(&self, current: bool) -> Result<()> {
        if !self
            .keyviz_persist
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(());
        }
        let _one = self.keyviz_save.lock();
        let (saved, expired) = {
            let mut h = self.keyviz.lock();
            (h.take_unsaved(current), h.expired())
        };
        let mut error = None;
        // Aged-out rows go first: a base slot rolled up by a restore and
        // dropped with age at once is never written back as rolled, and
        // must not be rolled up again at the next open.
        for (tier, oldest) in expired {
            if let Err(e) = self.delete_history(tier, oldest) {
                error.get_or_insert(e);
            }
        }
        let mut failed = Vec::new();
        for s in &saved {
            let base_failed = failed.first().is_some_and(|(tier, _)| *tier == 0);
            if s.tier > 0 && base_failed {
                failed.push((s.tier, s.start));
                continue;
            }
            if let Err(e) = self.write_slot(s) {
                failed.push((s.tier, s.start));
                error.get_or_insert(e);
            }
        }
        if !failed.is_empty() {
            self.keyviz.lock().unsaved(failed);
        }
        error.map_or(Ok(()), Err)
    }

    fn write_slot(&self, s: &SavedSlot) -> Result<()> {
        let chunks: Vec<&[u8]> = s.data.chunks(CHUNK).collect();
        let ops: Vec<Operation> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut w = EntityWrite::new(s.table.clone(), row_key(s.tier, s.start, i))
                    .with("data", Value::Binary(c.to_vec()));
                if i == 0 {
                    w = w
                        .with("chunks", Value::Int32(chunks.len() as i32))
                        .with("width", Value::Int64(s.width))
                        .with("rolled", Value::Boolean(s.rolled));
                }
                Operation::InsertOrReplace(w)
            })
            .collect();
        self.store.execute_blocking(KEYVIZ_TABLE, &ops).map(|_| ())
    }

    /// Forgets a dropped table's history, saved rows included.
    pub(super) fn forget_history(&self, table: &str) -> Result<()> {
        let _one = self.keyviz_save.lock();
        self.keyviz.lock().forget(table);
        self.delete_partition(KEYVIZ_TABLE, table)
    }

    /// Deletes tier `tier`'s saved slots older than `oldest`, every table.
    fn delete_history(&self, tier: usize, oldest: i64) -> Result<()> {
        let q = Query::spans(vec![KeyBox {
            pk: KeyInterval::all(),
            rk: KeyInterval {
                lo: std::ops::Bound::Included(format!("{tier}-")),
                hi: std::ops::Bound::Excluded(row_key(tier, oldest, 0)),
            },
        }]);
        self.delete_all(KEYVIZ_TABLE, &q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_sort_by_tier_then_time_and_parse_back() {
        let starts = [i64::MIN, -5, 0, 1, 1_700_000_000_000_000, i64::MAX];
        let mut keys = Vec::new();
        for tier in 0..3 {
            for &s in &starts {
                let k = row_key(tier, s, 7);
                assert_eq!(parse_row_key(&k), Some((tier, s, 7)));
                keys.push(k);
            }
        }
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(parse_row_key("0-12-1-x"), None);
        assert_eq!(parse_row_key("x"), None);
    }
}
