//! PartitionKey boundaries of a table whose service keeps no statistics a
//! client can read (Azure Table Storage, the Cosmos DB Table API): probed
//! from the table itself, so that a large remote scan can be cut into
//! segments read in parallel ([`super::scan::remote`]).
//!
//! A probe asks for the first PartitionKey at or after a string (one
//! entity, keys only). Starting from a key (the last one the scan read):
//! one round of probes just past each prefix of that key finds the prefix
//! every key left shares (so `tenant-00001 … tenant-50000` is cut inside
//! `tenant-`, not somewhere between `t` and `~`); then two rounds of probes
//! at even steps of the key space between the keys found so far find more.
//! Each round's probes go out at once: three round trips in all. Boundaries are keys that
//! exist, so no segment is empty where it starts; segments span about equal
//! widths of the key space, not equal entity counts (nothing tells us the
//! counts).
//!
//! Boundaries never hold characters at or above U+D800: below that, the
//! service's UTF-16 order and code-point order agree on which side of a
//! boundary any key lies, so a segment read in the service's order can stop
//! at the first key past its boundary.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::api::TableStore;
use crate::error::Result;
use crate::query::{KeyBox, KeyInterval, PageRequest, Query};
use crate::retry::{RetryPolicy, RetryStats, with_retry};

/// Prefixes of the first key probed in the prefix round.
const PREFIX_PROBES: usize = 24;
/// Rounds of even steps after the prefix round.
const ROUNDS: usize = 2;
/// Most probes in all (each is one small request).
const MAX_PROBES: u64 = 128;
/// Continuation tokens a probe follows before giving up on its answer (a
/// service page can end empty at a range partition's boundary).
const PROBE_PAGES: usize = 4;

/// Boundaries found, in key order, and the probes it took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// PartitionKeys that exist in the table, strictly after the sampled
    /// range's start and before its end, ascending.
    pub boundaries: Vec<String>,
    /// Requests sent.
    pub probes: u64,
}

/// Up to `want` boundaries of `table`'s PartitionKeys in `(after, hi)`
/// (`hi` `None`: to the end), probing at most `fanout` at once. `after` is
/// a key the caller has read (or the range's start).
pub async fn boundaries(
    store: Arc<dyn TableStore>,
    table: &str,
    after: &str,
    hi: Option<&str>,
    want: usize,
    fanout: usize,
    retry: &RetryPolicy,
) -> Result<Sample> {
    let prober = Prober {
        store,
        table: Arc::from(table),
        hi: hi.map(Arc::from),
        retry: retry.clone(),
        permits: Arc::new(Semaphore::new(fanout.max(1))),
    };
    let mut probes = 0u64;
    let mut known = BTreeSet::new();
    // A key to start from: the one read, or the first after the start.
    let first = if after.is_empty() {
        probes += 1;
        match prober.probe(format!("{after}\0")).await? {
            Some(k) => k,
            None => {
                return Ok(Sample {
                    boundaries: Vec::new(),
                    probes,
                });
            }
        }
    } else {
        after.to_owned()
    };

    // Past each prefix of that key: the longest prefix with nothing after
    // it is shared by every key left.
    let chars: Vec<char> = first.chars().collect();
    let past: Vec<String> = (1..=chars.len().min(PREFIX_PROBES))
        .filter_map(|n| successor(&chars[..n]))
        .collect();
    let answers = prober.many(past.clone()).await?;
    probes += past.len() as u64;
    let mut upper: Option<String> = hi.map(str::to_owned);
    for (s, found) in past.iter().zip(answers) {
        match found {
            Some(k) => {
                known.insert(k);
            }
            // Nothing at or after `s`: it bounds the keys; the longest such
            // prefix (the last) is the tightest.
            None => upper = Some(s.clone()),
        }
    }
    known.insert(first);

    // Rounds of probes at even steps between the keys found so far (the
    // unknown stretches), about `want` probes a round.
    let top = upper.unwrap_or_else(|| char::from_u32(0xA1).expect("char").to_string());
    let mut stretches: Vec<(String, String)> = Vec::new();
    let mut it = known.iter().peekable();
    while let Some(a) = it.next() {
        let b = it.peek().map_or_else(|| top.clone(), |b| (*b).clone());
        stretches.push((a.clone(), b));
    }
    for _ in 0..ROUNDS {
        if known.len() > want || probes >= MAX_PROBES || stretches.is_empty() {
            break;
        }
        let budget = want.min((MAX_PROBES - probes) as usize);
        let alphabet = Alphabet::of(known.iter().map(String::as_str).chain([top.as_str()]));
        // Probes in proportion to each stretch's width of key space.
        let common = stretches
            .iter()
            .flat_map(|(a, b)| [a, b])
            .map(|k| {
                k.chars()
                    .zip(top.chars())
                    .take_while(|(x, y)| x == y)
                    .count()
            })
            .min()
            .unwrap_or(0);
        let widths: Vec<u128> = stretches
            .iter()
            .map(|(a, b)| {
                u128::from(
                    alphabet
                        .number(b, common)
                        .saturating_sub(alphabet.number(a, common)),
                )
            })
            .collect();
        let total: u128 = widths.iter().sum::<u128>().max(1);
        let mut asked: Vec<(usize, String)> = Vec::new();
        for (i, (a, b)) in stretches.iter().enumerate() {
            let share = (budget as u128 * widths[i]).div_ceil(total) as usize;
            if share > 0 {
                asked.extend(alphabet.steps(a, b, share + 1).into_iter().map(|m| (i, m)));
            }
        }
        asked.truncate(budget);
        if asked.is_empty() {
            break;
        }
        let answers = prober
            .many(asked.iter().map(|(_, m)| m.clone()).collect())
            .await?;
        probes += asked.len() as u64;
        // What is still unknown: from each stretch's start or probe point
        // up to the next probe point or its end, minus what the probes
        // showed empty (from a point to the key found after it).
        let mut next = Vec::new();
        let mut asked = asked.into_iter().zip(answers).peekable();
        for (i, (a, b)) in stretches.into_iter().enumerate() {
            let mut from = a;
            while let Some(((_, m), found)) = asked.next_if(|((j, _), _)| *j == i) {
                next.push((from, m));
                match found.filter(|k| *k < b) {
                    Some(k) => {
                        known.insert(k.clone());
                        from = k;
                    }
                    None => {
                        from = b.clone();
                        break;
                    }
                }
            }
            // Skip the rest of this stretch's probes once one found nothing.
            while asked.next_if(|((j, _), _)| *j == i).is_some() {}
            if from < b {
                next.push((from, b));
            }
        }
        stretches = next.into_iter().filter(|(a, b)| a < b).collect();
    }

    let usable: Vec<String> = known
        .into_iter()
        .filter(|k| k.as_str() > after && k.chars().all(|c| (c as u32) < 0xD800))
        .collect();
    Ok(Sample {
        boundaries: spread(usable, want),
        probes,
    })
}

/// At most `want` of `keys`, spread evenly over them.
fn spread(keys: Vec<String>, want: usize) -> Vec<String> {
    if keys.len() <= want {
        return keys;
    }
    (0..want)
        .map(|i| keys[(i * 2 + 1) * keys.len() / (want * 2)].clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Sends probes: the first PartitionKey at or after a string, below `hi`.
#[derive(Clone)]
struct Prober {
    store: Arc<dyn TableStore>,
    table: Arc<str>,
    hi: Option<Arc<str>>,
    retry: RetryPolicy,
    permits: Arc<Semaphore>,
}

impl Prober {
    async fn probe(&self, from: String) -> Result<Option<String>> {
        let hi = match &self.hi {
            Some(h) => Bound::Excluded(h.to_string()),
            None => Bound::Unbounded,
        };
        let query = Query {
            spans: vec![KeyBox {
                pk: KeyInterval::new(Bound::Included(from), hi),
                rk: KeyInterval::all(),
            }],
            filter: None,
            projection: Some(Vec::new()),
        };
        let mut req = PageRequest::first(1);
        for _ in 0..PROBE_PAGES {
            let mut stats = RetryStats::default();
            let page = with_retry(&self.retry, &mut stats, || {
                self.store.query(&self.table, &query, &req)
            })
            .await?;
            if let Some(e) = page.entities.first() {
                return Ok(Some(e.partition_key.clone()));
            }
            if let Some(e) = page.encoded.iter().next() {
                return Ok(Some(e.partition_key().to_owned()));
            }
            match page.continuation {
                Some(t) => req = req.resume(t),
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Probes every string, at most `fanout` at once; answers in order.
    async fn many(&self, from: Vec<String>) -> Result<Vec<Option<String>>> {
        let mut set = JoinSet::new();
        for (i, s) in from.into_iter().enumerate() {
            let p = self.clone();
            set.spawn(async move {
                let _permit = p.permits.clone().acquire_owned().await;
                (i, p.probe(s).await)
            });
        }
        let mut out = vec![None; set.len()];
        while let Some(done) = set.join_next().await {
            let (i, r) = done.expect("probe task panicked");
            out[i] = r?;
        }
        Ok(out)
    }
}

/// The smallest string after every string starting with `prefix`: its last
/// character incremented (`None` if it cannot be).
fn successor(prefix: &[char]) -> Option<String> {
    let (last, head) = prefix.split_last()?;
    let next = (*last as u32 + 1..=char::MAX as u32).find_map(char::from_u32)?;
    Some(head.iter().chain([&next]).collect())
}

/// The characters a key space is spelled in, learned from keys found: a
/// digit, letter or upper-case letter brings its whole class (keys numbered
/// `0025` and `0100` have `7`s between them too); anything else only
/// itself. Positions are numbers in base `len + 1`, 0 meaning the key
/// ended.
struct Alphabet {
    chars: Vec<char>,
    /// Positions of a key compared (the number fits in 64 bits).
    digits: u32,
}

impl Alphabet {
    fn of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Alphabet {
        let mut set = BTreeSet::new();
        for c in keys.into_iter().flat_map(str::chars) {
            match c {
                '0'..='9' => set.extend('0'..='9'),
                'a'..='z' => set.extend('a'..='z'),
                'A'..='Z' => set.extend('A'..='Z'),
                c => {
                    set.insert(c);
                }
            }
        }
        let chars: Vec<char> = set.into_iter().collect();
        let base = chars.len() as f64 + 1.0;
        let digits = ((63.0 / base.log2()).floor() as u32).clamp(1, 12);
        Alphabet { chars, digits }
    }

    fn base(&self) -> u64 {
        self.chars.len() as u64 + 1
    }

    /// How many of the alphabet's characters are at or below `c`
    /// (monotonic in `c`).
    fn digit(&self, c: Option<char>) -> u64 {
        c.map_or(0, |c| self.chars.partition_point(|&x| x <= c) as u64)
    }

    /// `s` past its first `skip` characters, as a number.
    fn number(&self, s: &str, skip: usize) -> u64 {
        let mut cs = s.chars().skip(skip);
        (0..self.digits).fold(0u64, |n, _| n * self.base() + self.digit(cs.next()))
    }

    fn char_of(&self, d: u64) -> char {
        self.chars[(d.max(1) - 1) as usize]
    }

    /// `n - 1` strings at even steps between `a` and `b` (`a < b`),
    /// strictly between them, ascending; fewer when the alphabet cannot
    /// tell them apart.
    fn steps(&self, a: &str, b: &str, n: usize) -> Vec<String> {
        let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        let base = self.base();
        let (x, y) = (self.number(a, common), self.number(b, common));
        let mut out: Vec<String> = Vec::new();
        if y <= x + 1 || self.chars.is_empty() {
            return out;
        }
        for j in 1..n as u64 {
            let mut m = x + ((y - x) as u128 * j as u128 / n as u128) as u64;
            let mut tail = Vec::with_capacity(self.digits as usize);
            for _ in 0..self.digits {
                tail.push(m % base);
                m /= base;
            }
            // Trailing zeros are the key's end.
            while tail.first() == Some(&0) {
                tail.remove(0);
            }
            let s: String = a
                .chars()
                .take(common)
                .chain(tail.into_iter().rev().map(|d| self.char_of(d)))
                .collect();
            if s.as_str() > a && s.as_str() < b && out.last().is_none_or(|l| *l < s) {
                out.push(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_lie_between_their_ends() {
        let abc = Alphabet::of(["tenant-00001", "tenant-50000"]);
        let m = abc.steps("tenant-00001", "tenant-50000", 2);
        assert!(m.len() == 1 && m[0].starts_with("tenant-2"), "{m:?}");
        let m = abc.steps("tenant-00001", "tenant-50000", 5);
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(
            m[0].starts_with("tenant-1") && m[3].starts_with("tenant-4"),
            "{m:?}"
        );
        let abc = Alphabet::of(["tenant-00030", "tenant-00100"]);
        let m = abc.steps("tenant-00030", "tenant-00100", 4);
        assert!(
            m.iter()
                .all(|s| s.as_str() > "tenant-00030" && s.as_str() < "tenant-00100" && s.len() > 9),
            "{m:?}"
        );
        let abc = Alphabet::of(["a", "b"]);
        let m = abc.steps("a", "b", 2);
        assert!(m[0].as_str() > "a" && m[0].as_str() < "b", "{m:?}");
        assert_eq!(abc.steps("a", "a\0", 2), Vec::<String>::new());
        // `é` and `ü` sort above every ASCII letter: the steps still lie
        // between.
        let abc = Alphabet::of(["caf\u{e9}", "\u{fc}ber"]);
        assert!(
            abc.steps("caf\u{e9}", "\u{fc}ber", 4)
                .iter()
                .all(|s| s.as_str() > "caf\u{e9}" && s.as_str() < "\u{fc}ber")
        );
        assert_eq!(successor(&['a', 'z']), Some("a{".to_owned()));
        assert_eq!(successor(&['\u{D7FF}']), Some("\u{E000}".to_owned()));
        assert_eq!(successor(&[char::MAX]), None);
    }

    #[test]
    fn spread_keeps_every_key_or_an_even_choice() {
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        assert_eq!(spread(keys.clone(), 20), keys);
        assert_eq!(spread(keys, 2), vec!["k2".to_owned(), "k7".to_owned()]);
    }
}
