//! The key visualizer's history: entities read, written and refused
//! (throttled) per PartitionKey per time slot, for the console's heat map
//! of key space × time, with the statements that caused them.
//!
//! **Coarser with age.** Traffic is counted in slots of the base width
//! (10 s by default); each finished slot is also added into the slot of
//! every coarser tier ([`TIER_FACTORS`]: 6× and 60× the base) that holds
//! its time. Each tier keeps the same number of slots, so by default the
//! last hour is kept at 10 s, six hours at a minute and sixty hours at ten
//! minutes. A view picks the finest tier that covers the window asked for.
//! A coarse slot keeps, per key, its busiest base slot ([`Counts::busiest`])
//! so a burst at the per-PartitionKey target still shows when averaged
//! over ten minutes.
//!
//! **Bounded.** Each tier's slots cover a fixed span of time (older ones
//! are dropped), and a table keeps at most [`MAX_KEYS_PER_SLOT`] keys per
//! base slot ([`MAX_KEYS_PER_COARSE_SLOT`] per coarse one). Past that a
//! slot's keys are cut to the longest common prefix length that leaves
//! half the budget free, and its later keys are cut the same way: a prefix
//! still covers one contiguous stretch of key space, so the map stays in
//! key order, only coarser where the traffic was spread over many keys.
//!
//! **Persisted.** Finished slots (and at shutdown the current one) are
//! handed out once by [`History::take_unsaved`] for the partition layer to
//! write to its system table, and [`History::restore`] puts them back.
//!
//! **Statements.** Each key keeps the statements that asked the most of it
//! ([`STATEMENTS_PER_KEY`], by a tag the gateway sets around a statement:
//! [`crate::api::statement_scope`]), counted approximately past that
//! (the space-saving heavy-hitters count: a newcomer replaces the smallest
//! and inherits its count, so a heavy statement is never missed).
//!
//! A query page is counted at the PartitionKey of its first entity (the
//! store does not report per-partition scan counts): a scan's reads show
//! where its pages began, which for a full scan is spread over the table.
//! A page across several PartitionKeys is [`Traffic::Scanned`], not held
//! against one key's target.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Distinct keys one table keeps per base slot before they are cut to
/// prefixes.
pub const MAX_KEYS_PER_SLOT: usize = 1024;
/// The same for a slot of a coarser tier.
pub const MAX_KEYS_PER_COARSE_SLOT: usize = 256;
/// Statements remembered per key per slot.
pub const STATEMENTS_PER_KEY: usize = 4;
/// Each tier's slot width as a multiple of the base slot.
pub const TIER_FACTORS: [i64; 3] = [1, 6, 60];
/// Version of [`History::take_unsaved`]'s encoding.
const FORMAT: u8 = 1;

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
    /// The most [`Counts::own`] traffic in any one base slot: in a coarse
    /// slot, the busiest base slot it was made of.
    pub busiest: u64,
}

impl Counts {
    fn add(&mut self, t: Traffic, n: u64) {
        match t {
            Traffic::Read => self.read += n,
            Traffic::Scanned => self.scanned += n,
            Traffic::Written => self.written += n,
            Traffic::Throttled => self.throttled += n,
        }
        self.busiest = self.busiest.max(self.own());
    }

    fn merge(&mut self, o: &Counts) {
        self.read += o.read;
        self.scanned += o.scanned;
        self.written += o.written;
        self.throttled += o.throttled;
        self.busiest = self.busiest.max(o.busiest);
    }

    /// Every entity asked of this one key, admitted or not: what its
    /// per-PartitionKey target applies to (scans across keys excluded).
    pub fn own(&self) -> u64 {
        self.read + self.written + self.throttled
    }

    /// Every entity counted.
    pub fn total(&self) -> u64 {
        self.own() + self.scanned
    }
}

/// The statements that asked most of a key: `(tag, entities)`, at most
/// [`STATEMENTS_PER_KEY`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tags(Vec<(u64, u64)>);

impl Tags {
    fn add(&mut self, tag: u64, n: u64) {
        if tag == 0 || n == 0 {
            return;
        }
        if let Some(t) = self.0.iter_mut().find(|t| t.0 == tag) {
            t.1 += n;
        } else if self.0.len() < STATEMENTS_PER_KEY {
            self.0.push((tag, n));
        } else if let Some(min) = self.0.iter_mut().min_by_key(|t| t.1) {
            // Space-saving: the newcomer takes the smallest's place and
            // count, an over-estimate never an omission.
            *min = (tag, min.1 + n);
        }
    }

    fn merge(&mut self, o: &Tags) {
        for &(tag, n) in &o.0 {
            self.add(tag, n);
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    counts: Counts,
    tags: Tags,
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
    /// Seconds per column.
    pub slot_seconds: u64,
    /// Seconds per base slot: what [`KeyVizView::peak`] counts over.
    pub base_seconds: u64,
    /// Each column's start, in clock microseconds, oldest first; the last
    /// column is the current, still filling slot.
    pub slot_starts: Vec<i64>,
    /// Rows in key order.
    pub buckets: Vec<KeyBucket>,
    /// `[bucket][slot]`: entities in the cell.
    pub cells: Vec<Vec<Counts>>,
    /// `[bucket][slot]`: the busiest single key's own traffic in one base
    /// slot of the cell ([`Counts::busiest`], what the per-PartitionKey
    /// target applies to, whatever the bucket's sum).
    pub peak: Vec<Vec<u64>>,
    /// The busiest key of each bucket over the whole history.
    pub peak_key: Vec<String>,
    /// Some keys were cut to prefixes (more keys than the budget).
    pub coarse: bool,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Keys {
    counts: HashMap<String, Entry>,
    /// Bytes every key of this slot is cut to, once the budget was passed.
    cut: Option<usize>,
    /// In a base slot: already added into the coarser tiers.
    rolled: bool,
}

#[derive(Debug)]
struct Slot {
    start: i64,
    tables: HashMap<String, Keys>,
}

#[derive(Debug)]
struct Tier {
    micros: i64,
    budget: usize,
    ring: VecDeque<Slot>,
}

/// One table's slot, encoded for the partition layer to persist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedSlot {
    /// Lower-case table name.
    pub(crate) table: String,
    /// Index into [`TIER_FACTORS`].
    pub(crate) tier: usize,
    /// Slot start, clock microseconds.
    pub(crate) start: i64,
    /// The tier's slot width when saved, microseconds (a history saved
    /// under another width is not restored).
    pub(crate) width: i64,
    /// A base slot already added into the coarser tiers.
    pub(crate) rolled: bool,
    /// [`Keys`] encoded.
    pub(crate) data: Vec<u8>,
}

/// The history of every table.
#[derive(Debug)]
pub(crate) struct History {
    slots: usize,
    tiers: Vec<Tier>,
    /// `(tier, start)` of slots changed since [`History::take_unsaved`].
    dirty: BTreeSet<(usize, i64)>,
    /// Each tier's horizon: slots before it are dropped.
    horizon: Vec<i64>,
    /// Each tier's horizon when [`History::expired`] last answered.
    pruned: Vec<i64>,
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
    fn add(&mut self, pk: &str, budget: usize, f: impl FnOnce(&mut Entry)) {
        let pk = self.cut.map_or(pk, |c| cut(pk, c));
        match self.counts.get_mut(pk) {
            Some(e) => f(e),
            None => {
                let mut e = Entry::default();
                f(&mut e);
                self.counts.insert(pk.to_owned(), e);
                if self.counts.len() > budget {
                    self.coarsen(budget);
                }
            }
        }
    }

    fn merge(&mut self, o: &Keys, budget: usize) {
        if let Some(c) = o.cut {
            // Keys cut there cannot be told apart here either.
            self.cut = Some(self.cut.map_or(c, |m| m.min(c)));
            if self.counts.keys().any(|k| k.len() > c) {
                self.recut(c);
            }
        }
        for (k, e) in &o.counts {
            self.add(k, budget, |x| {
                x.counts.merge(&e.counts);
                x.tags.merge(&e.tags);
            });
        }
    }

    /// Cuts every key to the longest length that leaves at most half the
    /// budget of distinct prefixes.
    fn coarsen(&mut self, budget: usize) {
        let distinct = |n: usize| {
            let mut seen: std::collections::HashSet<&str> = Default::default();
            self.counts.keys().all(|k| {
                seen.insert(cut(k, n));
                seen.len() <= budget / 2
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
        self.recut(lo);
        self.cut = Some(self.cut.map_or(lo, |c| c.min(lo)));
    }

    fn recut(&mut self, n: usize) {
        let mut cut_counts: HashMap<String, Entry> = HashMap::new();
        for (k, e) in self.counts.drain() {
            let x = cut_counts.entry(cut(&k, n).to_owned()).or_default();
            x.counts.merge(&e.counts);
            x.tags.merge(&e.tags);
        }
        self.counts = cut_counts;
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        let cut = self.cut.map_or(u32::MAX, |c| c as u32);
        out.extend_from_slice(&cut.to_le_bytes());
        out.extend_from_slice(&(self.counts.len() as u32).to_le_bytes());
        for (k, e) in &self.counts {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k.as_bytes());
            let c = &e.counts;
            for n in [c.read, c.scanned, c.written, c.throttled, c.busiest] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.push(e.tags.0.len() as u8);
            for &(tag, n) in &e.tags.0 {
                out.extend_from_slice(&tag.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        out
    }

    /// `None` for anything [`Keys::encode`] did not write.
    fn decode(mut b: &[u8]) -> Option<Keys> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, tail) = b.split_at_checked(n)?;
            *b = tail;
            Some(head)
        }
        fn u32_(b: &mut &[u8]) -> Option<u32> {
            Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?))
        }
        fn u64_(b: &mut &[u8]) -> Option<u64> {
            Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
        }
        if take(&mut b, 1)? != [FORMAT] {
            return None;
        }
        let cut = match u32_(&mut b)? {
            u32::MAX => None,
            c => Some(c as usize),
        };
        let n = u32_(&mut b)? as usize;
        let mut counts = HashMap::with_capacity(n.min(MAX_KEYS_PER_SLOT));
        for _ in 0..n {
            let len = u32_(&mut b)? as usize;
            let key = std::str::from_utf8(take(&mut b, len)?).ok()?.to_owned();
            let mut c = [0u64; 5];
            for x in &mut c {
                *x = u64_(&mut b)?;
            }
            let tags = *take(&mut b, 1)?.first()? as usize;
            if tags > STATEMENTS_PER_KEY {
                return None;
            }
            let mut t = Vec::with_capacity(tags);
            for _ in 0..tags {
                t.push((u64_(&mut b)?, u64_(&mut b)?));
            }
            let [read, scanned, written, throttled, busiest] = c;
            let counts_ = Counts {
                read,
                scanned,
                written,
                throttled,
                busiest,
            };
            counts.insert(
                key,
                Entry {
                    counts: counts_,
                    tags: Tags(t),
                },
            );
        }
        b.is_empty().then_some(Keys {
            counts,
            cut,
            rolled: false,
        })
    }
}

impl Tier {
    fn floor(&self, t: i64) -> i64 {
        t - t.rem_euclid(self.micros)
    }

    /// The slot starting at `start`, made if missing (kept in order).
    fn slot_mut(&mut self, start: i64) -> &mut Slot {
        let i = match self.ring.binary_search_by_key(&start, |s| s.start) {
            Ok(i) => i,
            Err(i) => {
                self.ring.insert(
                    i,
                    Slot {
                        start,
                        tables: HashMap::new(),
                    },
                );
                i
            }
        };
        &mut self.ring[i]
    }

    /// The first start this tier keeps when its newest slot starts at
    /// `newest`.
    fn horizon(&self, newest: i64, slots: usize) -> i64 {
        self.floor(newest) - (slots as i64 - 1) * self.micros
    }
}

/// A table's keys in a source slot of a view (a base slot's only until
/// they are rolled up into the coarse tier the view is drawn from).
fn keys_of<'a>(s: &'a Slot, base: bool, table: &str) -> Option<&'a Keys> {
    s.tables.get(table).filter(|k| !(base && k.rolled))
}

impl History {
    /// `slots` slots per tier, the base tier's of `slot_micros` each.
    pub(crate) fn new(slot_micros: i64, slots: usize) -> Self {
        let base = slot_micros.max(1);
        History {
            slots: slots.max(1),
            tiers: TIER_FACTORS
                .iter()
                .enumerate()
                .map(|(i, f)| Tier {
                    micros: base.saturating_mul(*f),
                    budget: if i == 0 {
                        MAX_KEYS_PER_SLOT
                    } else {
                        MAX_KEYS_PER_COARSE_SLOT
                    },
                    ring: VecDeque::new(),
                })
                .collect(),
            dirty: BTreeSet::new(),
            horizon: vec![i64::MIN; TIER_FACTORS.len()],
            pruned: vec![i64::MIN; TIER_FACTORS.len()],
        }
    }

    /// Counts `n` entities of traffic `t` at (`table`, `pk`), asked by the
    /// statement tagged `tag` (0: none).
    pub(crate) fn record(&mut self, table: &str, pk: &str, t: Traffic, n: u64, tag: u64, now: i64) {
        let start = self.tiers[0].floor(now);
        if self.tiers[0].ring.back().is_none_or(|s| s.start < start) {
            if let Some(last) = self.tiers[0].ring.len().checked_sub(1) {
                self.roll_up(last);
            }
            self.tiers[0].ring.push_back(Slot {
                start,
                tables: HashMap::new(),
            });
            self.evict(start);
        }
        let budget = self.tiers[0].budget;
        // A clock that stepped back counts into the newest slot.
        let slot = self.tiers[0].ring.back_mut().expect("pushed above");
        if !slot.tables.contains_key(table) {
            slot.tables.insert(table.to_owned(), Keys::default());
        }
        let keys = slot.tables.get_mut(table).expect("inserted above");
        keys.add(pk, budget, |e| {
            e.counts.add(t, n);
            e.tags.add(tag, n);
        });
    }

    /// Adds finished base slot `i` into every coarser tier (each table's
    /// keys once).
    fn roll_up(&mut self, i: usize) {
        let (base, coarse) = self.tiers.split_at_mut(1);
        let done = &mut base[0].ring[i];
        let start = done.start;
        let mut rolled = false;
        for (table, keys) in &mut done.tables {
            if keys.rolled {
                continue;
            }
            keys.rolled = true;
            rolled = true;
            for tier in coarse.iter_mut() {
                let budget = tier.budget;
                let at = tier.floor(start);
                tier.slot_mut(at)
                    .tables
                    .entry(table.clone())
                    .or_default()
                    .merge(keys, budget);
            }
        }
        if rolled {
            self.dirty.insert((0, start));
            for (k, tier) in coarse.iter().enumerate() {
                self.dirty.insert((k + 1, tier.floor(start)));
            }
        }
    }

    /// Drops every tier's slots older than its span, the newest base slot
    /// starting at `newest`.
    fn evict(&mut self, newest: i64) {
        for (t, h) in self.tiers.iter_mut().zip(&mut self.horizon) {
            let horizon = t.horizon(newest, self.slots);
            while t.ring.front().is_some_and(|s| s.start < horizon) {
                t.ring.pop_front();
            }
            *h = (*h).max(horizon);
        }
    }

    /// Forgets a dropped table.
    pub(crate) fn forget(&mut self, table: &str) {
        for t in &mut self.tiers {
            for s in &mut t.ring {
                s.tables.remove(table);
            }
        }
    }

    /// The slots changed since the last call (finished base slots, coarse
    /// slots they were added to; with `current`, the filling base slot
    /// too), one per table, encoded; base slots first.
    pub(crate) fn take_unsaved(&mut self, current: bool) -> Vec<SavedSlot> {
        let mut want = std::mem::take(&mut self.dirty);
        if current && let Some(b) = self.tiers[0].ring.back() {
            want.insert((0, b.start));
        }
        let mut out = Vec::new();
        for (tier, start) in want {
            let ring = &self.tiers[tier].ring;
            // Gone meanwhile: dropped with age.
            let Ok(i) = ring.binary_search_by_key(&start, |s| s.start) else {
                continue;
            };
            for (table, keys) in &ring[i].tables {
                out.push(SavedSlot {
                    table: table.clone(),
                    tier,
                    start,
                    width: self.tiers[tier].micros,
                    rolled: keys.rolled,
                    data: keys.encode(),
                });
            }
        }
        out
    }

    /// Marks slots [`History::take_unsaved`] gave out as unsaved again
    /// (their write failed).
    pub(crate) fn unsaved(&mut self, slots: impl IntoIterator<Item = (usize, i64)>) {
        self.dirty.extend(slots);
    }

    /// Puts saved slots back, at clock time `now`; answers how many were
    /// refused (damaged, or from another slot width).
    pub(crate) fn restore(&mut self, saved: Vec<SavedSlot>, now: i64) -> usize {
        let mut refused = 0;
        for s in saved {
            let Some(tier) = self.tiers.get_mut(s.tier) else {
                refused += 1;
                continue;
            };
            let Some(mut keys) = Keys::decode(&s.data) else {
                refused += 1;
                continue;
            };
            if s.width != tier.micros || s.start.rem_euclid(tier.micros) != 0 {
                refused += 1;
                continue;
            }
            keys.rolled = s.rolled;
            tier.slot_mut(s.start).tables.insert(s.table, keys);
        }
        // Base slots saved before they were rolled up (the one filling at
        // shutdown, or one whose roll-up was not written) are rolled up
        // now if they are finished, and saved again.
        let current = self.tiers[0].floor(now);
        for i in 0..self.tiers[0].ring.len() {
            if self.tiers[0].ring[i].start < current {
                self.roll_up(i);
            }
        }
        let newest = current.max(self.tiers[0].ring.back().map_or(i64::MIN, |s| s.start));
        self.evict(newest);
        refused
    }

    /// Per tier whose horizon moved since the last call: the tier and
    /// the horizon (saved slots before it can go, whether this run held
    /// them or not).
    pub(crate) fn expired(&mut self) -> Vec<(usize, i64)> {
        let mut out = Vec::new();
        for (i, &h) in self.horizon.iter().enumerate() {
            if h != self.pruned[i] {
                self.pruned[i] = h;
                out.push((i, h));
            }
        }
        out
    }

    /// The width of a view's columns over `window` microseconds.
    pub(crate) fn column_micros(&self, window: i64) -> i64 {
        self.tiers[self.tier_for(window)].micros
    }

    /// The finest tier that covers `window` microseconds.
    fn tier_for(&self, window: i64) -> usize {
        self.tiers
            .iter()
            .position(|t| t.micros.saturating_mul(self.slots as i64) >= window)
            .unwrap_or(self.tiers.len() - 1)
    }

    /// The slots tier `k`'s picture is made of (its own, and base slots
    /// whose keys are not yet added into it: flagged `true`), and the
    /// start of its newest column.
    fn sources(&self, k: usize, now: i64) -> (Vec<(&Slot, bool)>, i64) {
        let tier = &self.tiers[k];
        let mut v: Vec<(&Slot, bool)> = tier.ring.iter().map(|s| (s, false)).collect();
        if k > 0 {
            v.extend(self.tiers[0].ring.iter().map(|s| (s, true)));
        }
        // The newest slot may be past `now` (a clock read before another
        // request started a slot, or a clock that stepped back).
        let last = v
            .iter()
            .map(|(s, _)| tier.floor(s.start))
            .max()
            .unwrap_or(i64::MIN)
            .max(tier.floor(now));
        (v, last)
    }

    /// `table`'s history over the last `window` microseconds up to now,
    /// in columns of the finest tier that covers it, its keys merged into
    /// at most `max_buckets` rows of about equally many keys.
    pub(crate) fn view(
        &self,
        table: &str,
        max_buckets: usize,
        now: i64,
        window: i64,
    ) -> KeyVizView {
        let k = self.tier_for(window);
        let tier = &self.tiers[k];
        let w = tier.micros;
        let (sources, last) = self.sources(k, now);
        let columns_max = ((window.max(1) as i128 + w as i128 - 1) / w as i128)
            .clamp(1, self.slots as i128) as i64;
        let first = sources
            .iter()
            .filter(|(s, base)| keys_of(s, *base, table).is_some())
            .map(|(s, _)| tier.floor(s.start))
            .min()
            .unwrap_or(last)
            .clamp(last - (columns_max - 1) * w, last);
        let columns = ((last - first) / w + 1) as usize;
        let slot_starts: Vec<i64> = (0..columns).map(|i| first + i as i64 * w).collect();
        let kept: Vec<(usize, &Keys)> = sources
            .iter()
            .filter_map(|(s, base)| {
                let at = tier.floor(s.start);
                let keys = keys_of(s, *base, table)?;
                (first..=last)
                    .contains(&at)
                    .then(|| (((at - first) / w) as usize, keys))
            })
            .collect();
        let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
        let mut coarse = false;
        for (_, k) in &kept {
            coarse |= k.cut.is_some();
            keys.extend(k.counts.keys().map(|k| (k.as_str(), 0)));
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
        for (col, k) in &kept {
            for (key, e) in &k.counts {
                let row = keys[key.as_str()];
                cells[row][*col].merge(&e.counts);
                peak[row][*col] = peak[row][*col].max(e.counts.busiest);
                *totals.entry(key.as_str()).or_default() += e.counts.total();
            }
        }
        for row in &mut cells {
            for c in row {
                // A cell's busiest is its busiest key's (`peak`), not a
                // merge of keys.
                c.busiest = 0;
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
            slot_seconds: (w / 1_000_000).max(1) as u64,
            base_seconds: (self.tiers[0].micros / 1_000_000).max(1) as u64,
            slot_starts,
            buckets,
            cells,
            peak,
            peak_key,
            coarse,
        }
    }

    /// The statements that asked most of `table`'s keys `lo..=hi` in the
    /// columns starting in `from..to` of the view over `window`: `(tag,
    /// entities)`, the most first, and every entity counted there (tagged
    /// or not).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn statements(
        &self,
        table: &str,
        lo: &str,
        hi: &str,
        from: i64,
        to: i64,
        window: i64,
        now: i64,
    ) -> (Vec<(u64, u64)>, u64) {
        let k = self.tier_for(window);
        let tier = &self.tiers[k];
        let (sources, _) = self.sources(k, now);
        let mut sum: HashMap<u64, u64> = HashMap::new();
        let mut total = 0;
        for (s, base) in sources {
            if !(from..to).contains(&tier.floor(s.start)) {
                continue;
            }
            let Some(keys) = keys_of(s, base, table) else {
                continue;
            };
            for (key, e) in &keys.counts {
                if (lo..=hi).contains(&key.as_str()) {
                    total += e.counts.total();
                    for &(tag, n) in &e.tags.0 {
                        *sum.entry(tag).or_default() += n;
                    }
                }
            }
        }
        let mut v: Vec<(u64, u64)> = sum.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        (v, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl History {
        fn rec(&mut self, table: &str, pk: &str, t: Traffic, n: u64, now: i64) {
            self.record(table, pk, t, n, 0, now);
        }

        /// The view over the base tier's whole span.
        fn base_view(&self, table: &str, buckets: usize, now: i64) -> KeyVizView {
            self.view(
                table,
                buckets,
                now,
                self.tiers[0].micros * self.slots as i64,
            )
        }
    }

    const SEC: i64 = 1_000_000;

    #[test]
    fn cells_count_each_key_in_its_slot_and_bucket() {
        let mut h = History::new(10 * SEC, 6);
        h.rec("t", "a", Traffic::Read, 5, 0);
        h.rec("t", "b", Traffic::Written, 3, 5 * SEC);
        h.rec("t", "b", Traffic::Throttled, 2, 12 * SEC);
        h.rec("u", "z", Traffic::Read, 1, 12 * SEC);
        let v = h.base_view("t", 10, 25 * SEC);
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
            h.rec("t", &format!("k{i:03}"), Traffic::Read, 1, 0);
        }
        h.rec("t", "k042", Traffic::Read, 50, 0);
        let v = h.base_view("t", 10, 0);
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
            h.rec("t", "a", Traffic::Read, 1, s * SEC);
        }
        assert_eq!(h.tiers[0].ring.len(), 3);
        let v = h.base_view("t", 10, 9 * SEC);
        assert_eq!(v.slot_starts, vec![7 * SEC, 8 * SEC, 9 * SEC]);
    }

    /// Past the budget, keys become prefixes: the counts are all kept and
    /// the key order still holds.
    #[test]
    fn too_many_keys_become_prefixes_in_key_order() {
        let mut h = History::new(SEC, 2);
        let n = MAX_KEYS_PER_SLOT * 3;
        for i in 0..n {
            h.rec("t", &format!("tenant{i:06}"), Traffic::Written, 1, 0);
        }
        let slot = &h.tiers[0].ring[0].tables["t"];
        assert!(slot.counts.len() <= MAX_KEYS_PER_SLOT);
        assert_eq!(
            slot.counts.values().map(|e| e.counts.written).sum::<u64>(),
            n as u64
        );
        let v = h.base_view("t", 100_000, 0);
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
        h.rec("t", "a", Traffic::Read, 1, 3 * SEC);
        h.rec("t", "a", Traffic::Read, 2, 4 * SEC);
        let v = h.base_view("t", 10, 3 * SEC);
        assert_eq!(v.slot_starts, vec![3 * SEC, 4 * SEC]);
        assert_eq!(v.cells[0][1].read, 2);
        let v = h.base_view("t", 10, -100 * SEC);
        assert_eq!(v.slot_starts.last(), Some(&(4 * SEC)));
    }

    #[test]
    fn a_table_without_history_has_one_empty_column() {
        let h = History::new(SEC, 5);
        let v = h.base_view("t", 10, 3 * SEC);
        assert_eq!(v.slot_starts, vec![3 * SEC]);
        assert!(v.buckets.is_empty());
    }

    /// Finished base slots are added into the coarser tiers; a long
    /// window is shown in their columns, and a burst keeps its rate in
    /// `peak` though averaged away in the cell.
    #[test]
    fn older_history_is_kept_coarser() {
        let mut h = History::new(10 * SEC, 360);
        // A burst of 900 in one 10 s slot, then 10 per slot for an hour.
        h.rec("t", "hot", Traffic::Written, 900, 0);
        for s in 1..400 {
            h.rec("t", "hot", Traffic::Written, 10, s * 10 * SEC);
        }
        let now = 400 * 10 * SEC;
        // The base tier kept its last hour only.
        assert_eq!(
            h.tiers[0].ring.front().map(|s| s.start),
            Some(40 * 10 * SEC)
        );
        let v = h.view("t", 10, now, 6 * 3600 * SEC);
        assert_eq!(v.slot_seconds, 60);
        assert_eq!(v.base_seconds, 10);
        assert_eq!(v.slot_starts[0], 0);
        // 6 base slots per column: 900 + 5 × 10 in the first.
        assert_eq!(v.cells[0][0].written, 950);
        assert_eq!(v.peak[0][0], 900);
        assert_eq!(v.cells[0][1].written, 60);
        assert_eq!(v.peak[0][1], 10);
        // Every entity once: the current base slot is not yet rolled up,
        // and shown from the base tier.
        let all: u64 = v.cells[0].iter().map(|c| c.written).sum();
        assert_eq!(all, 900 + 399 * 10);
        let v = h.view("t", 10, now, 60 * 3600 * SEC);
        assert_eq!(v.slot_seconds, 600);
        assert_eq!(
            v.cells[0].iter().map(|c| c.written).sum::<u64>(),
            900 + 3990
        );
        assert_eq!(v.peak[0][0], 900);
    }

    /// What is saved and restored (a restart) shows the same view, and
    /// counting goes on without counting a slot twice.
    #[test]
    fn a_restored_history_shows_the_same_and_counts_on() {
        let mut h = History::new(SEC, 30);
        for s in 0..50 {
            h.rec(
                "t",
                &format!("k{}", s % 7),
                Traffic::Read,
                s as u64 + 1,
                s * SEC,
            );
            h.record("t", "w", Traffic::Written, 2, 77, s * SEC);
        }
        let now = 49 * SEC;
        let window = 200 * SEC;
        let before = h.view("t", 100, now, window);
        let mut saved = h.take_unsaved(false);
        assert!(h.take_unsaved(false).is_empty(), "given out once");
        saved.extend(h.take_unsaved(true));
        let mut r = History::new(SEC, 30);
        assert_eq!(r.restore(saved, now), 0);
        assert_eq!(r.view("t", 100, now, window), before);
        assert_eq!(
            r.view("t", 100, now, 10 * SEC),
            h.view("t", 100, now, 10 * SEC)
        );
        for x in [&mut h, &mut r] {
            x.rec("t", "k1", Traffic::Read, 5, 50 * SEC);
            x.rec("t", "k1", Traffic::Read, 5, 51 * SEC);
        }
        assert_eq!(
            r.view("t", 100, 51 * SEC, window),
            h.view("t", 100, 51 * SEC, window)
        );
        assert_eq!(
            r.statements("t", "w", "w", 0, i64::MAX, window, now).0,
            vec![(77, 100)]
        );
    }

    #[test]
    fn damaged_or_foreign_saves_are_refused() {
        let mut h = History::new(SEC, 10);
        h.rec("t", "a", Traffic::Read, 1, 0);
        let saved = h.take_unsaved(true);
        let good = saved[0].clone();
        let mut bad = Vec::new();
        for n in 0..good.data.len() {
            bad.push(SavedSlot {
                data: good.data[..n].to_vec(),
                ..good.clone()
            });
        }
        let mut extra = good.data.clone();
        extra.push(0);
        bad.push(SavedSlot {
            data: extra,
            ..good.clone()
        });
        bad.push(SavedSlot {
            start: good.start + 1,
            ..good.clone()
        });
        bad.push(SavedSlot {
            width: good.width * 2,
            ..good.clone()
        });
        bad.push(SavedSlot {
            tier: 9,
            ..good.clone()
        });
        let n = bad.len();
        let mut r = History::new(SEC, 10);
        assert_eq!(r.restore(bad, 0), n);
        assert!(r.base_view("t", 10, 0).buckets.is_empty());
        assert_eq!(r.restore(vec![good], 0), 0);
        assert_eq!(r.base_view("t", 10, 0).cells[0][0].read, 1);
    }

    /// Each key keeps its heaviest statements; a heavy one arriving late
    /// is not missed.
    #[test]
    fn cells_name_the_statements_that_hit_them() {
        let mut h = History::new(SEC, 10);
        for tag in 1..=6 {
            h.record("t", "a", Traffic::Read, 1, tag, 0);
        }
        h.record("t", "a", Traffic::Read, 50, 9, 0);
        h.record("t", "b", Traffic::Written, 3, 9, 0);
        h.record("t", "c", Traffic::Written, 4, 8, 0);
        h.record("t", "b", Traffic::Written, 1, 0, 0);
        let (tags, total) = h.statements("t", "a", "b", 0, SEC, 10 * SEC, 0);
        assert_eq!(total, 6 + 50 + 3 + 1);
        assert_eq!(tags[0].0, 9);
        assert!(tags[0].1 >= 53);
        assert!(tags.iter().all(|t| t.0 != 8), "c is outside a..=b");
        assert!(
            h.statements("t", "a", "c", SEC, 2 * SEC, 10 * SEC, 0)
                .0
                .is_empty()
        );
    }

    type Disk = BTreeMap<(String, usize, i64), SavedSlot>;

    /// What `history.rs` does on a save: aged-out rows deleted, then
    /// changed slots written over.
    fn save(disk: &mut Disk, h: &mut History, current: bool) {
        for (tier, oldest) in h.expired() {
            disk.retain(|k, _| k.1 != tier || k.2 >= oldest);
        }
        for s in h.take_unsaved(current) {
            disk.insert((s.table.clone(), s.tier, s.start), s);
        }
    }

    fn written(h: &History, now: i64, window: i64) -> u64 {
        let v = h.view("t", 10, now, window);
        v.cells.iter().flatten().map(|c| c.written).sum()
    }

    /// Restarts long after the shutdown: the slot that was filling is
    /// rolled up (not dropped with age), and a later restart counts
    /// nothing twice.
    #[test]
    fn late_restarts_keep_the_last_slot_and_count_it_once() {
        let wide = 600 * SEC;
        let mut disk = Disk::new();
        let mut h = History::new(SEC, 10);
        for s in 0..5 {
            h.rec("t", "a", Traffic::Written, 1, s * SEC);
            save(&mut disk, &mut h, false);
        }
        save(&mut disk, &mut h, true);
        // Restarted a minute later: past the base tier's span (10 s).
        let mut now = 60 * SEC;
        for round in 0..3 {
            let mut r = History::new(SEC, 10);
            assert_eq!(r.restore(disk.values().cloned().collect(), now), 0);
            assert_eq!(written(&r, now, wide), 5, "round {round}");
            save(&mut disk, &mut r, true);
            now += 30 * SEC;
        }
    }
}
