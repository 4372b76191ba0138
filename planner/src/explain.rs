//! EXPLAIN: what a table access will cost, estimated from the store's
//! statistics before running it, and (ANALYZE) what it did cost, from the
//! [`Actuals`] execution recorded ([`crate::exec`]).
//!
//! Estimates: entities scanned come from per-partition counts plus bounded
//! key probes of partly covered partitions (the store's estimator); returned
//! applies the residual filter's selectivity; pages are 1,000 returned per
//! page per server segment; the minimum time is what the scan costs at the
//! throttling targets (2,000/s for one partition, 10,000/s per server and
//! 20,000/s for the account).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use tablegate_store::Backend;
use tablegate_store::partition::Targets;

use crate::error::Result;
use crate::exec::{Actuals, IndexMode, store_query};
use crate::keys::{AccessClass, equality_columns, render_spans, selectivity};
use crate::plan::{BoundSelect, Route};

/// A partition bigger than this gets the "very large partition" advice.
pub const LARGE_PARTITION: u64 = 100_000;
/// Returned/scanned below this is "low density".
pub const LOW_DENSITY: f64 = 0.1;

/// Estimated cost of one table access.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Estimate {
    /// PartitionKeys touched.
    pub partitions: u64,
    /// Range partitions touched.
    pub range_partitions: u64,
    /// Partition servers touched.
    pub servers: BTreeSet<usize>,
    /// Entities the store reads.
    pub scanned: u64,
    /// Entities expected back.
    pub returned: u64,
    /// Store requests (pages, or point lookups).
    pub requests: u64,
    /// Pages (1,000 per page, plus one per server segment).
    pub pages: u64,
    /// The fastest the access can run at the throttling targets.
    pub min_time: Duration,
    /// Entities in the largest partition touched.
    pub largest_partition: u64,
    /// Entities read from the partition read most.
    pub largest_scanned: u64,
    /// The backend keeps no statistics (a remote table service): the
    /// counts above are zero and EXPLAIN prints "unknown".
    pub unknown: bool,
    /// What a remote backend sends for this access (filter, projection,
    /// what is finished locally); empty on the embedded engine.
    pub backend: Vec<String>,
    /// The index lookup that could replace this access, and its cost.
    pub index: Option<IndexCost>,
}

impl Estimate {
    /// returned / scanned (1 when nothing is scanned).
    pub fn density(&self) -> f64 {
        if self.scanned == 0 {
            1.0
        } else {
            self.returned as f64 / self.scanned as f64
        }
    }
}

/// Estimates a bound access against the store's statistics.
pub fn estimate(store: &Backend, b: &BoundSelect, page_size: usize) -> Result<Estimate> {
    let table = &b.plan.table.name;
    let access = &b.access;
    if access.class == AccessClass::Empty {
        return Ok(Estimate::default());
    }
    let sel = access.residual.as_ref().map_or(1.0, selectivity);
    // Boxes spanning several partitions with a RowKey condition read whole
    // partitions; assume a third of the rows pass the RowKey condition.
    let rk_sel = if b.plan.table.row_key.is_some()
        && access
            .spans
            .iter()
            .any(|s| s.pk.as_point().is_none() && s.rk != tablegate_store::KeyInterval::all())
    {
        1.0 / 3.0
    } else {
        1.0
    };
    let query = store_query(b);
    if let Some(name) = store.remote_description() {
        let mut backend = vec![name];
        backend.extend(store.explain_query(table, &query));
        if matches!(
            access.class,
            AccessClass::PartitionRange | AccessClass::FullScan
        ) {
            backend.push(
                "Past its first page, cut at PartitionKey boundaries probed from the table into \
                 segments read in parallel (tablegate.scan_parallelism at a time), in key order"
                    .to_owned(),
            );
        }
        return Ok(Estimate {
            unknown: true,
            backend,
            requests: if access.class == AccessClass::Point {
                access.spans.len() as u64
            } else {
                0
            },
            // No statistics: the lookup is named, not costed.
            index: index_cost(store, b)?,
            ..Estimate::default()
        });
    }
    let layout = store.layout(table)?;
    let mut est = Estimate::default();
    if access.class == AccessClass::Point {
        let e = store.estimate_blocking(table, &query)?.unwrap_or_default();
        est.scanned = e.scanned;
        est.partitions = e.partitions;
        est.largest_partition = e.largest_partition;
        est.largest_scanned = e.largest_scanned;
        est.requests = access.spans.len() as u64;
        est.returned = (e.scanned as f64 * sel).round() as u64;
        for s in &access.spans {
            let pk = s.pk.as_point().unwrap_or_default();
            let i = layout
                .partition_point(|(lo, _, _)| lo.as_str() <= pk)
                .saturating_sub(1);
            est.servers.insert(layout[i].2);
        }
        est.range_partitions = est.servers.len() as u64;
    } else {
        let segments = match store.partitioned() {
            Some(p) => p.segments(table, &query)?,
            None => Vec::new(),
        };
        for seg in segments {
            let e = store
                .estimate_blocking(table, &seg.query)?
                .unwrap_or_default();
            let returned = (e.scanned as f64 * sel * rk_sel).round() as u64;
            est.scanned += e.scanned;
            est.returned += returned;
            est.partitions += e.partitions;
            est.largest_partition = est.largest_partition.max(e.largest_partition);
            est.largest_scanned = est.largest_scanned.max(e.largest_scanned);
            est.pages += returned.div_ceil(page_size as u64).max(1);
            est.servers.insert(seg.server);
            // The layout's ranges are contiguous and in key order: those
            // from the one holding the segment's start to the last
            // starting before its end (two searches, not a pass per
            // segment: thousands of each).
            let first = layout
                .partition_point(|(lo, _, _)| lo.as_str() <= seg.lo.as_str())
                .saturating_sub(1);
            let end = match seg.hi.as_deref() {
                Some(h) => layout.partition_point(|(lo, _, _)| lo.as_str() < h),
                None => layout.len(),
            };
            est.range_partitions += end.saturating_sub(first) as u64;
        }
        est.requests = est.pages;
    }
    finish(&mut est, b, page_size);
    est.index = index_cost(store, b)?;
    Ok(est)
}

/// The last step of every estimate (the store's and a what-if model's):
/// LIMIT, then the minimum time at the throttling targets.
pub(crate) fn finish(est: &mut Estimate, b: &BoundSelect, page_size: usize) {
    // LIMIT stops the scan early when nothing else needs the rest.
    if let Some(limit) = b.limit {
        let wanted = limit + b.offset;
        if wanted < est.returned && b.plan.route == Route::Native {
            let f = wanted as f64 / est.returned as f64;
            est.scanned = ((est.scanned as f64 * f).ceil() as u64).max(wanted);
            est.returned = wanted;
            est.pages = est.returned.div_ceil(page_size as u64).max(1);
            est.requests = est.pages;
        }
    }
    if b.limit.is_some() {
        est.returned = est.returned.min(b.limit.unwrap_or(u64::MAX));
    }
    est.min_time = min_time(est, b.access.class, &Targets::default());
}

/// The fastest the access can go at the targets.
fn min_time(est: &Estimate, class: AccessClass, t: &Targets) -> Duration {
    let secs = match class {
        AccessClass::Empty => 0.0,
        AccessClass::Point | AccessClass::RowRange if est.partitions <= 1 => {
            est.scanned.max(est.requests) as f64 / t.per_partition as f64
        }
        // Spread over servers, but never faster than the busiest partition
        // at its own target.
        _ => {
            let per_server =
                est.scanned as f64 / est.servers.len().max(1) as f64 / t.per_server as f64;
            let per_partition =
                est.largest_scanned.min(est.scanned) as f64 / t.per_partition as f64;
            (est.scanned as f64 / t.per_account as f64)
                .max(per_server)
                .max(per_partition)
        }
    };
    Duration::from_secs_f64(secs)
}

/// An index lookup's estimated cost, weighed against the scan it would
/// replace (the [`Estimate`] it sits in).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexCost {
    /// The index.
    pub name: String,
    /// Whether it is a global index (its entries in a table of their own).
    pub global: bool,
    /// Whether its entries cover the query (INCLUDE): no point lookups.
    pub covering: bool,
    /// Index entries read: counted in the index's key range, as a scan's
    /// entities are.
    pub entries: u64,
    /// Pages of entries, then one point lookup per row they name.
    pub requests: u64,
    /// The fastest the lookup can run at the throttling targets.
    pub min_time: Duration,
}

impl IndexCost {
    /// The same lookup reading every row it names (UPDATE and DELETE
    /// read whole rows, never the entries alone).
    pub fn with_row_lookups(mut self) -> IndexCost {
        if self.covering {
            self.covering = false;
            self.requests += self.entries;
            self.min_time += Duration::from_secs_f64(self.entries as f64 / 2_000.0);
        }
        self
    }

    /// Whether the lookup is the cheaper plan: less time at the targets,
    /// then no more store requests.
    pub fn cheaper_than(&self, scan: &Estimate) -> bool {
        self.min_time < scan.min_time
            || (self.min_time == scan.min_time && self.requests <= scan.requests)
    }
}

/// The cost of the index lookup a run of `b` could make: its entries
/// counted in the index's key range (local: in each partition the query
/// names; global: in the index table), one page of entries per partition,
/// then one point lookup per row they name.
fn index_cost(store: &Backend, b: &BoundSelect) -> Result<Option<IndexCost>> {
    let Some((p, span)) = chosen(b) else {
        return Ok(None);
    };
    let table = &b.plan.table;
    let ix = &table.indexes[p.index];
    let (read, boxes) = match &span {
        Some(span) => (ix.global_table(&table.name), vec![span.clone()]),
        None => (
            table.name.clone(),
            p.partitions
                .iter()
                .map(|pk| tablegate_store::KeyBox {
                    pk: tablegate_store::KeyInterval::point(pk.clone()),
                    rk: p.rows.clone(),
                })
                .collect(),
        ),
    };
    let entries = store
        .estimate_blocking(&read, &tablegate_store::Query::spans(boxes))?
        .map_or(0, |e| e.scanned);
    // A global index's entries for one value sit in one partition of its
    // own table; its rows are spread over their own partitions, so the
    // entries bound it. A local index's entries and rows share the
    // partition target, partitions read one after another.
    let partitions = if span.is_some() {
        1
    } else {
        p.partitions.len() as u64
    };
    let covering = span.is_none() && crate::index::covering(b, ix);
    let lookups = if covering { 0 } else { entries };
    let requests = partitions + entries.div_ceil(1000).saturating_sub(1) + lookups;
    let reads = if span.is_some() {
        entries
    } else {
        entries + lookups
    };
    Ok(Some(IndexCost {
        name: ix.name.clone(),
        global: span.is_some(),
        covering,
        entries,
        requests,
        min_time: Duration::from_secs_f64(reads as f64 / 2_000.0),
    }))
}

/// The index lookup a run of `b` could make, and for a global index the
/// part of its table to read.
pub(crate) fn chosen(
    b: &BoundSelect,
) -> Option<(crate::index::Probe, Option<tablegate_store::KeyBox>)> {
    match crate::index::choose_for(b) {
        Some(p) => Some((p, None)),
        None => crate::global::choose(&b.plan.table, &b.access).map(|(p, span)| (p, Some(span))),
    }
}

/// Whether a run looks rows up through an index EXPLAIN finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexUse {
    /// It does.
    On,
    /// It does not, and EXPLAIN says why.
    Off(&'static str),
    /// Indexes do not apply (a what-if plan under other keys).
    Ignored,
}

impl IndexUse {
    /// Whether these options let a query on `table` use an index at all.
    pub fn allowed(opts: &crate::ExecOptions, table: &str) -> IndexUse {
        // A transaction's staged rows have no entries until COMMIT.
        let staged = opts
            .overlay
            .as_ref()
            .is_some_and(|o| o.table.eq_ignore_ascii_case(table));
        if opts.use_indexes == IndexMode::Off {
            IndexUse::Off("tablegate.use_indexes is off")
        } else if staged {
            IndexUse::Off(
                "this transaction has staged writes to the table, which have no index entries until COMMIT",
            )
        } else {
            IndexUse::On
        }
    }

    /// What a run of `b` with these options does, given its estimate: the
    /// lookup when allowed and cheaper (or forced, or when the scan it
    /// replaces is refused, or with no statistics to weigh it by).
    pub fn decide(opts: &crate::ExecOptions, b: &BoundSelect, est: &Estimate) -> IndexUse {
        let allowed = IndexUse::allowed(opts, &b.plan.table.name);
        let scan_refused = b.access.class == AccessClass::FullScan && !opts.allow_full_scan;
        match &est.index {
            Some(ix)
                if allowed == IndexUse::On
                    && opts.use_indexes == IndexMode::On
                    && !est.unknown
                    && !scan_refused
                    && !ix.cheaper_than(est) =>
            {
                IndexUse::Off(
                    "the scan costs less at the throttling targets; SET tablegate.use_indexes = force to use it anyway",
                )
            }
            _ => allowed,
        }
    }
}

fn index_lines(b: &BoundSelect, est: &Estimate, indexes: IndexUse) -> Vec<String> {
    let Some(ix) = &est.index else {
        return Vec::new();
    };
    let name = &ix.name;
    if let IndexUse::Off(why) = indexes {
        let mut l = vec![format!(
            "  Index Lookup: not used ({why}); {name} could serve this query"
        )];
        l.extend(costs_line(ix, est, "the scan (this plan)"));
        return l;
    }
    if indexes == IndexUse::Ignored {
        return Vec::new();
    }
    let def = b.plan.table.index(name).expect("chosen from the table");
    let (p, _) = chosen(b).expect("costed above");
    let used: Vec<String> = def
        .columns
        .iter()
        .enumerate()
        .take(p.equalities + usize::from(p.range))
        .map(|(i, c)| {
            if i < p.equalities {
                format!("{c} = …")
            } else if let Some(text) = &p.like {
                format!("{c} LIKE '{}%'", text.replace('\'', "''"))
            } else {
                format!("a range of {c}")
            }
        })
        .collect();
    let mut l = vec![if ix.covering {
        format!(
            "  Index Only Lookup: {name} ({}) by {} in each PartitionKey; its entries carry every column the query reads (INCLUDE {}), so no row is looked up",
            def.columns.join(", "),
            used.join(" and "),
            def.include.join(", ")
        )
    } else if ix.global {
        format!(
            "  Index Lookup: global index {name} ({}) by {} in its own table, then a point lookup of each row it names; the filter is checked again on every row",
            def.columns.join(", "),
            used.join(" and ")
        )
    } else {
        format!(
            "  Index Lookup: {name} ({}) by {} in each PartitionKey, then a point lookup of each row it names; the filter is checked again on every row",
            def.columns.join(", "),
            used.join(" and ")
        )
    }];
    if ix.global {
        l.push("  Staleness: the lookup first waits (up to 5 s, else it scans) until this gateway has applied every change acknowledged before it began; changes through other gateways appear once theirs apply them (tablegate.indexes shows the lag)".into());
    }
    l.extend(costs_line(ix, est, "the scan"));
    l.push(format!("  Chosen because: {}", why_chosen(b, est)));
    l.extend(crate::index::write_cost(&b.plan.table).map(|w| format!("  {w}")));
    l
}

/// Why a run uses the index it could use (see [`IndexUse::decide`]).
fn why_chosen(b: &BoundSelect, est: &Estimate) -> &'static str {
    if est.unknown {
        "this backend keeps no statistics to weigh it by, so an index that applies is used (SET tablegate.use_indexes = off to scan)"
    } else if est.index.as_ref().is_some_and(|ix| ix.cheaper_than(est)) {
        "it costs less than the scan at the throttling targets (SET tablegate.use_indexes = off to scan)"
    } else if b.access.class == AccessClass::FullScan {
        "the scan costs less, but full scans are off (tablegate.allow_full_scan)"
    } else {
        "tablegate.use_indexes is force (the scan costs less)"
    }
}

/// The access's cost with the index and without it (none when the
/// estimate is unknown).
fn costs_line(ix: &IndexCost, est: &Estimate, without: &str) -> Option<String> {
    (!est.unknown).then(|| {
        format!(
            "  With the index: index entries {}, store requests {}, minimum time {}; {without}: entities scanned {}, store requests {}, minimum time {}",
            ix.entries,
            ix.requests,
            fmt_duration(ix.min_time),
            est.scanned,
            est.requests,
            fmt_duration(est.min_time)
        )
    })
}

/// Advice for an access, in the seeds' terms.
pub fn advice(b: &BoundSelect, est: &Estimate) -> Vec<String> {
    let mut out = Vec::new();
    let access = &b.access;
    let table = &b.plan.table;
    if table.keyless() && access.class == AccessClass::FullScan {
        out.push(format!(
            "{} has no primary key: its rows have hidden keys ({} buckets × a time-ordered id), so every query reads all of it. Declare PRIMARY KEY (partition_key_column [, row_key_column]) when the table is created for point and range queries.",
            table.name,
            tablegate_catalog::HIDDEN_BUCKETS
        ));
    } else if access.class == AccessClass::FullScan {
        let rk_only = table.row_key.is_some()
            && access
                .spans
                .iter()
                .any(|s| s.rk != tablegate_store::KeyInterval::all());
        if rk_only {
            out.push(format!(
                "A RowKey condition without a PartitionKey condition still reads every partition: add {} = … (or IN (…)) to make this a point or row-range query.",
                table.partition_key
            ));
        }
        let mut eq = Vec::new();
        if let Some(r) = &access.residual {
            equality_columns(r, &mut eq);
        }
        // A global index already turns it into a lookup.
        if let Some(col) = eq.first()
            && crate::index::choose_among(table, access, true).is_none()
        {
            out.push(format!(
                "Full scan filtered on {col}: if this query is frequent, {col} would make a better PartitionKey (or key a second copy of each row by it, the seeds' duplicate-row pattern), turning it into a point or row-range query."
            ));
        } else if !rk_only && est.unknown {
            out.push(format!(
                "Full scan: every entity of {} is read. Add a condition on {} to read fewer partitions.",
                table.name, table.partition_key
            ));
        } else if !rk_only && b.limit.is_some() {
            out.push(format!(
                "Full scan: with no condition on {}, partitions are read in key order until the LIMIT is met (about {} entities here).",
                table.partition_key, est.scanned
            ));
        } else if !rk_only {
            out.push(format!(
                "Full scan: every entity of {} is read ({} entities). Add a condition on {} to read fewer partitions.",
                table.name, est.scanned, table.partition_key
            ));
        }
    }
    if est.scanned >= 100 && est.density() < LOW_DENSITY {
        out.push(format!(
            "Low density: reads {} entities to return about {} ({:.1}%). Throttling counts every entity read.",
            est.scanned,
            est.returned,
            est.density() * 100.0
        ));
    }
    if est.largest_partition > LARGE_PARTITION
        && matches!(
            access.class,
            AccessClass::RowRange | AccessClass::PartitionRange
        )
    {
        out.push(format!(
            "Very large partition: {} entities in one PartitionKey; a scan of it takes at least {:.0} s at the 2,000 entities/s partition target. Spread the data over more PartitionKeys.",
            est.largest_partition,
            est.largest_partition as f64 / 2_000.0
        ));
    }
    if matches!(
        access.class,
        AccessClass::RowRange | AccessClass::PartitionRange | AccessClass::FullScan
    ) && let Some(r) = &access.residual
    {
        let mut props = Vec::new();
        property_columns(r, &mut props);
        if let Some(p) = props.first()
            && access.class != AccessClass::FullScan
            && crate::index::choose(table, access).is_none()
        {
            let tag: String = p.to_uppercase().chars().take(3).collect();
            out.push(format!(
                "Filtering on {p} reads every row of the span. The seeds' duplicate-row pattern writes each entity a second time, in the same entity-group transaction, under a RowKey such as '{tag}:<{p}>__<rowkey>' (like BIB: and AGE: rows); a RowKey range on '{tag}:' then finds rows by {p} directly. CREATE INDEX ON {} ({p}) keeps such rows for you, and `{p} = …` then reads only the matching ones.",
                table.name
            ));
        }
        if let Some(p) = props.first()
            && access.class == AccessClass::FullScan
            && crate::index::choose_among(table, access, true).is_none()
        {
            let without = if table.keyless() {
                String::new()
            } else {
                format!(" with no condition on {}", table.partition_key)
            };
            out.push(format!(
                "Filtering on {p}{without} reads every partition. The seeds' Index Table pattern keeps a second table keyed by {p}, maintained eventually consistently: CREATE INDEX ON {} ({p}) GLOBAL does so for you, and `{p} = …` then reads only the matching rows.",
                table.name
            ));
        }
    }
    out
}

fn property_columns(e: &crate::expr::BExpr, out: &mut Vec<String>) {
    use crate::expr::BExpr;
    match e {
        BExpr::And(v) | BExpr::Or(v) => v.iter().for_each(|x| property_columns(x, out)),
        BExpr::Cmp(a, ..) | BExpr::Between { expr: a, .. } | BExpr::InList { expr: a, .. } => {
            if let BExpr::Column(c) = &**a
                && c.role == tablegate_catalog::Role::Property
                && !out.contains(&c.name)
            {
                out.push(c.name.clone());
            }
        }
        _ => {}
    }
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 0.001 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// EXPLAIN in text form, one line per row of the result.
pub fn render_text(
    b: &BoundSelect,
    est: &Estimate,
    actual: Option<&Actuals>,
    indexes: IndexUse,
) -> Vec<String> {
    let a = &b.access;
    let mut l = Vec::new();
    l.push(format!("Store Scan on {}", b.plan.table.name));
    l.push(format!(
        "  Class: {} ({})",
        a.class.name(),
        a.class.rating()
    ));
    l.push(match &b.plan.route {
        Route::Native => "  Route: native (key spans and filter pushed into the store)".to_owned(),
        Route::Engine(why) => format!("  Route: analytics engine, for {why}"),
    });
    if a.class == AccessClass::Empty {
        l.push("  Key spans: none (contradiction: zero store requests)".to_owned());
    } else {
        l.push("  Key spans (pushed to the store):".to_owned());
        for s in render_spans(&a.spans, &b.plan.table) {
            l.push(format!("    {s}"));
        }
    }
    if let Some(r) = &a.residual {
        if a.residual_needs_engine {
            l.push(format!(
                "  Residual filter (not pushable: evaluated after the scan): {r}"
            ));
        } else {
            l.push(format!(
                "  Residual filter (evaluated in the store; rows it rejects are still scanned): {r}"
            ));
        }
    }
    l.extend(index_lines(b, est, indexes));
    let cols: Vec<&str> = b.plan.columns.iter().map(|c| c.name.as_str()).collect();
    l.push(format!("  Projection: {}", cols.join(", ")));
    if let Some(n) = b.limit {
        l.push(format!(
            "  Limit: {n}{}",
            if b.offset > 0 {
                format!(" offset {}", b.offset)
            } else {
                String::new()
            }
        ));
    } else if b.offset > 0 {
        l.push(format!("  Offset: {}", b.offset));
    }
    if let Some((name, lines)) = est.backend.split_first() {
        l.push(format!("  Backend: {name}"));
        for x in lines {
            l.push(format!("    {x}"));
        }
    }
    if est.unknown {
        l.push(
            "  Estimated: unknown (the table service keeps no statistics tablegate can read)"
                .to_owned(),
        );
    } else {
        l.push(format!(
            "  Estimated: partitions {}, range partitions {}, servers {}",
            est.partitions,
            est.range_partitions,
            est.servers.len()
        ));
        l.push(format!(
            "  Estimated: entities scanned {}, returned {} (density {:.0}%)",
            est.scanned,
            est.returned,
            est.density() * 100.0
        ));
        l.push(format!(
            "  Estimated: store requests {}, pages {}",
            est.requests, est.pages
        ));
        l.push(format!(
            "  Minimum time at the throttling targets: {}",
            fmt_duration(est.min_time)
        ));
    }
    if let Some(x) = actual {
        l.push(format!(
            "  Actual: entities scanned {}, returned {}, pages {}, point lookups {}, continuation tokens followed {}, servers {}",
            x.scanned,
            x.returned,
            x.pages,
            x.lookups,
            x.tokens_followed,
            x.servers.len()
        ));
        l.push(format!(
            "  Actual: throttled retries {} ({} backing off), elapsed {}",
            x.retries,
            fmt_duration(x.backoff),
            fmt_duration(x.elapsed)
        ));
        if let Some(ix) = &x.index {
            l.push(if x.index_only {
                format!("  Actual: rows read from the entries of index {ix} alone (they count as scanned)")
            } else {
                format!("  Actual: rows found through index {ix} (its entries count as scanned, each row as a point lookup)")
            });
        }
        if let Some(ix) = &x.index_skipped {
            l.push(format!(
                "  Actual: global index {ix} not used: this gateway had not applied the changes before the query within 5 s, so the table was scanned"
            ));
        }
        if x.probes > 0 {
            l.push(format!(
                "  Actual: {} segments read in parallel, cut at PartitionKey boundaries found with {} probes",
                x.segments, x.probes
            ));
        }
        if x.type_mismatches > 0 {
            l.push(format!(
                "  Actual: {} property values read as NULL (stored with another type than the column's)",
                x.type_mismatches
            ));
        }
    }
    let adv = advice(b, est);
    if !adv.is_empty() {
        l.push("  Advice:".to_owned());
        for a in adv {
            l.push(format!("    - {a}"));
        }
    }
    l
}

/// Each span's PartitionKey interval as stored (typed keys encoded, so
/// it compares with range partition bounds): `From` / `To` (null when
/// unbounded) and whether each is inclusive.
fn stored_pk_spans(spans: &[tablegate_store::KeyBox]) -> serde_json::Value {
    use std::ops::Bound;
    fn bound(b: &Bound<String>) -> (Option<&str>, bool) {
        match b {
            Bound::Included(k) => (Some(k.as_str()), true),
            Bound::Excluded(k) => (Some(k.as_str()), false),
            Bound::Unbounded => (None, false),
        }
    }
    spans
        .iter()
        .map(|s| {
            let (from, from_inclusive) = bound(&s.pk.lo);
            let (to, to_inclusive) = bound(&s.pk.hi);
            json!({"From": from, "From Inclusive": from_inclusive, "To": to, "To Inclusive": to_inclusive})
        })
        .collect()
}

/// EXPLAIN (FORMAT JSON): the same facts as a JSON document.
pub fn render_json(
    b: &BoundSelect,
    est: &Estimate,
    actual: Option<&Actuals>,
    indexes: IndexUse,
) -> serde_json::Value {
    let a = &b.access;
    let mut v = json!({
        "Node Type": "Store Scan",
        "Relation Name": b.plan.table.name,
        "Class": a.class.name(),
        "Rating": a.class.rating(),
        "Route": match &b.plan.route { Route::Native => "native".to_owned(), Route::Engine(w) => format!("analytics engine: {w}") },
        "Key Spans": render_spans(&a.spans, &b.plan.table),
        "Stored PartitionKey Spans": stored_pk_spans(&a.spans),
        "Residual Filter": a.residual.as_ref().map(|r| r.to_string()),
        "Residual Pushed": a.residual.is_some() && !a.residual_needs_engine,
        "Projection": b.plan.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "Limit": b.limit,
        "Offset": b.offset,
        "Estimated Partitions": est.partitions,
        "Estimated Range Partitions": est.range_partitions,
        "Estimated Servers": est.servers.len(),
        "Estimated Entities Scanned": est.scanned,
        "Estimated Entities Returned": est.returned,
        "Estimated Density": (est.density() * 1000.0).round() / 1000.0,
        "Estimated Store Requests": est.requests,
        "Estimated Pages": est.pages,
        "Minimum Seconds At Targets": (est.min_time.as_secs_f64() * 1e6).round() / 1e6,
        "Advice": advice(b, est),
        "Index Lookup": est.index.as_ref().filter(|_| indexes != IndexUse::Ignored).map(|ix| json!({
            "Index Name": ix.name,
            "Global": ix.global,
            "Index Only": ix.covering,
            "Used": indexes == IndexUse::On,
            "Chosen Because": (indexes == IndexUse::On).then(|| why_chosen(b, est)),
            "Not Used Because": match indexes { IndexUse::Off(why) => Some(why), _ => None },
            "Estimated Index Entries": ix.entries,
            "Estimated Store Requests": ix.requests,
            "Minimum Seconds At Targets": (ix.min_time.as_secs_f64() * 1e6).round() / 1e6,
        })),
    });
    if est.unknown {
        for k in [
            "Estimated Partitions",
            "Estimated Range Partitions",
            "Estimated Servers",
            "Estimated Entities Scanned",
            "Estimated Entities Returned",
            "Estimated Density",
            "Estimated Store Requests",
            "Estimated Pages",
            "Minimum Seconds At Targets",
        ] {
            v[k] = serde_json::Value::Null;
        }
    }
    if let Some((name, lines)) = est.backend.split_first() {
        v["Backend"] = json!(name);
        v["Backend Requests"] = json!(lines);
    }
    if let Some(x) = actual {
        v["Actual Entities Scanned"] = json!(x.scanned);
        v["Actual Entities Returned"] = json!(x.returned);
        v["Actual Pages"] = json!(x.pages);
        v["Actual Point Lookups"] = json!(x.lookups);
        v["Actual Continuation Tokens Followed"] = json!(x.tokens_followed);
        v["Actual Servers"] = json!(x.servers.len());
        v["Actual Throttled Retries"] = json!(x.retries);
        v["Actual Backoff Seconds"] = json!(x.backoff.as_secs_f64());
        v["Actual Elapsed Seconds"] = json!(x.elapsed.as_secs_f64());
        if x.probes > 0 {
            v["Actual Segments"] = json!(x.segments);
            v["Actual Boundary Probes"] = json!(x.probes);
        }
        if x.type_mismatches > 0 {
            v["Actual Type Mismatches"] = json!(x.type_mismatches);
        }
    }
    json!([{ "Plan": v }])
}
