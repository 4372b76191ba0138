//! The key visualizer's history: entities read, written and refused
//! (throttled) per PartitionKey per time slot, for the console's heat map
//! of key space × time.
//!
//! Memory is bounded twice: a fixed number of slots (the oldest is dropped
//! when a new one starts), and at most [`MAX_KEYS_PER_SLOT`] keys per table
//! per slot. Past that budget a slot's keys are cut to the longest common
//! prefix length that leaves half the budget free, and the slot's later
//! keys are cut the same way: a prefix still covers one contiguous stretch
//! of key space, so the map stays in key order, only coarser where the
//! traffic was spread over many keys.
//!
//! A query page is counted at the PartitionKey of its first entity (the
//! store does not report per-partition scan counts): a scan's reads show
//! where its pages began, which for a full scan is spread over the table.
//! A page across several PartitionKeys is [`Traffic::Scanned`], not held
//! against one key's target.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Distinct keys one table keeps per slot before they are cut to prefixes.
pub const MAX_KEYS_PER_SLOT: usize = 1024;

/// What a request did to a PartitionKey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Entities read in one PartitionKey (point reads, pages of one
    /// partition).
    Read,
    /// Entities a page across several PartitionKeys scanned (counted at its
    /// first entity's key, so not held against one key's target).
    Scanned,
    /// Entities written (operations of an entity-group transaction).
    Written,
    /// Entities refused with ServerBusy (throttled, or the range moving).
    Throttled,
}

/// Entities per kind of traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entities read in one PartitionKey.
    pub read: u64,
    /// Entities scanned by pages across PartitionKeys.
    pub scanned: u64,
    /// Entities written.
    pub written: u64,
    /// Entities refused.
    pub throttled: u64,
}

impl Counts {
    fn add(&mut self, t: Traffic, n: u64) {
        match t {
            Traffic::Read => self.read += n,
            Traffic::Scanned => self.scanned += n,
            Traffic::Written => self.written += n,
            Traffic::Throttled => self.throttled += n,
        }
    }

    fn merge(&mut self, o: &Counts) {
        self.read += o.read;
        self.scanned += o.scanned;
        self.written += o.written;
        self.throttled += o.throttled;
    }

    /// Every entity asked of this one key, admitted or not: what its
    /// per-PartitionKey target applies to (scans across keys excluded).
    pub fn own(&self) -> u64 {
        self.read + self.written + self.throttled
    }
}

/// A contiguous stretch of key space in the map: one row of the heat map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBucket {
    /// Its first key (a PartitionKey, or a prefix of several).
    pub first: String,
    /// Its last key.
    pub last: String,
    /// Keys (or prefixes) merged into it.
    pub keys: usize,
}

/// One table's history, bucketed for display.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyVizView {
    /// Seconds per slot (column).
    pub slot_seconds: u64,
    /// Each column's start, in clock microseconds, oldest first; the last
    /// column is the current, still filling slot.
    pub slot_starts: Vec<i64>,
    /// Rows in key order.
    pub buckets: Vec<KeyBucket>,
    /// `[bucket][slot]`: entities in the cell.
    pub cells: Vec<Vec<Counts>>,
    /// `[bucket][slot]`: the busiest single key's own traffic in the cell
    /// ([`Counts::own`], what the per-PartitionKey target applies to,
    /// whatever the bucket's sum).
    pub peak: Vec<Vec<u64>>,
    /// The busiest key of each bucket over the whole history.
    pub peak_key: Vec<String>,
    /// Some keys were cut to prefixes (more keys than the budget).
    pub coarse: bool,
}

#[derive(Debug, Default)]
struct Keys {
    counts: HashMap<String, Counts>,
    /// Bytes every key of this slot is cut to, once the budget was passed.
    cut: Option<usize>,
}

#[derive(Debug)]
struct Slot {
    start: i64,
    tables: HashMap<String, Keys>,
}

/// The history of every table.
#[derive(Debug)]
pub(crate) struct History {
    slot_micros: i64,
    slots: usize,
    ring: VecDeque<Slot>,
}

/// `key` cut to at most `n` bytes, on a character boundary.
fn cut(key: &str, n: usize) -> &str {
    if key.len() <= n {
        return key;
    }
    let mut n = n;
    while !key.is_char_boundary(n) {
        n -= 1;
    }
    &key[..n]
}

impl Keys {
    fn add(&mut self, pk: &str, t: Traffic, n: u64) {
        let pk = self.cut.map_or(pk, |c| cut(pk, c));
        match self.counts.get_mut(pk) {
            Some(c) => c.add(t, n),
            None => {
                let mut c = Counts::default();
                c.add(t, n);
                self.counts.insert(pk.to_owned(), c);
                if self.counts.len() > MAX_KEYS_PER_SLOT {
                    self.coarsen();
                }
            }
        }
    }

    /// Cuts every key to the longest length that leaves at most half the
    /// budget of distinct prefixes.
    fn coarsen(&mut self) {
        let distinct = |n: usize| {
            let mut seen: std::collections::HashSet<&str> = Default::default();
            self.counts.keys().all(|k| {
                seen.insert(cut(k, n));
                seen.len() <= MAX_KEYS_PER_SLOT / 2
            })
        };
        let (mut lo, mut hi) = (0, self.counts.keys().map(String::len).max().unwrap_or(0));
        // The largest n with few enough prefixes: `distinct` holds at 0 (one
        // prefix) and grows false as n grows.
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if distinct(mid) {
                lo = mid
            } else {
                hi = mid - 1
            }
        }
        let mut cut_counts: HashMap<String, Counts> = HashMap::new();
        for (k, c) in self.counts.drain() {
            cut_counts
                .entry(cut(&k, lo).to_owned())
                .or_default()
                .merge(&c);
        }
        self.counts = cut_counts;
        self.cut = Some(self.cut.map_or(lo, |c| c.min(lo)));
    }
}

impl History {
    /// `slots` slots of `slot_micros` each.
    pub(crate) fn new(slot_micros: i64, slots: usize) -> Self {
        History {
            slot_micros: slot_micros.max(1),
            slots: slots.max(1),
            ring: VecDeque::new(),
        }
    }

    fn slot_start(&self, now: i64) -> i64 {
        now - now.rem_euclid(self.slot_micros)
    }

    /// Counts `n` entities of traffic `t` at (`table`, `pk`).
    pub(crate) fn record(&mut self, table: &str, pk: &str, t: Traffic, n: u64, now: i64) {
        let start = self.slot_start(now);
        if self.ring.back().is_none_or(|s| s.start < start) {
            self.ring.push_back(Slot {
                start,
                tables: HashMap::new(),
            });
            while self.ring.len() > self.slots {
                self.ring.pop_front();
            }
        }
        // A clock that stepped back counts into the newest slot.
        let slot = self.ring.back_mut().expect("pushed above");
        match slot.tables.get_mut(table) {
            Some(keys) => keys.add(pk, t, n),
            None => slot
                .tables
                .entry(table.to_owned())
                .or_default()
                .add(pk, t, n),
        }
    }

    /// Forgets a dropped table.
    pub(crate) fn forget(&mut self, table: &str) {
        for s in &mut self.ring {
            s.tables.remove(table);
        }
    }

    /// `table`'s history over the kept slots up to now, its keys merged into
    /// at most `max_buckets` rows of about equally many keys.
    pub(crate) fn view(&self, table: &str, max_buckets: usize, now: i64) -> KeyVizView {
        // The newest slot may be past `now` (a clock read before another
        // request started a slot, or a clock that stepped back).
        let last = self
            .ring
            .back()
            .map_or(i64::MIN, |s| s.start)
            .max(self.slot_start(now));
        let first = self
            .ring
            .iter()
            .find(|s| s.tables.contains_key(table))
            .map_or(last, |s| s.start)
            .clamp(last - (self.slots as i64 - 1) * self.slot_micros, last);
        let columns = ((last - first) / self.slot_micros + 1) as usize;
        let slot_starts: Vec<i64> = (0..columns)
            .map(|i| first + i as i64 * self.slot_micros)
            .collect();
        let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
        let mut coarse = false;
        let kept = || self.ring.iter().filter(|s| s.start >= first);
        for s in kept() {
            if let Some(k) = s.tables.get(table) {
                coarse |= k.cut.is_some();
                keys.extend(k.counts.keys().map(|k| (k.as_str(), 0)));
            }
        }
        let n = keys.len();
        let b = n.min(max_buckets.max(1));
        let mut buckets: Vec<KeyBucket> = Vec::with_capacity(b);
        for (i, (k, bucket)) in keys.iter_mut().enumerate() {
            // Key i goes to bucket ⌊i·b/n⌋: equal shares, in key order.
            *bucket = i * b / n;
            match buckets.get_mut(*bucket) {
                Some(kb) => {
                    kb.last = (*k).to_owned();
                    kb.keys += 1;
                }
                None => buckets.push(KeyBucket {
                    first: (*k).to_owned(),
                    last: (*k).to_owned(),
                    keys: 1,
                }),
            }
        }
        let mut cells = vec![vec![Counts::default(); columns]; buckets.len()];
        let mut peak = vec![vec![0u64; columns]; buckets.len()];
        let mut totals: HashMap<&str, u64> = HashMap::new();
        for s in kept() {
            let Some(k) = s.tables.get(table) else {
                continue;
            };
            let col = ((s.start - first) / self.slot_micros) as usize;
            for (key, c) in &k.counts {
                let row = keys[key.as_str()];
                cells[row][col].merge(c);
                peak[row][col] = peak[row][col].max(c.own());
                *totals.entry(key.as_str()).or_default() += c.own() + c.scanned;
            }
        }
        let mut peak_key = vec![String::new(); buckets.len()];
        let mut best = vec![0u64; buckets.len()];
        for (key, row) in &keys {
            let t = totals.get(key).copied().unwrap_or(0);
            if t > best[*row] || peak_key[*row].is_empty() {
                best[*row] = t;
                peak_key[*row] = (*key).to_owned();
            }
        }
        KeyVizView {
            slot_seconds: (self.slot_micros / 1_000_000).max(1) as u64,
            slot_starts,
            buckets,
            cells,
            peak,
            peak_key,
            coarse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000;

    #[test]
    fn cells_count_each_key_in_its_slot_and_bucket() {
        let mut h = History::new(10 * SEC, 6);
        h.record("t", "a", Traffic::Read, 5, 0);
        h.record("t", "b", Traffic::Written, 3, 5 * SEC);
        h.record("t", "b", Traffic::Throttled, 2, 12 * SEC);
        h.record("u", "z", Traffic::Read, 1, 12 * SEC);
        let v = h.view("t", 10, 25 * SEC);
        assert_eq!(v.slot_starts, vec![0, 10 * SEC, 20 * SEC]);
        assert_eq!(
            v.buckets
                .iter()
                .map(|b| b.first.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(v.cells[0][0].read, 5);
        assert_eq!(v.cells[1][0].written, 3);
        assert_eq!(v.cells[1][1].throttled, 2);
        assert_eq!(v.cells[1][2], Counts::default());
        assert_eq!(v.peak_key, ["a", "b"]);
        assert!(!v.coarse);
    }

    #[test]
    fn buckets_merge_neighbouring_keys_and_keep_the_peak_key() {
        let mut h = History::new(SEC, 4);
        for i in 0..100 {
            h.record("t", &format!("k{i:03}"), Traffic::Read, 1, 0);
        }
        h.record("t", "k042", Traffic::Read, 50, 0);
        let v = h.view("t", 10, 0);
        assert_eq!(v.buckets.len(), 10);
        assert!(v.buckets.iter().all(|b| b.keys == 10));
        assert_eq!(v.buckets[4].first, "k040");
        assert_eq!(v.buckets[4].last, "k049");
        assert_eq!(v.peak_key[4], "k042");
        assert_eq!(v.peak[4][0], 51);
        assert_eq!(v.cells[4][0].read, 60);
    }

    #[test]
    fn old_slots_are_dropped() {
        let mut h = History::new(SEC, 3);
        for s in 0..10 {
            h.record("t", "a", Traffic::Read, 1, s * SEC);
        }
        assert_eq!(h.ring.len(), 3);
        let v = h.view("t", 10, 9 * SEC);
        assert_eq!(v.slot_starts, vec![7 * SEC, 8 * SEC, 9 * SEC]);
    }

    /// Past the budget, keys become prefixes: the counts are all kept and
    /// the key order still holds.
    #[test]
    fn too_many_keys_become_prefixes_in_key_order() {
        let mut h = History::new(SEC, 2);
        let n = MAX_KEYS_PER_SLOT * 3;
        for i in 0..n {
            h.record("t", &format!("tenant{i:06}"), Traffic::Written, 1, 0);
        }
        let slot = &h.ring[0].tables["t"];
        assert!(slot.counts.len() <= MAX_KEYS_PER_SLOT);
        assert_eq!(
            slot.counts.values().map(|c| c.written).sum::<u64>(),
            n as u64
        );
        let v = h.view("t", 100_000, 0);
        assert!(v.coarse);
        let firsts: Vec<&str> = v.buckets.iter().map(|b| b.first.as_str()).collect();
        assert!(firsts.windows(2).all(|w| w[0] < w[1]));
        assert!(firsts.iter().all(|k| k.starts_with("tenant")));
        assert!(cut("né", 2) == "n");
    }

    /// A view asked with a clock behind the newest slot (read before
    /// another request started it, or stepped back) still covers it.
    #[test]
    fn a_view_behind_the_newest_slot_covers_it() {
        let mut h = History::new(SEC, 5);
        h.record("t", "a", Traffic::Read, 1, 3 * SEC);
        h.record("t", "a", Traffic::Read, 2, 4 * SEC);
        let v = h.view("t", 10, 3 * SEC);
        assert_eq!(v.slot_starts, vec![3 * SEC, 4 * SEC]);
        assert_eq!(v.cells[0][1].read, 2);
        let v = h.view("t", 10, -100 * SEC);
        assert_eq!(v.slot_starts.last(), Some(&(4 * SEC)));
    }

    #[test]
    fn a_table_without_history_has_one_empty_column() {
        let h = History::new(SEC, 5);
        let v = h.view("t", 10, 3 * SEC);
        assert_eq!(v.slot_starts, vec![3 * SEC]);
        assert!(v.buckets.is_empty());
    }
}
