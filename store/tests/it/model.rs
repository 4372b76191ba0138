//! Model-based property tests.
//!
//! Random sequences of steps — single writes, entity-group transactions
//! (valid ones and deliberately malformed ones), point reads, paged queries
//! with random key spans, residual filters, projections and page sizes,
//! statistics, table drop/recreate and one recovery reopen — run in lockstep
//! against the memory engine and fjall. Every result of each store is compared
//! with a naive model written here from Azure Table Storage's documented rules: a `BTreeMap<(pk, rk), _>` per
//! table whose `String` keys order exactly as the store's ordinal order. The
//! model implements Insert / Replace / Merge / upserts / Delete, If-Match and
//! the EGT rules itself; it does not use the store's `Operation::apply`.
//!
//! Timestamps and ETags are the store's to choose: the model learns them from
//! each successful EGT's outcomes (after asserting that every rewritten entity
//! got a strictly later Timestamp and a new ETag) and then compares entities
//! exactly, Timestamps included. For the residual filter predicate itself the
//! model uses the public `Filter::matches` (unit-tested on its own); key-span
//! membership, ordering, projection and paging are checked against the model.
//!
//! `PROPTEST_CASES=<n>` overrides the number of cases for a longer soak.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select, subsequence};
use tablegate_store::*;

// ---- the alphabet -----------------------------------------------------------

/// Tables every store starts with; steps address them by index, sometimes
/// spelled in another case.
const TABLES: [&str; 2] = ["alpha", "Beta_2"];

/// PartitionKeys: small so that collisions happen. `"a "` is the smallest
/// valid key after `"a"` (controls are forbidden); `"111" < "2"` ordinally;
/// U+FFFD < U+1F600 in code-point order but not in UTF-16 order.
const PKS: &[&str] = &["", "a", "a ", "ab", "b", "111", "2", "é", "\u{FFFD}", "😀"];
/// RowKeys.
const RKS: &[&str] = &["", "0", "1", "10", "9", "x", "xy", "É"];
/// Keys that break the documented forbidden-character rule.
const BAD_KEYS: &[&str] = &[
    "a\u{1}",
    "x/y",
    "#",
    "q?",
    "\u{7f}",
    "z\u{9f}",
    "back\\slash",
    "\t",
];
/// Extra strings for query bounds and filter constants (never stored).
/// (`a\0`: no stored key holds U+0000, but a query's bound may.)
const EXTRA_QUERY_KEYS: &[&str] = &[
    "a\u{1}", "a\u{0}", "aa", "c", "0a", "\u{7f}", "zzz", "1", "É",
];
/// Property names the writes use.
const NAMES: &[&str] = &["n", "s", "d", "flag"];
/// Property names that break the identifier rules or are reserved.
const BAD_NAMES: &[&str] = &["Timestamp", "rowkey", "PARTITIONKEY", "1x", "a-b", ""];
/// Names filters and projections mention (`zz` is never written).
const READ_NAMES: &[&str] = &["n", "s", "d", "flag", "zz"];
/// LIKE patterns (`\` is the escape when one is given).
const PATTERNS: &[&str] = &[
    "%", "", "a%", "_", "%b", "a_", "\\%", "%1%", "é%", "A%", "_%_", "x\\_y", "%\\",
];
/// Short strings for String values.
const STRINGS: &[&str] = &["", "a", "A", "ab", "x_y", "50%", "é", "😀", "1", "10", "2"];

/// The documented DateTime range: 1601-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999Z
/// in microseconds since the Unix epoch (written out, not taken from the
/// store).
const DT_MIN: i64 = -11_644_473_600_000_000;
const DT_MAX: i64 = 253_402_300_799_999_999;

// ---- generated steps --------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Insert,
    Replace,
    Merge,
    InsertOrReplace,
    InsertOrMerge,
    Delete,
}

/// How an If-Match is chosen when the step runs (against that store's model).
#[derive(Debug, Clone)]
enum IfMatchSpec {
    /// `*`.
    Any,
    /// The entity's real current ETag (a made-up one if it does not exist).
    Current,
    /// An ETag this key (or else any key of the table) had before.
    Stale(Index),
    /// A made-up ETag.
    Bogus(u8),
}

#[derive(Debug, Clone)]
struct OpSpec {
    kind: Kind,
    pk: String,
    rk: String,
    props: BTreeMap<String, Option<Value>>,
    if_match: IfMatchSpec,
    /// When set, the RowKey is retargeted at run time to an existing entity
    /// of the partition (one no other operation of the EGT touches), so that
    /// updates and deletes find something.
    existing: Option<Index>,
}

/// A deliberate defect injected into an EGT.
#[derive(Debug, Clone)]
enum Defect {
    None,
    /// One operation moves to another PartitionKey.
    Cross(Index, &'static str),
    /// A copy of one operation (same keys, other body) is inserted.
    Dup(Index, Index, Kind),
    /// One operation gets a forbidden PartitionKey / RowKey.
    BadPk(Index, &'static str),
    BadRk(Index, &'static str),
    /// One operation gets an invalid property name.
    BadName(Index, &'static str),
    /// One operation gets a DateTime outside the EDM range.
    BadDate(Index, &'static str, i64),
}

/// How the pages of a query are requested besides their size.
#[derive(Debug, Clone)]
enum PageMode {
    /// Default time budget, no partition stop.
    Plain,
    /// A zero time budget: pages also end on the store's budget checks.
    ZeroBudget,
    /// Range-partition boundaries, as the partition layer passes them: each
    /// page stops at the first boundary after where it starts.
    Stops(Vec<String>),
}

#[derive(Debug, Clone)]
enum Step {
    /// An EGT (a single write is an EGT of one). `smart` steers operations
    /// towards success: Insert on an existing entity becomes Merge, and
    /// Replace / Merge / Delete on a missing one become Insert, with stale or
    /// made-up ETags replaced by the current one.
    Write {
        table: usize,
        alt: bool,
        smart: bool,
        ops: Vec<OpSpec>,
    },
    /// An InsertOrMerge EGT of `n` entities (100 is the limit).
    Big {
        table: usize,
        pk: &'static str,
        n: usize,
    },
    /// An EGT with no operations.
    Empty { table: usize },
    /// A point read.
    Get {
        table: usize,
        alt: bool,
        pk: String,
        rk: String,
    },
    /// A query read to the end in pages of `page` entities.
    Query {
        table: usize,
        query: Query,
        page: usize,
        mode: PageMode,
    },
    /// Table and partition statistics.
    Stats {
        table: usize,
        lo: Bound<String>,
        hi: Bound<String>,
        limit: usize,
    },
    /// Drop a table and create it again (empty).
    DropRecreate { table: usize },
    /// Compare the whole store with the model.
    Check,
}

fn table() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(0usize), 1 => Just(1usize)]
}

/// A PartitionKey, biased towards a few hot ones so that partitions fill.
fn pk() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => select(&["", "a", "a ", "b"][..]),
        3 => select(PKS),
    ]
    .prop_map(String::from)
}

fn rk() -> impl Strategy<Value = String> {
    select(RKS).prop_map(String::from)
}

/// Any string a query may mention: stored keys and some that never are.
fn qkey() -> impl Strategy<Value = String> {
    let all: Vec<&'static str> = PKS
        .iter()
        .chain(RKS)
        .chain(EXTRA_QUERY_KEYS)
        .copied()
        .collect();
    select(all).prop_map(String::from)
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        select(vec![
            0.0,
            -0.0,
            1.0,
            1.5,
            -2.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::MAX,
        ]),
        any::<f64>(),
    ]
}

/// A valid value of any EDM type; small domains so that filters hit.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-3i32..3).prop_map(Value::Int32),
        1 => any::<i32>().prop_map(Value::Int32),
        3 => (-3i64..3).prop_map(Value::Int64),
        1 => any::<i64>().prop_map(Value::Int64),
        3 => double().prop_map(Value::Double),
        3 => select(STRINGS).prop_map(|s| Value::String(s.to_owned())),
        2 => any::<bool>().prop_map(Value::Boolean),
        2 => prop_oneof![Just(DT_MIN), Just(DT_MAX), Just(0i64), DT_MIN..=DT_MAX]
            .prop_map(|t| Value::DateTime(DateTime(t))),
        1 => any::<[u8; 16]>().prop_map(Value::Guid),
        2 => vec(any::<u8>(), 0..5).prop_map(Value::Binary),
    ]
}

fn props() -> impl Strategy<Value = BTreeMap<String, Option<Value>>> {
    proptest::collection::btree_map(
        select(NAMES).prop_map(String::from),
        prop_oneof![4 => value().prop_map(Some), 1 => Just(None)],
        0..=4,
    )
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        2 => Just(Kind::Insert),
        2 => Just(Kind::Replace),
        2 => Just(Kind::Merge),
        2 => Just(Kind::InsertOrReplace),
        2 => Just(Kind::InsertOrMerge),
        2 => Just(Kind::Delete),
    ]
}

fn if_match() -> impl Strategy<Value = IfMatchSpec> {
    prop_oneof![
        4 => Just(IfMatchSpec::Any),
        4 => Just(IfMatchSpec::Current),
        1 => any::<Index>().prop_map(IfMatchSpec::Stale),
        1 => any::<u8>().prop_map(IfMatchSpec::Bogus),
    ]
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        16 => Just(Defect::None),
        1 => (any::<Index>(), select(PKS)).prop_map(|(i, p)| Defect::Cross(i, p)),
        1 => (any::<Index>(), any::<Index>(), kind()).prop_map(|(i, j, k)| Defect::Dup(i, j, k)),
        1 => (any::<Index>(), select(BAD_KEYS)).prop_map(|(i, k)| Defect::BadPk(i, k)),
        1 => (any::<Index>(), select(BAD_KEYS)).prop_map(|(i, k)| Defect::BadRk(i, k)),
        1 => (any::<Index>(), select(BAD_NAMES)).prop_map(|(i, n)| Defect::BadName(i, n)),
        1 => (
            any::<Index>(),
            select(NAMES),
            select(vec![DT_MAX + 1, DT_MIN - 1, i64::MIN, i64::MAX]),
        )
            .prop_map(|(i, n, t)| Defect::BadDate(i, n, t)),
    ]
}

fn write_step(len: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Step> {
    let bodies = vec(
        (
            kind(),
            props(),
            if_match(),
            proptest::option::weighted(0.5, any::<Index>()),
        ),
        RKS.len(),
    );
    (
        table(),
        any::<bool>(),
        any::<bool>(),
        pk(),
        subsequence(RKS, len).prop_shuffle(),
        bodies,
        defect(),
    )
        .prop_map(|(table, alt, smart, pk, rks, bodies, defect)| {
            let mut ops: Vec<OpSpec> = rks
                .iter()
                .zip(bodies)
                .map(|(rk, (kind, props, if_match, existing))| OpSpec {
                    kind,
                    pk: pk.clone(),
                    rk: (*rk).to_owned(),
                    props,
                    if_match,
                    existing,
                })
                .collect();
            let n = ops.len();
            match defect {
                Defect::None => {}
                Defect::Cross(i, p) => ops[i.index(n)].pk = p.to_owned(),
                Defect::Dup(i, j, kind) => {
                    let mut copy = ops[i.index(n)].clone();
                    copy.kind = kind;
                    copy.existing = None;
                    ops[i.index(n)].existing = None;
                    ops.insert(j.index(n + 1), copy);
                }
                Defect::BadPk(i, k) => ops[i.index(n)].pk = k.to_owned(),
                Defect::BadRk(i, k) => ops[i.index(n)].rk = k.to_owned(),
                Defect::BadName(i, name) => {
                    ops[i.index(n)]
                        .props
                        .insert(name.to_owned(), Some(Value::Int32(1)));
                }
                Defect::BadDate(i, name, t) => {
                    ops[i.index(n)]
                        .props
                        .insert(name.to_owned(), Some(Value::DateTime(DateTime(t))));
                }
            }
            Step::Write {
                table,
                alt,
                smart,
                ops,
            }
        })
}

fn bound() -> impl Strategy<Value = Bound<String>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => qkey().prop_map(Bound::Included),
        2 => qkey().prop_map(Bound::Excluded),
    ]
}

fn interval() -> impl Strategy<Value = KeyInterval> {
    (bound(), bound()).prop_map(|(lo, hi)| KeyInterval::new(lo, hi))
}

fn key_box() -> impl Strategy<Value = KeyBox> {
    let point_pk = prop_oneof![4 => pk(), 1 => qkey()];
    prop_oneof![
        2 => (point_pk.clone(), prop_oneof![4 => rk(), 1 => qkey()])
            .prop_map(|(p, r)| KeyBox::point(p, r)),
        2 => point_pk.clone().prop_map(KeyBox::partition),
        3 => (point_pk, interval()).prop_map(|(p, rk)| KeyBox {
            pk: KeyInterval::point(p),
            rk,
        }),
        3 => (interval(), prop_oneof![Just(KeyInterval::all()), interval()])
            .prop_map(|(pk, rk)| KeyBox { pk, rk }),
        1 => Just(KeyBox::all()),
    ]
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        6 => select(READ_NAMES).prop_map(Field::prop),
        2 => Just(Field::PartitionKey),
        2 => Just(Field::RowKey),
        1 => Just(Field::Timestamp),
    ]
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    select(&CmpOp::ALL[..])
}

fn filter_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => value(),
        2 => qkey().prop_map(Value::String),
        1 => Just(Value::DateTime(DateTime(0))),
    ]
}

fn filter() -> impl Strategy<Value = Filter> {
    let leaf = prop_oneof![
        1 => Just(Filter::True),
        1 => Just(Filter::False),
        6 => (field(), cmp_op(), filter_value())
            .prop_map(|(field, op, value)| Filter::Compare { field, op, value }),
        2 => (field(), vec(filter_value(), 0..4)).prop_map(|(field, values)| Filter::In { field, values }),
        2 => field().prop_map(Filter::IsNull),
        2 => (field(), select(PATTERNS), select(vec![None, Some('\\')]), any::<bool>()).prop_map(
            |(field, pattern, escape, case_insensitive)| Filter::Like {
                field,
                pattern: pattern.to_owned(),
                escape,
                case_insensitive,
            }
        ),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(Filter::And),
            vec(inner.clone(), 0..3).prop_map(Filter::Or),
            inner.prop_map(|f| Filter::Not(Box::new(f))),
        ]
    })
}

fn query() -> impl Strategy<Value = Query> {
    (
        // Often one RowKey interval for every box, as SQL's scans of a
        // table with index entries have (the store then tests only RowKeys).
        (vec(key_box(), 0..=3), proptest::bool::weighted(0.3)).prop_map(|(mut spans, shared)| {
            if shared && let Some(rk) = spans.first().map(|b| b.rk.clone()) {
                spans.iter_mut().for_each(|b| b.rk = rk.clone());
            }
            spans
        }),
        proptest::option::weighted(0.5, filter()),
        proptest::option::weighted(
            0.35,
            // `n` twice: projections may repeat a name.
            subsequence(&["n", "s", "d", "flag", "zz", "n"][..], 0..=3)
                .prop_shuffle()
                .prop_map(|v| v.into_iter().map(String::from).collect::<Vec<_>>()),
        ),
    )
        .prop_map(|(spans, filter, projection)| Query {
            spans,
            filter,
            projection,
        })
}

fn page_mode() -> impl Strategy<Value = PageMode> {
    prop_oneof![
        6 => Just(PageMode::Plain),
        2 => Just(PageMode::ZeroBudget),
        3 => proptest::collection::btree_set(prop_oneof![3 => pk(), 1 => qkey()], 1..4)
            .prop_map(|s| PageMode::Stops(s.into_iter().collect())),
    ]
}

fn page_size() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 1usize..=7, 1 => Just(1000usize)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => write_step(1..=1),
        10 => write_step(2..=6),
        // Every RowKey: batches this long read by one scan.
        3 => write_step(7..=8),
        1 => (table(), select(PKS), select(vec![99usize, 100, 101]))
            .prop_map(|(table, pk, n)| Step::Big { table, pk, n }),
        1 => table().prop_map(|table| Step::Empty { table }),
        3 => (table(), any::<bool>(), prop_oneof![3 => pk(), 1 => qkey()], prop_oneof![3 => rk(), 1 => qkey()])
            .prop_map(|(table, alt, pk, rk)| Step::Get { table, alt, pk, rk }),
        7 => (table(), query(), page_size(), page_mode())
            .prop_map(|(table, query, page, mode)| Step::Query { table, query, page, mode }),
        2 => (table(), bound(), bound(), prop_oneof![Just(usize::MAX), 0usize..4])
            .prop_map(|(table, lo, hi, limit)| Step::Stats { table, lo, hi, limit }),
        1 => table().prop_map(|table| Step::DropRecreate { table }),
        1 => Just(Step::Check),
    ]
}

// ---- the model ----------------------------------------------------------------

#[derive(Debug, Clone)]
struct ModelEntity {
    props: BTreeMap<String, Value>,
    /// Learned from the store.
    ts: DateTime,
    /// Learned from the store.
    etag: ETag,
}

#[derive(Debug, Default)]
struct ModelTable {
    rows: BTreeMap<(String, String), ModelEntity>,
    /// ETags each key had before its current version.
    history: BTreeMap<(String, String), Vec<ETag>>,
}

impl ModelTable {
    fn entity(&self, pk: &str, rk: &str) -> Option<Entity> {
        self.rows
            .get(&(pk.to_owned(), rk.to_owned()))
            .map(|m| to_entity(pk, rk, m))
    }

    fn partitions(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (pk, _) in self.rows.keys() {
            *out.entry(pk.clone()).or_insert(0u64) += 1;
        }
        out
    }
}

fn to_entity(pk: &str, rk: &str, m: &ModelEntity) -> Entity {
    Entity {
        partition_key: pk.to_owned(),
        row_key: rk.to_owned(),
        timestamp: m.ts,
        etag: None,
        properties: m.props.clone(),
    }
}

/// Why the model expects an EGT to fail.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Empty,
    TooMany(usize),
    Cross(usize),
    Dup(usize),
    Failed(usize, Root),
}

/// The root cause of a failed operation.
#[derive(Debug, Clone, PartialEq)]
enum Root {
    Exists,
    NotFound,
    Mismatch {
        expected: ETag,
        actual: ETag,
    },
    ForbiddenKey {
        kind: KeyKind,
        ch: char,
        position: usize,
    },
    BadName(String),
    DateRange(String, i64),
}

/// What one operation of a successful EGT does.
#[derive(Debug)]
struct Planned {
    pk: String,
    rk: String,
    before: Option<ModelEntity>,
    /// Properties afterwards; `None` when deleted.
    after: Option<BTreeMap<String, Value>>,
}

fn op_parts(op: &Operation) -> (&str, &str, Option<&EntityWrite>) {
    match op {
        Operation::Insert(w)
        | Operation::InsertOrReplace(w)
        | Operation::InsertOrMerge(w)
        | Operation::Replace { entity: w, .. }
        | Operation::Merge { entity: w, .. } => (&w.partition_key, &w.row_key, Some(w)),
        Operation::Delete {
            partition_key,
            row_key,
            ..
        } => (partition_key, row_key, None),
    }
}

/// Forbidden in keys: `/` `\` `#` `?`, U+0000–U+001F, U+007F–U+009F.
fn forbidden(c: char) -> bool {
    matches!(c, '/' | '\\' | '#' | '?')
        || ('\u{0}'..='\u{1f}').contains(&c)
        || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// The model's own validation of one operation: keys, then properties by
/// name (only what the operation carries; a Delete has no properties).
fn validate(op: &Operation) -> Option<Root> {
    let (pk, rk, w) = op_parts(op);
    for (kind, key) in [(KeyKind::PartitionKey, pk), (KeyKind::RowKey, rk)] {
        if let Some((position, ch)) = key.chars().enumerate().find(|(_, c)| forbidden(*c)) {
            return Some(Root::ForbiddenKey { kind, ch, position });
        }
    }
    for (name, v) in w.map(|w| &w.properties).into_iter().flatten() {
        let ident = name.starts_with(|c: char| c.is_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_alphanumeric() || c == '_');
        let reserved = ["PartitionKey", "RowKey", "Timestamp"]
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name));
        if !ident || reserved {
            return Some(Root::BadName(name.clone()));
        }
        if let Some(Value::DateTime(t)) = v
            && !(DT_MIN..=DT_MAX).contains(&t.0)
        {
            return Some(Root::DateRange(name.clone(), t.0));
        }
    }
    None
}

/// Non-NULL supplied properties (Insert / Replace / InsertOrReplace).
fn supplied(w: &EntityWrite) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, v) in &w.properties {
        if let Some(v) = v {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Merge: keep existing, overwrite supplied, NULL removes.
fn merge(cur: Option<&ModelEntity>, w: &EntityWrite) -> BTreeMap<String, Value> {
    let mut out = cur.map(|c| c.props.clone()).unwrap_or_default();
    for (k, v) in &w.properties {
        match v {
            Some(v) => {
                out.insert(k.clone(), v.clone());
            }
            None => {
                out.remove(k);
            }
        }
    }
    out
}

/// The model's verdict on an EGT: what it does, or how it fails.
fn predict(t: &ModelTable, ops: &[Operation]) -> Result<Vec<Planned>, Expect> {
    if ops.is_empty() {
        return Err(Expect::Empty);
    }
    if ops.len() > 100 {
        return Err(Expect::TooMany(ops.len()));
    }
    let pk0 = op_parts(&ops[0]).0;
    let mut seen = BTreeSet::new();
    for (i, op) in ops.iter().enumerate() {
        if let Some(root) = validate(op) {
            return Err(Expect::Failed(i, root));
        }
        let (pk, rk, _) = op_parts(op);
        if pk != pk0 {
            return Err(Expect::Cross(i));
        }
        if !seen.insert(rk) {
            return Err(Expect::Dup(i));
        }
    }
    let mut plan = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let (pk, rk, _) = op_parts(op);
        let cur = t.rows.get(&(pk.to_owned(), rk.to_owned()));
        let must_exist = |if_match: &IfMatch| -> Result<(), Root> {
            let c = cur.ok_or(Root::NotFound)?;
            match if_match {
                IfMatch::Any => Ok(()),
                IfMatch::ETag(e) if *e == c.etag => Ok(()),
                IfMatch::ETag(e) => Err(Root::Mismatch {
                    expected: e.clone(),
                    actual: c.etag.clone(),
                }),
            }
        };
        let after = match op {
            Operation::Insert(w) => match cur {
                Some(_) => Err(Root::Exists),
                None => Ok(Some(supplied(w))),
            },
            Operation::Replace { entity, if_match } => {
                must_exist(if_match).map(|()| Some(supplied(entity)))
            }
            Operation::Merge { entity, if_match } => {
                must_exist(if_match).map(|()| Some(merge(cur, entity)))
            }
            Operation::InsertOrReplace(w) => Ok(Some(supplied(w))),
            Operation::InsertOrMerge(w) => Ok(Some(merge(cur, w))),
            Operation::Delete { if_match, .. } => must_exist(if_match).map(|()| None),
        }
        .map_err(|r| Expect::Failed(i, r))?;
        plan.push(Planned {
            pk: pk.to_owned(),
            rk: rk.to_owned(),
            before: cur.cloned(),
            after,
        });
    }
    Ok(plan)
}

fn in_interval(iv: &KeyInterval, k: &str) -> bool {
    let lo = match &iv.lo {
        Bound::Unbounded => true,
        Bound::Included(b) => k >= b.as_str(),
        Bound::Excluded(b) => k > b.as_str(),
    };
    let hi = match &iv.hi {
        Bound::Unbounded => true,
        Bound::Included(b) => k <= b.as_str(),
        Bound::Excluded(b) => k < b.as_str(),
    };
    lo && hi
}

fn in_bounds(lo: &Bound<String>, hi: &Bound<String>, k: &str) -> bool {
    in_interval(&KeyInterval::new(lo.clone(), hi.clone()), k)
}

fn interval_empty(iv: &KeyInterval) -> bool {
    // '' is the smallest key: nothing lies below it.
    if matches!(&iv.hi, Bound::Excluded(h) if h.is_empty()) {
        return true;
    }
    match (&iv.lo, &iv.hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

/// Whether the store reads (pk, rk) for a query: the cost model of
/// `query.rs` — a box with one PartitionKey scans its RowKey range in that
/// partition; a box with a PartitionKey range scans whole partitions, its
/// RowKey range applying only as a filter; an empty box scans nothing.
fn scanned_by(spans: &[KeyBox], pk: &str, rk: &str) -> bool {
    spans.iter().any(|b| {
        if interval_empty(&b.pk) || interval_empty(&b.rk) {
            return false;
        }
        match (&b.pk.lo, &b.pk.hi) {
            (Bound::Included(lo), Bound::Included(hi)) if lo == hi => {
                pk == lo && in_interval(&b.rk, rk)
            }
            _ => in_interval(&b.pk, pk),
        }
    })
}

fn bogus_etag(n: u8) -> ETag {
    match n % 3 {
        0 => ETag("W/\"datetime'2001-02-03T04:05:06.000007Z'\"".into()),
        1 => ETag(String::new()),
        _ => ETag("W/\"bogus\"".into()),
    }
}

// ---- one store under test, with its own model ---------------------------------

/// A store under test: the engine-backed store, or the same with the
/// partition layer in the path.
enum Subject {
    Local(LocalStore),
    Partitioned(PartitionedStore),
}

/// Range-partition boundaries of the partitioned subject: pages end and
/// resume at each, since each range is on another server.
const SPLITS: [(&str, usize); 2] = [("ab", 1), ("é", 2)];

fn partitioned_config() -> PartitionConfig {
    PartitionConfig {
        targets: None,
        move_offline: std::time::Duration::ZERO,
        ..Default::default()
    }
}

impl Subject {
    fn create_table_blocking(&self, name: &str) -> Result<TableInfo> {
        match self {
            Subject::Local(s) => s.create_table_blocking(name),
            Subject::Partitioned(p) => {
                let info = p.create_table_blocking(name)?;
                p.move_range_blocking(name, "", 0)?;
                for (at, server) in SPLITS {
                    p.split_blocking(name, at)?;
                    p.move_range_blocking(name, at, server)?;
                }
                Ok(info)
            }
        }
    }
    fn drop_table_blocking(&self, name: &str) -> Result<()> {
        match self {
            Subject::Local(s) => s.drop_table_blocking(name),
            Subject::Partitioned(p) => p.drop_table_blocking(name),
        }
    }
    fn list_tables_blocking(&self) -> Vec<TableInfo> {
        match self {
            Subject::Local(s) => s.list_tables_blocking(),
            Subject::Partitioned(p) => p.list_tables_blocking(),
        }
    }
    fn get_blocking(&self, t: &str, pk: &str, rk: &str) -> Result<Option<Entity>> {
        match self {
            Subject::Local(s) => s.get_blocking(t, pk, rk),
            Subject::Partitioned(p) => p.get_blocking(t, pk, rk),
        }
    }
    fn execute_blocking(&self, t: &str, ops: &[Operation]) -> Result<Vec<OpOutcome>> {
        match self {
            Subject::Local(s) => s.execute_blocking(t, ops),
            Subject::Partitioned(p) => p.execute_blocking(t, ops),
        }
    }
    fn query_blocking(&self, t: &str, q: &Query, r: &PageRequest) -> Result<Page> {
        match self {
            Subject::Local(s) => s.query_blocking(t, q, r),
            Subject::Partitioned(p) => p.query_blocking(t, q, r),
        }
    }
    fn table_stats_blocking(&self, t: &str) -> Result<TableStats> {
        match self {
            Subject::Local(s) => s.table_stats_blocking(t),
            Subject::Partitioned(p) => p.table_stats_blocking(t),
        }
    }
    fn partition_stats_blocking(
        &self,
        t: &str,
        lo: Bound<&str>,
        hi: Bound<&str>,
        limit: usize,
    ) -> Result<Vec<PartitionStats>> {
        match self {
            Subject::Local(s) => s.partition_stats_blocking(t, lo, hi, limit),
            Subject::Partitioned(p) => p.partition_stats_blocking(t, lo, hi, limit),
        }
    }
}

struct Harness {
    name: &'static str,
    store: Option<Subject>,
    /// Whether the durable directory holds a partitioned store.
    partitioned: bool,
    dir: Option<tempfile::TempDir>,
    model: [ModelTable; 2],
    /// Current step, for messages.
    step: usize,
}

fn fjall_options() -> StoreOptions {
    StoreOptions {
        durability: Durability::Buffered,
        ..Default::default()
    }
}

impl Harness {
    fn new(name: &'static str, store: Subject, dir: Option<tempfile::TempDir>) -> Self {
        for t in TABLES {
            store.create_table_blocking(t).unwrap();
        }
        Harness {
            name,
            partitioned: matches!(store, Subject::Partitioned(_)),
            store: Some(store),
            dir,
            model: Default::default(),
            step: 0,
        }
    }

    fn memory() -> Self {
        Self::new("memory", Subject::Local(LocalStore::in_memory()), None)
    }

    fn fjall() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path(), fjall_options()).unwrap();
        Self::new("fjall", Subject::Local(store), Some(dir))
    }

    /// fjall with the partition layer in the path: three range partitions
    /// per table on three servers, throttling off.
    fn partitioned() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalStore::open(dir.path(), fjall_options()).unwrap();
        let store = PartitionedStore::new(local, partitioned_config()).unwrap();
        Self::new("partitioned", Subject::Partitioned(store), Some(dir))
    }

    fn store(&self) -> &Subject {
        self.store.as_ref().expect("store is open")
    }

    fn ctx(&self) -> String {
        format!("[{} store, step {}]", self.name, self.step)
    }

    /// Drops the durable store and opens it again from its directory.
    fn reopen(&mut self) {
        if let Some(dir) = &self.dir {
            drop(self.store.take());
            let local = LocalStore::open(dir.path(), fjall_options()).unwrap();
            self.store = Some(if self.partitioned {
                let p = PartitionedStore::new(local, partitioned_config()).unwrap();
                // The persisted partition map comes back with the store.
                for t in TABLES {
                    let ranges: Vec<_> = p
                        .ranges(t)
                        .unwrap()
                        .into_iter()
                        .map(|r| (r.lo, r.server))
                        .collect();
                    let expected: Vec<_> = std::iter::once(("".to_owned(), 0))
                        .chain(SPLITS.iter().map(|(a, s)| (a.to_string(), *s)))
                        .collect();
                    assert_eq!(
                        ranges,
                        expected,
                        "{} partition map after reopen",
                        self.ctx()
                    );
                }
                Subject::Partitioned(p)
            } else {
                Subject::Local(local)
            });
            self.check_all();
        }
    }

    fn run(&mut self, step: &Step) {
        match step {
            Step::Write {
                table,
                alt,
                smart,
                ops,
            } => {
                let ops = self.resolve_batch(*table, *smart, ops);
                self.execute(*table, *alt, ops);
            }
            Step::Big { table, pk, n } => {
                let ops = (0..*n)
                    .map(|i| {
                        Operation::InsertOrMerge(
                            EntityWrite::new(*pk, format!("big{i:03}"))
                                .with("n", Value::Int32(i as i32)),
                        )
                    })
                    .collect();
                self.execute(*table, false, ops);
            }
            Step::Empty { table } => self.execute(*table, false, Vec::new()),
            Step::Get { table, alt, pk, rk } => self.check_get(*table, *alt, pk, rk),
            Step::Query {
                table,
                query,
                page,
                mode,
            } => self.check_query(*table, query, *page, mode),
            Step::Stats {
                table,
                lo,
                hi,
                limit,
            } => {
                self.check_stats(*table);
                self.check_partition_stats(*table, lo, hi, *limit);
            }
            Step::DropRecreate { table } => {
                let s = self.store();
                s.drop_table_blocking(&TABLES[*table].to_ascii_uppercase())
                    .unwrap();
                assert!(
                    matches!(
                        s.table_stats_blocking(TABLES[*table]),
                        Err(StoreError::TableNotFound { .. })
                    ),
                    "{} dropped table still answers",
                    self.ctx()
                );
                s.create_table_blocking(TABLES[*table]).unwrap();
                // Stale ETags from before the drop stay useful as made-up ones.
                self.model[*table].rows.clear();
                self.check_table(*table);
            }
            Step::Check => self.check_all(),
        }
    }

    fn table_name(table: usize, alt: bool) -> String {
        if alt {
            TABLES[table].to_ascii_uppercase()
        } else {
            TABLES[table].to_owned()
        }
    }

    /// Turns a generated operation into a concrete one against this store's
    /// current state (ETags are this store's).
    fn resolve_batch(&self, table: usize, smart: bool, specs: &[OpSpec]) -> Vec<Operation> {
        let rows = &self.model[table].rows;
        let mut taken: BTreeSet<(String, String)> =
            specs.iter().map(|s| (s.pk.clone(), s.rk.clone())).collect();
        specs
            .iter()
            .map(|spec| {
                let mut spec = spec.clone();
                if let Some(ix) = spec.existing {
                    let free: Vec<&(String, String)> = rows
                        .range((spec.pk.clone(), String::new())..)
                        .map(|(k, _)| k)
                        .take_while(|(pk, _)| *pk == spec.pk)
                        .filter(|k| !taken.contains(*k))
                        .collect();
                    if !free.is_empty() {
                        let key = free[ix.index(free.len())].clone();
                        taken.remove(&(spec.pk.clone(), spec.rk.clone()));
                        spec.rk = key.1.clone();
                        taken.insert(key);
                    }
                }
                self.resolve(table, smart, &spec)
            })
            .collect()
    }

    fn resolve(&self, table: usize, smart: bool, spec: &OpSpec) -> Operation {
        let t = &self.model[table];
        let key = (spec.pk.clone(), spec.rk.clone());
        let cur = t.rows.get(&key);
        let mut kind = spec.kind;
        let mut im = spec.if_match.clone();
        if smart {
            kind = match (kind, cur.is_some()) {
                (Kind::Insert, true) => Kind::Merge,
                (Kind::Replace | Kind::Merge | Kind::Delete, false) => Kind::Insert,
                (k, _) => k,
            };
            if matches!(im, IfMatchSpec::Stale(_) | IfMatchSpec::Bogus(_)) {
                im = IfMatchSpec::Current;
            }
        }
        let if_match = match im {
            IfMatchSpec::Any => IfMatch::Any,
            IfMatchSpec::Current => {
                IfMatch::ETag(cur.map_or_else(|| bogus_etag(0), |c| c.etag.clone()))
            }
            IfMatchSpec::Stale(ix) => {
                let own = t.history.get(&key).filter(|h| !h.is_empty());
                let pool: Vec<&ETag> = match own {
                    Some(h) => h.iter().collect(),
                    None => t.history.values().flatten().collect(),
                };
                IfMatch::ETag(if pool.is_empty() {
                    bogus_etag(1)
                } else {
                    pool[ix.index(pool.len())].clone()
                })
            }
            IfMatchSpec::Bogus(n) => IfMatch::ETag(bogus_etag(n)),
        };
        let w = EntityWrite {
            partition_key: spec.pk.clone(),
            row_key: spec.rk.clone(),
            properties: spec.props.clone(),
        };
        match kind {
            Kind::Insert => Operation::Insert(w),
            Kind::Replace => Operation::Replace {
                entity: w,
                if_match,
            },
            Kind::Merge => Operation::Merge {
                entity: w,
                if_match,
            },
            Kind::InsertOrReplace => Operation::InsertOrReplace(w),
            Kind::InsertOrMerge => Operation::InsertOrMerge(w),
            Kind::Delete => Operation::Delete {
                partition_key: spec.pk.clone(),
                row_key: spec.rk.clone(),
                if_match,
            },
        }
    }

    /// Runs an EGT on the store and on the model and compares everything.
    fn execute(&mut self, table: usize, alt: bool, ops: Vec<Operation>) {
        let ctx = self.ctx();
        let predicted = predict(&self.model[table], &ops);
        let result = self
            .store()
            .execute_blocking(&Self::table_name(table, alt), &ops);
        match (predicted, result) {
            (Ok(plan), Ok(outcomes)) => {
                assert_eq!(
                    outcomes.len(),
                    plan.len(),
                    "{ctx} one outcome per operation: {ops:#?}"
                );
                let m = &mut self.model[table];
                for (i, (p, o)) in plan.into_iter().zip(outcomes).enumerate() {
                    assert_eq!(
                        o.existed,
                        p.before.is_some(),
                        "{ctx} op {i} `existed` of {:?}",
                        ops[i]
                    );
                    let key = (p.pk.clone(), p.rk.clone());
                    match (p.after, o.into_entity(&ops[i])) {
                        (Some(props), Some(e)) => {
                            assert_eq!(
                                (&e.partition_key, &e.row_key, &e.properties),
                                (&p.pk, &p.rk, &props),
                                "{ctx} op {i} outcome of {:?}",
                                ops[i]
                            );
                            if let Some(b) = &p.before {
                                assert!(
                                    e.timestamp > b.ts,
                                    "{ctx} op {i}: Timestamp {:?} not after the previous {:?}",
                                    e.timestamp,
                                    b.ts
                                );
                                assert_ne!(e.etag(), b.etag, "{ctx} op {i}: ETag did not change");
                            }
                            let etag = e.etag();
                            m.rows.insert(
                                key.clone(),
                                ModelEntity {
                                    props,
                                    ts: e.timestamp,
                                    etag,
                                },
                            );
                        }
                        (None, None) => {
                            m.rows.remove(&key);
                        }
                        (after, got) => panic!(
                            "{ctx} op {i} {:?}: model expects {after:?}, store returned {got:?}",
                            ops[i]
                        ),
                    }
                    if let Some(b) = p.before {
                        m.history.entry(key).or_default().push(b.etag);
                    }
                }
            }
            (Err(expect), Err(err)) => check_error(&ctx, &ops, &expect, &err),
            (Ok(_), Err(err)) => {
                panic!("{ctx} store failed an EGT the model accepts: {err:?}\n{ops:#?}")
            }
            (Err(expect), Ok(out)) => panic!(
                "{ctx} store accepted an EGT the model rejects with {expect:?}\n{ops:#?}\noutcomes: {out:#?}"
            ),
        }
        // Atomicity and the new state, key by key (any spelling of the table).
        for op in &ops {
            let (pk, rk, _) = op_parts(op);
            self.check_get(table, !alt, pk, rk);
        }
        self.check_stats(table);
    }

    fn check_get(&self, table: usize, alt: bool, pk: &str, rk: &str) {
        let got = self
            .store()
            .get_blocking(&Self::table_name(table, alt), pk, rk)
            .unwrap();
        assert_eq!(
            got,
            self.model[table].entity(pk, rk),
            "{} get({pk:?}, {rk:?}) in {}",
            self.ctx(),
            TABLES[table]
        );
    }

    /// Reads a query to the end in pages of `page_size` and compares the
    /// concatenation with the model's brute-force answer.
    fn check_query(&self, table: usize, query: &Query, page_size: usize, mode: &PageMode) {
        let ctx = self.ctx();
        let m = &self.model[table];
        let expected: Vec<Entity> = m
            .rows
            .iter()
            .filter(|((pk, rk), _)| {
                query
                    .spans
                    .iter()
                    .any(|b| in_interval(&b.pk, pk) && in_interval(&b.rk, rk))
            })
            .map(|((pk, rk), e)| to_entity(pk, rk, e))
            .filter(|e| query.filter.as_ref().is_none_or(|f| f.matches(e)))
            .map(|mut e| {
                if let Some(p) = &query.projection {
                    e.properties.retain(|name, _| p.contains(name));
                }
                e
            })
            .collect();

        let to_scan = m
            .rows
            .keys()
            .filter(|(pk, rk)| scanned_by(&query.spans, pk, rk))
            .count() as u64;
        let mut scanned = 0u64;
        let mut got: Vec<Entity> = Vec::new();
        let mut req = PageRequest::first(page_size);
        if let PageMode::ZeroBudget = mode {
            req.time_budget = std::time::Duration::ZERO;
        }
        let stops: &[String] = match mode {
            PageMode::Stops(s) => s,
            _ => &[],
        };
        // Index of the boundary the current page must stop at.
        let mut stop = 0usize;
        let mut pages = 0usize;
        loop {
            req.stop_at_partition = stops.get(stop).cloned();
            // Tokens are bound to the query, not to the table name's case.
            let name = Self::table_name(table, pages % 2 == 1);
            // Undecoded pages (what the native path reads) must hold the
            // same entities: every other page, varied by the page size.
            req.encoded = (pages + page_size).is_multiple_of(2);
            let mut page = self
                .store()
                .query_blocking(&name, query, &req)
                .unwrap_or_else(|e| panic!("{ctx} page {pages} of {query:#?}: {e}"));
            if req.encoded {
                assert!(page.entities.is_empty(), "{ctx} decoded an encoded page");
                page.entities = std::mem::take(&mut page.encoded)
                    .iter()
                    .map(|e| {
                        let mut e = e.decode().expect("stored entities decode");
                        if let Some(p) = &query.projection {
                            e.properties.retain(|name, _| p.contains(name));
                        }
                        e
                    })
                    .collect();
            }
            assert!(
                page.entities.len() <= page_size,
                "{ctx} page {pages} has {} entities, more than {page_size}",
                page.entities.len()
            );
            assert!(
                page.scanned >= page.entities.len() as u64,
                "{ctx} page {pages} scanned {} < returned {}",
                page.scanned,
                page.entities.len()
            );
            if let Some(b) = &req.stop_at_partition {
                assert!(
                    page.entities.iter().all(|e| e.partition_key < *b),
                    "{ctx} page {pages} crossed the partition stop {b:?}: {:?}",
                    page.entities
                );
            }
            // A page that ends before it is full with a token ended at the
            // stop (budgets never run out in Stops mode): the next page
            // belongs to the next range partition.
            let clipped = page.continuation.is_some() && page.entities.len() < page_size;
            // The partition layer also ends pages at its server boundaries.
            let boundaries = if self.partitioned { SPLITS.len() } else { 0 };
            scanned += page.scanned;
            got.extend(page.entities);
            pages += 1;
            assert!(
                pages <= expected.len() + m.rows.len() + stops.len() + boundaries + 2,
                "{ctx} {pages} pages of {page_size} for {} entities: {query:#?}",
                expected.len()
            );
            match page.continuation {
                Some(token) => {
                    if pages == 1 {
                        // A token does not resume a different query.
                        let mut other = query.clone();
                        other.spans.push(KeyBox::point("zzz", "zzz"));
                        let err = self
                            .store()
                            .query_blocking(&name, &other, &req.resume(token.clone()))
                            .expect_err("a token resumed another query");
                        assert!(
                            matches!(err, StoreError::InvalidContinuationToken { .. }),
                            "{ctx} {err:?}"
                        );
                    }
                    if clipped && !stops.is_empty() {
                        assert!(
                            stop < stops.len() + boundaries,
                            "{ctx} a token after the last stop was passed"
                        );
                        stop += 1;
                    }
                    req = req.resume(token);
                }
                None => break,
            }
        }
        // Scans resume where the last page ended, so over all pages every
        // entity of the covering ranges is read exactly once.
        assert_eq!(
            scanned, to_scan,
            "{ctx} entities scanned over all pages of {query:#?}"
        );
        if got != expected {
            let keys = |v: &[Entity]| -> Vec<(String, String)> {
                v.iter()
                    .map(|e| (e.partition_key.clone(), e.row_key.clone()))
                    .collect()
            };
            panic!(
                "{ctx} query on {} in pages of {page_size} differs from the model\nquery: {query:#?}\nstore keys: {:?}\nmodel keys: {:?}\nstore: {got:#?}\nmodel: {expected:#?}",
                TABLES[table],
                keys(&got),
                keys(&expected)
            );
        }
    }

    fn check_stats(&self, table: usize) {
        let m = &self.model[table];
        let stats = self.store().table_stats_blocking(TABLES[table]).unwrap();
        assert_eq!(
            stats,
            TableStats {
                entities: m.rows.len() as u64,
                partitions: m.partitions().len() as u64,
                bytes: Some(
                    m.rows
                        .iter()
                        .map(|((pk, rk), e)| {
                            stored_len(pk, rk, e.props.iter().map(|(k, v)| (k.as_str(), v)))
                        })
                        .sum()
                ),
            },
            "{} table_stats of {}",
            self.ctx(),
            TABLES[table]
        );
    }

    fn check_partition_stats(
        &self,
        table: usize,
        lo: &Bound<String>,
        hi: &Bound<String>,
        limit: usize,
    ) {
        let expected: Vec<PartitionStats> = self.model[table]
            .partitions()
            .into_iter()
            .filter(|(pk, _)| in_bounds(lo, hi, pk))
            .take(limit)
            .map(|(partition_key, entities)| PartitionStats {
                partition_key,
                entities,
            })
            .collect();
        let got = self
            .store()
            .partition_stats_blocking(
                TABLES[table],
                lo.as_ref().map(String::as_str),
                hi.as_ref().map(String::as_str),
                limit,
            )
            .unwrap();
        assert_eq!(
            got,
            expected,
            "{} partition_stats({lo:?}, {hi:?}, {limit}) of {}",
            self.ctx(),
            TABLES[table]
        );
    }

    fn check_table(&self, table: usize) {
        self.check_query(table, &Query::full_scan(), 1000, &PageMode::Plain);
        self.check_stats(table);
        self.check_partition_stats(table, &Bound::Unbounded, &Bound::Unbounded, usize::MAX);
    }

    fn check_all(&self) {
        let names: Vec<String> = self
            .store()
            .list_tables_blocking()
            .into_iter()
            .map(|t| t.name)
            .collect();
        let mut want: Vec<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
        want.sort();
        assert_eq!(names, want, "{} list_tables", self.ctx());
        for t in 0..TABLES.len() {
            self.check_table(t);
        }
    }
}

/// Compares a store error with the model's expectation.
fn check_error(ctx: &str, ops: &[Operation], expect: &Expect, err: &StoreError) {
    let keys = |i: usize| {
        let (pk, rk, _) = op_parts(&ops[i]);
        (pk.to_owned(), rk.to_owned())
    };
    let fail = || panic!("{ctx} model expects {expect:?}, store returned {err:?}\n{ops:#?}");
    match (expect, err) {
        (Expect::Empty, StoreError::EmptyBatch) => {}
        (Expect::TooMany(n), StoreError::BatchTooManyOperations { count, limit }) => {
            assert_eq!((*count, *limit), (*n, 100), "{ctx}");
        }
        (
            Expect::Cross(i),
            StoreError::BatchCrossPartition {
                index,
                expected,
                found,
            },
        ) => {
            assert_eq!(
                (index, expected, found),
                (i, &keys(0).0, &keys(*i).0),
                "{ctx} {err:?}"
            );
        }
        (
            Expect::Dup(i),
            StoreError::BatchDuplicateEntity {
                index,
                partition_key,
                row_key,
            },
        ) => {
            assert_eq!(
                (*index, partition_key.clone(), row_key.clone()),
                (*i, keys(*i).0, keys(*i).1),
                "{ctx} {err:?}"
            );
        }
        (Expect::Failed(i, root), StoreError::BatchOperationFailed { index, .. }) => {
            if index != i {
                fail();
            }
            let (pk, rk) = keys(*i);
            match (root, err.root()) {
                (
                    Root::Exists,
                    StoreError::EntityAlreadyExists {
                        partition_key,
                        row_key,
                    },
                )
                | (
                    Root::NotFound,
                    StoreError::EntityNotFound {
                        partition_key,
                        row_key,
                    },
                ) => assert_eq!((partition_key, row_key), (&pk, &rk), "{ctx} {err:?}"),
                (
                    Root::Mismatch { expected, actual },
                    StoreError::ETagMismatch {
                        partition_key,
                        row_key,
                        expected: e,
                        actual: a,
                    },
                ) => assert_eq!(
                    (partition_key, row_key, e, a),
                    (&pk, &rk, &expected.0, &actual.0),
                    "{ctx} {err:?}"
                ),
                (
                    Root::ForbiddenKey { kind, ch, position },
                    StoreError::ForbiddenKeyCharacter {
                        kind: k,
                        ch: c,
                        position: p,
                    },
                ) => assert_eq!((kind, ch, position), (k, c, p), "{ctx} {err:?}"),
                (Root::BadName(n), StoreError::InvalidPropertyName { name, .. }) => {
                    assert_eq!(n, name, "{ctx} {err:?}");
                }
                (Root::DateRange(n, t), StoreError::DateTimeOutOfRange { property, micros }) => {
                    assert_eq!((n, t), (property, micros), "{ctx} {err:?}");
                }
                _ => fail(),
            }
        }
        _ => fail(),
    }
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default_cases),
        // No regression files next to the sources; a failure prints its
        // minimal case.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs `steps` on both stores in lockstep, reopening the durable one before
/// step `reopen_at` (or after the last step), then compares everything.
fn run_both(steps: &[Step], reopen_at: usize) {
    let mut stores = [Harness::memory(), Harness::fjall(), Harness::partitioned()];
    for (i, step) in steps.iter().enumerate() {
        for h in &mut stores {
            h.step = i;
            if i == reopen_at {
                h.reopen();
            }
            h.run(step);
        }
    }
    for h in &mut stores {
        h.step = steps.len();
        if reopen_at >= steps.len() {
            h.reopen();
        }
        h.check_all();
    }
}

/// Steps that fill both tables first, one InsertOrReplace EGT per partition,
/// so that updates, deletes, If-Match and multi-page queries have something
/// to work on.
fn population() -> impl Strategy<Value = Vec<Step>> {
    let big = proptest::option::weighted(0.25, (table(), select(PKS), 65usize..=100));
    (vec((table(), pk(), rk(), props()), 0..48), big).prop_map(|(rows, big)| {
        let mut groups: BTreeMap<(usize, String), BTreeMap<String, _>> = BTreeMap::new();
        for (table, pk, rk, props) in rows {
            groups.entry((table, pk)).or_default().insert(rk, props);
        }
        groups
            .into_iter()
            .map(|((table, pk), rows)| Step::Write {
                table,
                alt: false,
                smart: false,
                ops: rows
                    .into_iter()
                    .map(|(rk, props)| OpSpec {
                        kind: Kind::InsertOrReplace,
                        pk: pk.clone(),
                        rk,
                        props,
                        if_match: IfMatchSpec::Any,
                        existing: None,
                    })
                    .collect(),
            })
            // A partition big enough for the store's time-budget checks (every
            // 64 entities scanned) to end pages.
            .chain(big.map(|(table, pk, n)| Step::Big { table, pk, n }))
            .collect()
    })
}

proptest! {
    #![proptest_config(config(64))]

    /// Random sequences of writes, EGTs, reads, paged queries, statistics,
    /// drop/recreate and one reopen, after a random population: both stores
    /// agree with the model at every step.
    #[test]
    fn stores_agree_with_model(
        population in population(),
        steps in vec(step(), 1..=40),
        reopen_at in any::<Index>(),
    ) {
        let at = population.len() + reopen_at.index(steps.len() + 1);
        let all: Vec<Step> = population.into_iter().chain(steps).collect();
        run_both(&all, at);
    }

    /// A populated store and many paged queries: more query shapes per case
    /// than the mixed sequence reaches.
    #[test]
    fn paged_queries_agree_with_model(
        population in population(),
        queries in vec((table(), query(), page_size(), page_mode()), 1..16),
    ) {
        let steps: Vec<Step> = population
            .into_iter()
            .chain(
                queries
                    .into_iter()
                    .map(|(table, query, page, mode)| Step::Query { table, query, page, mode }),
            )
            .collect();
        run_both(&steps, usize::MAX);
    }
}

/// `partition_stats` over an empty PartitionKey range (lo above hi, or
/// `(a, a)` exclusive) counts no partitions, on every engine — the property
/// above generates such bounds too; this is its smallest case.
#[test]
fn partition_stats_of_an_empty_key_range_is_empty() {
    for h in [Harness::memory(), Harness::fjall(), Harness::partitioned()] {
        let s = h.store();
        s.execute_blocking(TABLES[0], &[Operation::Insert(EntityWrite::new("a", "x"))])
            .unwrap();
        for (lo, hi) in [
            (Bound::Included("b"), Bound::Included("a")),
            (Bound::Excluded("a"), Bound::Excluded("a")),
            (Bound::Excluded("a"), Bound::Included("a")),
            (Bound::Included("a"), Bound::Excluded("a")),
        ] {
            let got = s.partition_stats_blocking(TABLES[0], lo, hi, usize::MAX);
            assert!(
                matches!(&got, Ok(v) if v.is_empty()),
                "{}: partition_stats({lo:?}, {hi:?}) = {got:?}",
                h.name
            );
        }
    }
}
