//! What a query asks of the store, and what one page of answer looks like.
//!
//! A [`Query`] is key spans (a union of [`KeyBox`]es: a PartitionKey interval
//! times a RowKey interval), a residual [`Filter`] and a projection. The store
//! scans the smallest set of contiguous key ranges that covers the boxes;
//! every entity in those ranges counts as *scanned*, and is *returned* when it
//! lies in a box and passes the filter. So `PartitionKey BETWEEN 'a' AND 'c'
//! AND RowKey = 'x'` scans all of partitions a..c, exactly as Azure Tables
//! would, and the scanned/returned ratio shows it.
//!
//! Pages end after `max_entities` returned, after the time budget, or at a
//! partition boundary the caller names (the partition layer uses this to stop
//! where another partition server's range begins). A page that ends early
//! carries a [`ContinuationToken`] holding the next PartitionKey and RowKey.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::time::Duration;

use base64::Engine as _;

use crate::codec::{self, EncodedEntities};
use crate::entity::Entity;
use crate::error::{Result, StoreError};
use crate::filter::Filter;
use crate::limits::MAX_PAGE_SIZE;

/// An interval of key strings in ordinal order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyInterval {
    /// Lower bound.
    pub lo: Bound<String>,
    /// Upper bound.
    pub hi: Bound<String>,
}

impl KeyInterval {
    /// Every key.
    pub fn all() -> Self {
        KeyInterval {
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
        }
    }

    /// Exactly `k`.
    pub fn point(k: impl Into<String>) -> Self {
        let k = k.into();
        KeyInterval {
            lo: Bound::Included(k.clone()),
            hi: Bound::Included(k),
        }
    }

    /// Every key starting with `prefix` (`LIKE 'prefix%'`): from the prefix
    /// up to, not including, the smallest string above all its extensions.
    pub fn prefix(prefix: &str) -> Self {
        let mut chars: Vec<char> = prefix.chars().collect();
        let hi = loop {
            match chars.pop() {
                None => break Bound::Unbounded,
                Some(c) => {
                    // The next code point, skipping the surrogate gap.
                    let next = match c {
                        '\u{D7FF}' => Some('\u{E000}'),
                        c => char::from_u32(c as u32 + 1),
                    };
                    if let Some(n) = next {
                        chars.push(n);
                        break Bound::Excluded(chars.into_iter().collect());
                    }
                }
            }
        };
        KeyInterval {
            lo: Bound::Included(prefix.to_owned()),
            hi,
        }
    }

    /// From two bounds.
    pub fn new(lo: Bound<String>, hi: Bound<String>) -> Self {
        KeyInterval { lo, hi }
    }

    /// The keys in both (an empty interval when they do not overlap).
    pub fn intersect(&self, other: &KeyInterval) -> KeyInterval {
        KeyInterval::new(
            pick(&self.lo, &other.lo, true, true),
            pick(&self.hi, &other.hi, false, true),
        )
    }

    /// The smallest interval holding both.
    pub fn hull(&self, other: &KeyInterval) -> KeyInterval {
        KeyInterval::new(
            pick(&self.lo, &other.lo, true, false),
            pick(&self.hi, &other.hi, false, false),
        )
    }

    /// The single key, when the interval is one point.
    pub fn as_point(&self) -> Option<&str> {
        match (&self.lo, &self.hi) {
            (Bound::Included(a), Bound::Included(b)) if a == b => Some(a),
            _ => None,
        }
    }

    /// The same interval of the keys a store can hold, with bounds free of
    /// U+0000. No stored key has that character, so a bound `x\0…` lies
    /// between `x` and every longer key that starts with `x`: it is `> x`
    /// as a lower bound and `<= x` as an upper one. The engine ends each
    /// PartitionKey with a 0x00 byte, and a bound holding one would put a
    /// byte range's edge inside the partition `x`.
    fn without_nul(&self) -> std::borrow::Cow<'_, KeyInterval> {
        let cut = |b: &Bound<String>, lower: bool| match b {
            Bound::Included(k) | Bound::Excluded(k) => k.find('\0').map(|i| {
                let x = k[..i].to_owned();
                if lower {
                    Bound::Excluded(x)
                } else {
                    Bound::Included(x)
                }
            }),
            Bound::Unbounded => None,
        };
        match (cut(&self.lo, true), cut(&self.hi, false)) {
            (None, None) => std::borrow::Cow::Borrowed(self),
            (lo, hi) => std::borrow::Cow::Owned(KeyInterval {
                lo: lo.unwrap_or_else(|| self.lo.clone()),
                hi: hi.unwrap_or_else(|| self.hi.clone()),
            }),
        }
    }

    /// True when `k` lies inside.
    pub fn contains(&self, k: &str) -> bool {
        self.contains_bytes(k.as_bytes())
    }

    /// True when the UTF-8 key `k` lies inside. Strings order as their
    /// UTF-8 bytes, so a scan can test a stored key without validating it.
    pub(crate) fn contains_bytes(&self, k: &[u8]) -> bool {
        let above = match &self.lo {
            Bound::Unbounded => true,
            Bound::Included(lo) => cmp_key(k, lo.as_bytes()).is_ge(),
            Bound::Excluded(lo) => cmp_key(k, lo.as_bytes()).is_gt(),
        };
        above
            && match &self.hi {
                Bound::Unbounded => true,
                Bound::Included(hi) => cmp_key(k, hi.as_bytes()).is_le(),
                Bound::Excluded(hi) => cmp_key(k, hi.as_bytes()).is_lt(),
            }
    }

    /// The part of this interval inside `[lo, hi)` (hi `None` = unbounded).
    pub fn clip(&self, lo: &str, hi: Option<&str>) -> KeyInterval {
        let lo_b = match &self.lo {
            Bound::Included(a) | Bound::Excluded(a) if a.as_str() >= lo => self.lo.clone(),
            _ => Bound::Included(lo.to_owned()),
        };
        let hi_b = match (hi, &self.hi) {
            (None, h) => h.clone(),
            (Some(h), Bound::Included(a) | Bound::Excluded(a)) if a.as_str() < h => self.hi.clone(),
            (Some(h), _) => Bound::Excluded(h.to_owned()),
        };
        KeyInterval { lo: lo_b, hi: hi_b }
    }

    /// True when no key can lie inside. The empty string is the smallest
    /// key, so nothing lies below it.
    pub fn is_empty(&self) -> bool {
        if matches!(&self.hi, Bound::Excluded(h) if h.is_empty()) {
            return true;
        }
        match (&self.lo, &self.hi) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b))
            | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
            _ => false,
        }
    }
}

/// A PartitionKey interval times a RowKey interval.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyBox {
    /// Which PartitionKeys.
    pub pk: KeyInterval,
    /// Which RowKeys (within each selected partition).
    pub rk: KeyInterval,
}

impl KeyBox {
    /// The whole table.
    pub fn all() -> Self {
        KeyBox {
            pk: KeyInterval::all(),
            rk: KeyInterval::all(),
        }
    }

    /// One entity.
    pub fn point(pk: impl Into<String>, rk: impl Into<String>) -> Self {
        KeyBox {
            pk: KeyInterval::point(pk),
            rk: KeyInterval::point(rk),
        }
    }

    /// Every entity of one partition.
    pub fn partition(pk: impl Into<String>) -> Self {
        KeyBox {
            pk: KeyInterval::point(pk),
            rk: KeyInterval::all(),
        }
    }

    /// True when (pk, rk) lies inside.
    pub fn contains(&self, pk: &str, rk: &str) -> bool {
        self.contains_bytes(pk.as_bytes(), rk.as_bytes())
    }

    /// [`KeyBox::contains`] for UTF-8 keys not yet validated.
    pub(crate) fn contains_bytes(&self, pk: &[u8], rk: &[u8]) -> bool {
        self.pk.contains_bytes(pk) && self.rk.contains_bytes(rk)
    }

    /// Whether [`KeyBox::byte_range`] holds exactly this box's keys: a
    /// single PartitionKey (the RowKey bounds become byte bounds), or whole
    /// partitions. `PartitionKey BETWEEN 'a' AND 'c' AND RowKey = 'x'` is
    /// not: its byte range holds every RowKey of a..c.
    pub(crate) fn byte_exact(&self) -> bool {
        self.pk.as_point().is_some()
            || (self.rk.lo == Bound::Unbounded && self.rk.hi == Bound::Unbounded)
    }

    /// The engine byte range `[start, end)` that covers this box in table
    /// `id`; `None` when the box is empty.
    pub(crate) fn byte_range(&self, id: u64) -> Option<(Vec<u8>, Vec<u8>)> {
        let pk = self.pk.without_nul();
        if pk.is_empty() || self.rk.is_empty() {
            return None;
        }
        let single = pk.as_point();
        let start = match (&pk.lo, single) {
            (Bound::Unbounded, _) => codec::table_prefix(id).to_vec(),
            (Bound::Included(p), Some(_)) => match &self.rk.lo {
                Bound::Unbounded => codec::partition_start(id, p),
                Bound::Included(r) => codec::entity_key(id, p, r),
                Bound::Excluded(r) => successor(codec::entity_key(id, p, r)),
            },
            (Bound::Included(p), None) => codec::partition_start(id, p),
            (Bound::Excluded(p), _) => codec::partition_end(id, p),
        };
        let end = match (&pk.hi, single) {
            (Bound::Unbounded, _) => codec::table_prefix(id + 1).to_vec(),
            (Bound::Included(p), Some(_)) => match &self.rk.hi {
                Bound::Unbounded => codec::partition_end(id, p),
                Bound::Included(r) => successor(codec::entity_key(id, p, r)),
                Bound::Excluded(r) => codec::entity_key(id, p, r),
            },
            (Bound::Included(p), None) => codec::partition_end(id, p),
            (Bound::Excluded(p), _) => codec::partition_start(id, p),
        };
        (start < end).then_some((start, end))
    }
}

/// Orders two keys as bytes, settled by the first byte when it differs: a
/// scan compares every key with the same bound, which usually differs from
/// it at once (a RowKey against the index entries' prefix), and a call to
/// `memcmp` per key showed in a full scan's profile.
#[inline]
fn cmp_key(a: &[u8], b: &[u8]) -> Ordering {
    match (a.first(), b.first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// The test a scan applies to each entity's keys ([`Query::key_test`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyTest<'a> {
    /// None: every entity in the byte ranges lies in a span.
    None,
    /// Every span has this RowKey interval. A span's byte range only holds
    /// PartitionKeys of the span (a single partition's range is byte exact
    /// in both keys), so an entity in the ranges lies in a span exactly
    /// when its RowKey lies in this interval: the common case of a scan
    /// across partitions that stops below a table's index entries.
    RowKey(&'a KeyInterval),
    /// Each span in turn.
    Spans,
}

/// The smallest byte string greater than `k`.
fn successor(mut k: Vec<u8>) -> Vec<u8> {
    k.push(0);
    k
}

/// A query: key spans, residual filter, projection.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Query {
    /// Union of boxes; empty means the query selects nothing (and the store
    /// does no work for it).
    pub spans: Vec<KeyBox>,
    /// Evaluated on every scanned entity inside the spans.
    pub filter: Option<Filter>,
    /// Properties to return (keys and Timestamp always come back);
    /// `None` returns all.
    pub projection: Option<Vec<String>>,
}

impl Query {
    /// Every entity of the table.
    pub fn full_scan() -> Self {
        Query {
            spans: vec![KeyBox::all()],
            filter: None,
            projection: None,
        }
    }

    /// The given spans, no filter, all properties.
    pub fn spans(spans: Vec<KeyBox>) -> Self {
        Query {
            spans,
            filter: None,
            projection: None,
        }
    }

    /// With a residual filter.
    #[must_use]
    pub fn with_filter(mut self, f: Filter) -> Self {
        self.filter = Some(f);
        self
    }

    /// With a projection.
    #[must_use]
    pub fn with_projection(mut self, cols: Vec<String>) -> Self {
        self.projection = Some(cols);
        self
    }

    /// True when the entity is in a span and passes the filter.
    pub fn selects(&self, e: &Entity) -> bool {
        self.spans
            .iter()
            .any(|b| b.contains(&e.partition_key, &e.row_key))
            && self.filter.as_ref().is_none_or(|f| f.matches(e))
    }

    /// Whether every entity in [`Query::byte_ranges`] lies in a span, so a
    /// scan need not test keys (the ranges are the spans' byte ranges,
    /// merged only where they overlap or touch).
    pub(crate) fn spans_byte_exact(&self) -> bool {
        self.spans.iter().all(KeyBox::byte_exact)
    }

    /// How a scan of [`Query::byte_ranges`] tells which entities lie in a
    /// span.
    pub(crate) fn key_test(&self) -> KeyTest<'_> {
        if self.spans_byte_exact() {
            return KeyTest::None;
        }
        match self.spans.split_first() {
            Some((first, rest)) if rest.iter().all(|b| b.rk == first.rk) => {
                KeyTest::RowKey(&first.rk)
            }
            _ => KeyTest::Spans,
        }
    }

    /// Whether a page's work is bounded by its size: every scanned entity
    /// is returned (exact spans, no filter), so a page of `max_entities`
    /// reads at most that many. Such pages are short enough to run on the
    /// caller's thread.
    pub fn bounded_by_page(&self) -> bool {
        self.filter.is_none() && self.spans_byte_exact()
    }

    /// A stable 64-bit fingerprint; continuation tokens carry it so a token
    /// cannot resume a different query.
    pub fn fingerprint(&self, table: &str) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        table.to_ascii_lowercase().hash(&mut h);
        self.hash(&mut h);
        h.finish()
    }

    /// The disjoint, ascending engine byte ranges `[start, end)` covering the
    /// spans in table `id`.
    pub(crate) fn byte_ranges(&self, id: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut ranges: Vec<_> = self.spans.iter().filter_map(|b| b.byte_range(id)).collect();
        ranges.sort();
        let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match merged.last_mut() {
                Some((_, last_end)) if s <= *last_end => {
                    if e > *last_end {
                        *last_end = e;
                    }
                }
                _ => merged.push((s, e)),
            }
        }
        merged
    }
}

/// How much one page may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Most entities to return (1 ..= 1000).
    pub max_entities: usize,
    /// Work budget; the page ends once it is spent (default 5 s).
    pub time_budget: Duration,
    /// Resume point from the previous page.
    pub continuation: Option<ContinuationToken>,
    /// End the page before the first entity whose PartitionKey is `>=` this
    /// (the next range partition on another server). Set by the partition
    /// layer, not by SQL callers.
    pub stop_at_partition: Option<String>,
    /// The caller takes [`Page::encoded`]: matching entities undecoded. A
    /// store that cannot (a remote service) returns [`Page::entities`].
    pub encoded: bool,
    /// End the page once this many entities are scanned. Set by the
    /// partition layer to the throttling budget left, so a scan pays for
    /// what it reads page by page instead of leaving a debt the next,
    /// unrelated request waits out. A remote service throttles itself.
    pub max_scanned: Option<u64>,
}

impl Default for PageRequest {
    fn default() -> Self {
        PageRequest {
            max_entities: MAX_PAGE_SIZE,
            time_budget: Duration::from_secs(5),
            continuation: None,
            stop_at_partition: None,
            encoded: false,
            max_scanned: None,
        }
    }
}

impl PageRequest {
    /// A first page of at most `n` entities.
    pub fn first(n: usize) -> Self {
        PageRequest {
            max_entities: n,
            ..Default::default()
        }
    }

    /// The next page after `token`, same size.
    #[must_use]
    pub fn resume(&self, token: ContinuationToken) -> Self {
        PageRequest {
            continuation: Some(token),
            ..self.clone()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(1..=MAX_PAGE_SIZE).contains(&self.max_entities) {
            return Err(StoreError::InvalidQuery {
                reason: format!(
                    "page size {} is outside 1..={MAX_PAGE_SIZE}",
                    self.max_entities
                ),
            });
        }
        Ok(())
    }
}

/// One page of results.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Matching entities in clustered-key order.
    pub entities: Vec<Entity>,
    /// The same, undecoded, when the request asked for that
    /// ([`PageRequest::encoded`]); then `entities` is empty.
    pub encoded: EncodedEntities,
    /// Entities read by the store for this page (returned or not).
    pub scanned: u64,
    /// Present when the query has more to read.
    pub continuation: Option<ContinuationToken>,
    /// The PartitionKey the continuation resumes at, when the store says:
    /// a scan segment that continues a read stops once it passes its end.
    pub next_partition_key: Option<String>,
}

impl Page {
    /// Entities in the page, decoded or not.
    pub fn len(&self) -> usize {
        self.entities.len() + self.encoded.len()
    }

    /// Whether the page holds no entity (it may still carry a token).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the next page starts: the next PartitionKey and RowKey, versioned
/// and bound to its query. Opaque to callers: text, URL- and SQL-safe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContinuationToken(String);

const TOKEN_V1: u8 = 1;

/// A decoded token: resume at (pk, rk), inclusively or just after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) partition_key: String,
    pub(crate) row_key: String,
    pub(crate) inclusive: bool,
}

impl Resume {
    /// The engine key the next page starts at (inclusive).
    pub(crate) fn start_key(&self, id: u64) -> Vec<u8> {
        let k = codec::entity_key(id, &self.partition_key, &self.row_key);
        if self.inclusive { k } else { successor(k) }
    }
}

impl ContinuationToken {
    pub(crate) fn encode(fingerprint: u64, resume: &Resume) -> Self {
        let mut b = Vec::with_capacity(16 + resume.partition_key.len() + resume.row_key.len());
        b.push(TOKEN_V1);
        b.extend_from_slice(&fingerprint.to_be_bytes());
        b.push(u8::from(resume.inclusive));
        b.extend_from_slice(&(resume.partition_key.len() as u32).to_be_bytes());
        b.extend_from_slice(resume.partition_key.as_bytes());
        b.extend_from_slice(resume.row_key.as_bytes());
        ContinuationToken(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
    }

    pub(crate) fn decode(&self, fingerprint: u64) -> Result<Resume> {
        let bad = |reason| StoreError::InvalidContinuationToken { reason };
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&self.0)
            .map_err(|_| bad("not a token this server issued"))?;
        if b.first() != Some(&TOKEN_V1) {
            return Err(bad("token from an unsupported version"));
        }
        if b.len() < 14 {
            return Err(bad("token is truncated"));
        }
        if b[1..9] != fingerprint.to_be_bytes() {
            return Err(bad("token belongs to a different query"));
        }
        let inclusive = b[9] != 0;
        let pk_len = u32::from_be_bytes(b[10..14].try_into().expect("4 bytes")) as usize;
        let rest = &b[14..];
        if rest.len() < pk_len {
            return Err(bad("token is truncated"));
        }
        let text = |s: &[u8]| {
            std::str::from_utf8(s)
                .map(str::to_owned)
                .map_err(|_| bad("token key is not UTF-8"))
        };
        Ok(Resume {
            partition_key: text(&rest[..pk_len])?,
            row_key: text(&rest[pk_len..])?,
            inclusive,
        })
    }

    /// The token as text, for handing to a client.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A token received back from a client (validated when used).
    pub fn from_string(s: impl Into<String>) -> Self {
        ContinuationToken(s.into())
    }
}

/// Of two bounds on the same side of an interval (`lower` or upper), the
/// tighter one (`tighter`) or the looser one. At equal keys an exclusive
/// bound is the tighter; an unbounded side is the loosest.
fn pick(a: &Bound<String>, b: &Bound<String>, lower: bool, tighter: bool) -> Bound<String> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => {
            if tighter {
                x.clone()
            } else {
                Bound::Unbounded
            }
        }
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            let a_tighter = match x.cmp(y) {
                Ordering::Equal => matches!(a, Bound::Excluded(_)),
                o => (o == Ordering::Greater) == lower,
            };
            if a_tighter == tighter {
                a.clone()
            } else {
                b.clone()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn bound() -> impl Strategy<Value = Bound<String>> {
        prop_oneof![
            Just(Bound::Unbounded),
            "[a-d]{0,2}".prop_map(Bound::Included),
            "[a-d]{0,2}".prop_map(Bound::Excluded),
        ]
    }

    proptest! {
        /// The first-byte shortcut orders keys as a byte comparison does
        /// (and so as the strings do).
        #[test]
        fn key_order_is_byte_order(a in "[a-c\u{10FFFF}]{0,3}", b in "[a-c\u{10FFFF}]{0,3}") {
            prop_assert_eq!(cmp_key(a.as_bytes(), b.as_bytes()), a.cmp(&b));
        }

        /// Checked key by key over a small alphabet: the intersection holds
        /// exactly the keys of both, the hull every key of either and
        /// nothing outside the two intervals' extremes.
        #[test]
        fn intersect_and_hull_hold_the_right_keys(
            a in (bound(), bound()), b in (bound(), bound()), k in "[a-d]{0,3}",
        ) {
            let (a, b) = (KeyInterval::new(a.0, a.1), KeyInterval::new(b.0, b.1));
            prop_assert_eq!(
                a.intersect(&b).contains(&k),
                a.contains(&k) && b.contains(&k)
            );
            let h = a.hull(&b);
            if a.contains(&k) || b.contains(&k) {
                prop_assert!(h.contains(&k));
            }
            let past_hi = |iv: &KeyInterval| !iv.contains(&k) && !KeyInterval::new(Bound::Unbounded, iv.hi.clone()).contains(&k);
            let before_lo = |iv: &KeyInterval| !iv.contains(&k) && !KeyInterval::new(iv.lo.clone(), Bound::Unbounded).contains(&k);
            if (past_hi(&a) && past_hi(&b)) || (before_lo(&a) && before_lo(&b)) {
                prop_assert!(!h.contains(&k));
            }
        }
    }

    #[test]
    fn token_round_trip_and_binding() {
        let r = Resume {
            partition_key: "p1".into(),
            row_key: "r/é".into(),
            inclusive: true,
        };
        let t = ContinuationToken::encode(7, &r);
        assert_eq!(t.decode(7).unwrap(), r);
        assert!(matches!(
            t.decode(8),
            Err(StoreError::InvalidContinuationToken { .. })
        ));
        assert!(ContinuationToken::from_string("!!").decode(7).is_err());
        assert!(ContinuationToken::from_string("AQ").decode(7).is_err());
    }

    #[test]
    fn overlapping_boxes_merge_into_disjoint_ranges() {
        let q = Query::spans(vec![
            KeyBox::partition("b"),
            KeyBox::point("a", "x"),
            KeyBox::point("b", "y"),
            KeyBox {
                pk: KeyInterval::new(Bound::Excluded("b".into()), Bound::Unbounded),
                rk: KeyInterval::all(),
            },
        ]);
        let r = q.byte_ranges(1);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0].0, codec::entity_key(1, "a", "x"));
        assert_eq!(r[1].0, codec::partition_start(1, "b"));
        assert_eq!(r[1].1, codec::table_prefix(2).to_vec());
    }

    #[test]
    fn prefix_intervals_cover_exactly_the_extensions() {
        let i = KeyInterval::prefix("AGE:03");
        assert!(i.contains("AGE:03"));
        assert!(i.contains("AGE:039__x"));
        assert!(i.contains("AGE:03\u{10FFFF}"));
        assert!(!i.contains("AGE:04"));
        assert!(!i.contains("AGE:0"));
        assert_eq!(i.hi, Bound::Excluded("AGE:04".to_owned()));
        let top = KeyInterval::prefix("a\u{10FFFF}");
        assert_eq!(top.hi, Bound::Excluded("b".to_owned()));
        assert!(top.contains("a\u{10FFFF}\u{10FFFF}"));
        assert_eq!(KeyInterval::prefix("").hi, Bound::Unbounded);
        assert_eq!(
            KeyInterval::prefix("\u{D7FF}").hi,
            Bound::Excluded("\u{E000}".to_owned())
        );
    }

    #[test]
    fn empty_intervals_produce_no_range() {
        let b = KeyBox {
            pk: KeyInterval::new(Bound::Included("b".into()), Bound::Excluded("b".into())),
            rk: KeyInterval::all(),
        };
        assert!(b.byte_range(1).is_none());
        assert!(
            KeyInterval::new(Bound::Excluded("a".into()), Bound::Included("a".into())).is_empty()
        );
    }
}
