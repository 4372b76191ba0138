//! What-if planning: what a query would cost if its table were keyed by
//! other columns (`EXPLAIN (KEYS (pk [, rk])) SELECT …`, and the key
//! advisor after it).
//!
//! The table's entities (all of them, or a uniform sample of [`SAMPLE`]
//! when there are more) are re-keyed as the hypothetical definition would
//! store them ([`KeyModel`]). A query bound against that definition is then
//! counted on them: the entities its key spans read, the rows its filter
//! keeps, the partitions it touches and the largest of them, its pages.
//! The range-partition layout is the one the balancer would leave: as many
//! range partitions as the real table has, split at equal entity counts in
//! the new key order and spread round-robin over the servers. The counts go
//! through EXPLAIN's own last step ([`explain::finish`]: LIMIT, the minimum
//! time at the throttling targets), so a what-if plan and a real one are
//! comparable line by line.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use tablegate_catalog::TableDef;
use tablegate_store::partition::scan::{ScanOptions, remote};
use tablegate_store::{Backend, Entity, EntityWrite, KeyInterval, Query};

use crate::error::{PlanError, Result};
use crate::exec::store_query;
use crate::explain::{self, Estimate};
use crate::keys::{AccessClass, selectivity};
use crate::plan::BoundSelect;

/// Entities a model holds at most; bigger tables are sampled uniformly.
pub const SAMPLE: usize = 100_000;

/// Entities read from a table to model it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Entities in the table.
    pub total: u64,
    /// A uniform sample of them (all of them when `total <= SAMPLE`).
    pub entities: Vec<Entity>,
}

/// Reads `table` through the backend's unthrottled system store (as the
/// statistics EXPLAIN uses are read), keeping a uniform sample of at most
/// `cap` entities: reservoir sampling with a fixed seed, so the same data
/// gives the same plan.
pub async fn sample(store: &Backend, table: &str, cap: usize) -> Result<Sample> {
    let mut scan = remote(
        store.system(),
        table,
        Query::full_scan(),
        ScanOptions::default(),
    );
    let mut rng = SplitMix(0x7461_626c_6567_6174);
    let mut out = Sample {
        total: 0,
        entities: Vec::new(),
    };
    while let Some(page) = scan.next_page().await {
        for e in page?.entities {
            out.total += 1;
            if out.entities.len() < cap {
                out.entities.push(e);
            } else {
                let j = rng.below(out.total);
                if j < cap as u64 {
                    out.entities[j as usize] = e;
                }
            }
        }
    }
    Ok(out)
}

/// A small deterministic generator for the reservoir (not for anything
/// that needs unpredictability).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((u128::from(z) * u128::from(n)) >> 64) as u64
    }
}

/// A table's sampled entities as a hypothetical key design would store
/// them.
#[derive(Debug, Clone)]
pub struct KeyModel {
    /// The hypothetical definition.
    pub def: Arc<TableDef>,
    /// Entities in the real table.
    pub total: u64,
    /// Re-keyed entities, in (PartitionKey, RowKey) order.
    rows: Vec<Entity>,
    /// Index in `rows` where each PartitionKey starts.
    parts: Vec<usize>,
    /// Range partitions: lower bound and server, in key order.
    ranges: Vec<(String, usize)>,
    /// Sampled rows with a NULL (or unencodable) key column: the design
    /// could not store them.
    pub unkeyable: u64,
    /// Sampled rows sharing their (PartitionKey, RowKey) with an earlier
    /// one: the design's key is not unique.
    pub duplicates: u64,
}

impl KeyModel {
    /// Re-keys `sample` of `real` as `def` would store it, laid out in
    /// `ranges` range partitions over `servers` servers.
    pub fn build(
        real: &TableDef,
        def: Arc<TableDef>,
        sample: &Sample,
        ranges: usize,
        servers: usize,
    ) -> KeyModel {
        let cols: Vec<_> = real
            .visible()
            .filter_map(|c| Some((real.resolve(&c.name).ok()?, def.resolve(&c.name).ok()?)))
            .collect();
        let mut unkeyable = 0;
        let mut rows: Vec<Entity> = sample
            .entities
            .iter()
            .filter_map(|e| {
                let values = cols.iter().map(|(from, to)| (to, real.value_of(e, from)));
                match def.entity_write_owned(values) {
                    Ok(w) => Some(stored(w, e.timestamp)),
                    Err(_) => {
                        unkeyable += 1;
                        None
                    }
                }
            })
            .collect();
        rows.sort_unstable_by(|a, b| {
            (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key))
        });
        let mut duplicates = 0;
        let mut parts = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            match i.checked_sub(1).map(|p| &rows[p]) {
                Some(prev) if prev.partition_key == r.partition_key => {
                    if prev.row_key == r.row_key {
                        duplicates += 1;
                    }
                }
                _ => parts.push(i),
            }
        }
        // Equal entity counts per range partition, each boundary at the
        // start of a PartitionKey (a partition is never split).
        let ranges = ranges.max(1);
        let mut bounds = vec![(String::new(), 0)];
        for k in 1..ranges {
            let at = rows.len() * k / ranges;
            // The PartitionKey start nearest the ideal boundary.
            let p = parts.partition_point(|&s| s < at);
            let nearest = match (p.checked_sub(1).map(|q| parts[q]), parts.get(p)) {
                (Some(a), Some(&b)) => Some(if at - a <= b - at { a } else { b }),
                (a, b) => a.or(b.copied()),
            };
            if let Some(start) = nearest {
                let lo = rows[start].partition_key.clone();
                if bounds.last().is_some_and(|(l, _)| *l < lo) {
                    let server = bounds.len() % servers.max(1);
                    bounds.push((lo, server));
                }
            }
        }
        KeyModel {
            def,
            total: sample.total,
            rows,
            parts,
            ranges: bounds,
            unkeyable,
            duplicates,
        }
    }

    /// Each modelled row's place in the key order and its Timestamp (its
    /// last write): the insert pattern the design would see.
    pub fn order_and_time(&self) -> Vec<(usize, i64)> {
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r.timestamp.0))
            .collect()
    }

    /// Sampled entities (after re-keying).
    pub fn sampled(&self) -> usize {
        self.rows.len() + self.unkeyable as usize
    }

    /// Range partitions of the modelled layout.
    pub fn range_partitions(&self) -> usize {
        self.ranges.len()
    }

    /// Entities per sampled one.
    fn scale(&self) -> f64 {
        match self.sampled() {
            0 => 0.0,
            n => self.total as f64 / n as f64,
        }
    }

    /// PartitionKeys in the sample and the entities of the largest,
    /// scaled to the table.
    pub fn partitions(&self) -> (u64, u64) {
        let largest = (0..self.parts.len())
            .map(|i| self.part_end(i) - self.parts[i])
            .max()
            .unwrap_or(0);
        (
            self.parts.len() as u64,
            (largest as f64 * self.scale()).round() as u64,
        )
    }

    fn part_end(&self, i: usize) -> usize {
        self.parts.get(i + 1).copied().unwrap_or(self.rows.len())
    }

    fn range_of(&self, pk: &str) -> usize {
        self.ranges
            .partition_point(|(lo, _)| lo.as_str() <= pk)
            .saturating_sub(1)
    }

    /// Rows whose PartitionKey lies in `iv` (and, for a single
    /// PartitionKey, whose RowKey lies in `rk`): an index range of `rows`.
    fn box_rows(&self, pk: &KeyInterval, rk: &KeyInterval) -> std::ops::Range<usize> {
        let lo = self.rows.partition_point(|r| below(pk, &r.partition_key));
        let hi = self.rows.partition_point(|r| !above(pk, &r.partition_key));
        if pk.as_point().is_none() || lo >= hi {
            return lo..hi.max(lo);
        }
        let part = &self.rows[lo..hi];
        let a = part.partition_point(|r| below(rk, &r.row_key));
        let b = part.partition_point(|r| !above(rk, &r.row_key));
        lo + a..lo + b.max(a)
    }

    /// What `b` (bound against [`KeyModel::def`]) would cost, counted on
    /// the model.
    pub fn estimate(&self, b: &BoundSelect, page_size: usize) -> Estimate {
        let access = &b.access;
        let mut est = Estimate::default();
        if access.class == AccessClass::Empty {
            return est;
        }
        let query = store_query(b);
        // A residual the store cannot evaluate is applied after the scan;
        // its share is EXPLAIN's usual guess.
        let engine_sel = match &access.residual {
            Some(r) if access.residual_needs_engine => selectivity(r),
            _ => 1.0,
        };
        let mut seen = vec![false; self.rows.len()];
        let mut scanned_in: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut scanned, mut returned) = (0u64, 0u64);
        let mut returned_in: BTreeMap<usize, u64> = BTreeMap::new();
        for s in &access.spans {
            for i in self.box_rows(&s.pk, &s.rk) {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                let r = &self.rows[i];
                scanned += 1;
                *scanned_in.entry(&r.partition_key).or_default() += 1;
                if query.selects(r) {
                    returned += 1;
                    *returned_in
                        .entry(self.range_of(&r.partition_key))
                        .or_default() += 1;
                }
            }
        }
        let scale = self.scale();
        let scaled = |n: u64| (n as f64 * scale).round() as u64;
        est.scanned = scaled(scanned);
        est.returned = (est.scanned.min(scaled(returned)) as f64 * engine_sel).round() as u64;
        est.partitions = scanned_in.len() as u64;
        est.largest_scanned = scaled(scanned_in.values().copied().max().unwrap_or(0));
        est.largest_partition = scaled(
            scanned_in
                .keys()
                .filter_map(|pk| {
                    let i = self
                        .parts
                        .binary_search_by(|&s| self.rows[s].partition_key.as_str().cmp(pk))
                        .ok()?;
                    Some((self.part_end(i) - self.parts[i]) as u64)
                })
                .max()
                .unwrap_or(0),
        );
        if access.class == AccessClass::Point {
            let touched: BTreeSet<usize> = access
                .spans
                .iter()
                .filter_map(|s| s.pk.as_point())
                .map(|pk| self.range_of(pk))
                .collect();
            est.servers = touched.iter().map(|&i| self.ranges[i].1).collect();
            est.range_partitions = touched.len() as u64;
            est.requests = access.spans.len() as u64;
        } else {
            // One segment per range partition a span reaches, as the
            // partition layer scans; each returns its own pages.
            for (i, (lo, server)) in self.ranges.iter().enumerate() {
                let hi = self.ranges.get(i + 1).map(|(h, _)| h.as_str());
                if access.spans.iter().all(|s| s.pk.clip(lo, hi).is_empty()) {
                    continue;
                }
                let n = (returned_in.get(&i).copied().unwrap_or(0) as f64 * scale * engine_sel)
                    .round() as u64;
                est.pages += n.div_ceil(page_size as u64).max(1);
                est.servers.insert(*server);
                est.range_partitions += 1;
            }
            est.requests = est.pages;
        }
        explain::finish(&mut est, b, page_size);
        est
    }

    /// EXPLAIN's lines about the model itself, printed above the plan.
    pub fn describe(&self) -> Vec<String> {
        let def = &self.def;
        let keys = match &def.row_key {
            Some(rk) => format!("PartitionKey {}, RowKey {rk}", def.partition_key),
            None => format!("PartitionKey {} (RowKey always '')", def.partition_key),
        };
        let mut l = vec![format!(
            "What-if: {} keyed by {keys} (nothing is changed)",
            def.name
        )];
        let (parts, largest) = self.partitions();
        l.push(format!(
            "  Modelled on {} of {} entities{}: {} PartitionKeys{}, the largest {} entities",
            self.sampled(),
            self.total,
            if self.sampled() as u64 == self.total {
                ""
            } else {
                " (a uniform sample; counts scaled)"
            },
            parts,
            if self.sampled() as u64 == self.total {
                ""
            } else {
                " in the sample"
            },
            largest
        ));
        l.push(match self.ranges.len() {
            1 => "  Layout: one range partition, as the real table has".to_owned(),
            n => format!(
                "  Layout: {n} range partitions (as many as the real table has) at equal entity counts, as the balancer would leave them"
            ),
        });
        l.extend(
            self.warnings()
                .into_iter()
                .map(|w| format!("  Warning: {w}")),
        );
        l
    }

    /// Why the design could not hold this data as it is.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.unkeyable > 0 {
            w.push(format!(
                "{} sampled rows have no value for a key column: the design cannot store them (key columns are NOT NULL)",
                self.unkeyable
            ));
        }
        if self.duplicates > 0 {
            w.push(format!(
                "{} sampled rows share their (PartitionKey, RowKey) with another: the key is not unique; add a column to the RowKey (the seeds' compound key, e.g. 'a__b')",
                self.duplicates
            ));
        }
        w
    }
}

/// The entity a write would store (NULL properties left out).
fn stored(w: EntityWrite, timestamp: tablegate_store::Timestamp) -> Entity {
    Entity {
        partition_key: w.partition_key,
        row_key: w.row_key,
        timestamp,
        etag: None,
        properties: w
            .properties
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect(),
    }
}

/// True when `k` lies below every key of `iv`.
fn below(iv: &KeyInterval, k: &str) -> bool {
    match &iv.lo {
        Bound::Included(l) => k < l.as_str(),
        Bound::Excluded(l) => k <= l.as_str(),
        Bound::Unbounded => false,
    }
}

/// True when `k` lies above every key of `iv`.
fn above(iv: &KeyInterval, k: &str) -> bool {
    match &iv.hi {
        Bound::Included(h) => k > h.as_str(),
        Bound::Excluded(h) => k >= h.as_str(),
        Bound::Unbounded => false,
    }
}

/// The table a what-if EXPLAIN names: `SELECT … FROM t` alone.
pub(crate) fn single_table(q: &sqlparser::ast::Query) -> Result<String> {
    use sqlparser::ast::{SetExpr, TableFactor};
    let not_one = || {
        PlanError::Unsupported {
        feature: "EXPLAIN (KEYS …) of this query".into(),
        hint: "a what-if plan is for a SELECT from one table (no joins, subqueries in FROM or set operations)".into(),
    }
    };
    let SetExpr::Select(s) = &*q.body else {
        return Err(not_one());
    };
    match s.from.as_slice() {
        [twj] if twj.joins.is_empty() => match &twj.relation {
            TableFactor::Table {
                name, args: None, ..
            } => name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(crate::expr::fold)
                .ok_or_else(not_one),
            _ => Err(not_one()),
        },
        _ => Err(not_one()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablegate_catalog::{Column, SqlType};
    use tablegate_store::{Timestamp, Value};

    fn table() -> TableDef {
        TableDef::new(
            "runners",
            vec![
                Column::property("race", SqlType::Text),
                Column::property("bib", SqlType::Int4),
                Column::property("age", SqlType::Int4),
            ],
            &["bib".to_owned()],
        )
        .unwrap()
    }

    /// Entities as `table()` stores them: bib is the PartitionKey.
    fn sample(n: i32, total: u64) -> Sample {
        let def = table();
        let cols = [
            def.resolve("race").unwrap(),
            def.resolve("bib").unwrap(),
            def.resolve("age").unwrap(),
        ];
        let entities = (0..n)
            .map(|i| {
                let w = def
                    .entity_write(&[
                        (&cols[0], Some(Value::String(format!("race{}", i % 4)))),
                        (&cols[1], Some(Value::Int32(i))),
                        (&cols[2], (i % 5 != 0).then_some(Value::Int32(20 + i % 50))),
                    ])
                    .unwrap();
                stored(w, Timestamp::MIN)
            })
            .collect();
        Sample { total, entities }
    }

    #[test]
    fn a_model_rekeys_counts_and_scales() {
        let real = table();
        let def = Arc::new(real.rekeyed(&["race".into(), "bib".into()]).unwrap());
        let m = KeyModel::build(&real, def, &sample(1000, 1000), 3, 2);
        assert_eq!((m.unkeyable, m.duplicates), (0, 0));
        assert_eq!(m.partitions(), (4, 250));
        // Three ranges, each starting at a PartitionKey, none split.
        assert_eq!(m.range_partitions(), 3);
        assert_eq!(
            m.ranges
                .iter()
                .map(|(lo, s)| (lo.as_str(), *s))
                .collect::<Vec<_>>(),
            [("", 0), ("race1", 1), ("race3", 0)]
        );
        // A sample of a tenth of the table scales its counts up.
        let def = Arc::new(real.rekeyed(&["race".into(), "bib".into()]).unwrap());
        let m = KeyModel::build(&real, def, &sample(1000, 10_000), 1, 1);
        assert_eq!(m.partitions(), (4, 2500));
        assert_eq!(m.sampled(), 1000);
    }

    #[test]
    fn nulls_and_repeated_keys_are_counted() {
        let real = table();
        let def = Arc::new(real.rekeyed(&["race".into(), "age".into()]).unwrap());
        let m = KeyModel::build(&real, def, &sample(1000, 1000), 1, 1);
        // Every fifth age is NULL; (race, age) repeats.
        assert_eq!(m.unkeyable, 200);
        assert_eq!(m.sampled(), 1000);
        assert!(m.duplicates > 0);
        assert_eq!(m.warnings().len(), 2);
    }

    #[test]
    fn box_rows_respect_open_and_closed_bounds() {
        let real = table();
        let def = Arc::new(real.rekeyed(&["race".into(), "bib".into()]).unwrap());
        let m = KeyModel::build(&real, def, &sample(1000, 1000), 1, 1);
        let iv = |lo, hi| KeyInterval::new(lo, hi);
        let all = KeyInterval::all();
        let s = |x: &str| x.to_owned();
        let count = |pk: &KeyInterval, rk: &KeyInterval| m.box_rows(pk, rk).len();
        assert_eq!(count(&all, &all), 1000);
        assert_eq!(count(&KeyInterval::point("race1"), &all), 250);
        assert_eq!(
            count(
                &iv(Bound::Excluded(s("race1")), Bound::Included(s("race3"))),
                &all
            ),
            500
        );
        assert_eq!(
            count(
                &iv(Bound::Included(s("race1")), Bound::Excluded(s("race3"))),
                &all
            ),
            500
        );
        // One PartitionKey: the RowKey bounds narrow the rows.
        let bib = |n: i64| SqlType::Int4.encode_key(&Value::Int32(n as i32)).unwrap();
        assert_eq!(
            count(
                &KeyInterval::point("race0"),
                &iv(Bound::Included(bib(0)), Bound::Excluded(bib(40)))
            ),
            10
        );
        assert_eq!(count(&KeyInterval::point("race9"), &all), 0);
    }

    #[test]
    fn the_reservoir_is_uniform_and_deterministic() {
        let mut a = SplitMix(1);
        let mut b = SplitMix(1);
        let draws: Vec<u64> = (0..1000).map(|_| a.below(10)).collect();
        assert_eq!(draws, (0..1000).map(|_| b.below(10)).collect::<Vec<_>>());
        for d in 0..10 {
            let n = draws.iter().filter(|&&x| x == d).count();
            assert!((50..150).contains(&n), "{d}: {n}");
        }
    }
}
