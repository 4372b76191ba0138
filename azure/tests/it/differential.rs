//! Differential property test: the embedded store and Azurite (through
//! `AzureStore`) given the same random operations must agree.
//!
//! A case is a sequence of up to 25 steps on a small key space (2
//! PartitionKeys × 4 RowKeys, with a quote, a space, non-ASCII and the empty
//! RowKey) and three properties, each with one EDM type (`n` Int32, `s`
//! String, `d` Double): single writes and small EGTs of every operation
//! kind, with If-Match `*`, an ETag read just before (from each store
//! separately: ETags differ between stores), or an ETag remembered from an
//! earlier read step (stale once the entity was written since, on both
//! stores alike); occasionally a malformed EGT (cross-partition or the same
//! entity twice). After every step: Ok on both or an error on both with the
//! same root kind and failing index, and for Oks the same resulting entities
//! (keys and properties; `existed` too, except for InsertOrReplace, which
//! the service does not report). Read and scan steps compare what each store
//! holds. At the end a full scan and a few random queries (key spans, And /
//! Or / Not / In / comparisons on `n` with Int32 constants, `s` with
//! strings, `d` with doubles and the keys, random page sizes) must return the
//! same entities on both, and exactly those [`Query::selects`] picks from the
//! full scan. Timestamps and ETags are never compared across stores.
//!
//! `PROPTEST_CASES=<n>` sets the number of cases (default 16).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::OnceLock;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use tablegate_store::{
    CmpOp, ETag, Entity, EntityWrite, Field, Filter, IfMatch, KeyBox, KeyInterval, LocalStore,
    Operation, Query, StoreError, TableStore, Value,
};

use crate::conformance::{failed_at, scan};

const PKS: [&str; 2] = ["a", "b'c"];
const RKS: [&str; 4] = ["", "1", "x y", "é"];
const STRINGS: &[&str] = &["", "a", "B", "it's", "é", "a b"];
const DOUBLES: &[f64] = &[0.0, -1.5, 2.0, 0.1, 1e10, f64::INFINITY];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Insert,
    Replace,
    Merge,
    InsertOrReplace,
    InsertOrMerge,
    Delete,
}

/// Where an If-Match comes from, resolved on each store separately.
#[derive(Debug, Clone, Copy)]
enum Tag {
    /// `*`.
    Any,
    /// The ETag of a read made just before the write (`*` if missing).
    Fresh,
    /// The ETag of the key's last Read step (`*` if none).
    Remembered,
    /// A stale ETag: read, then the entity is touched (an InsertOrMerge
    /// without properties, on each store alike) before the write (`*` if
    /// missing).
    Stale,
}

#[derive(Debug, Clone)]
struct OpSpec {
    kind: Kind,
    rk: usize,
    /// Properties written: `None` is NULL; absent names are not written.
    props: Vec<(&'static str, Option<Value>)>,
    tag: Tag,
}

#[derive(Debug, Clone, Copy)]
enum Defect {
    None,
    /// The last operation moves to the other PartitionKey.
    Cross,
    /// The first operation is repeated at the end.
    Dup,
}

#[derive(Debug, Clone)]
enum Step {
    /// An EGT in partition `pk` (one operation: a single write).
    Write {
        pk: usize,
        ops: Vec<OpSpec>,
        defect: Defect,
    },
    /// A point read on both; remembers each store's ETag for the key.
    Read { pk: usize, rk: usize },
    /// A full scan in pages of `page` on both.
    Scan { page: usize },
}

fn value_of(name: &str) -> BoxedStrategy<Value> {
    match name {
        "n" => prop_oneof![
            4 => -3i32..=3,
            1 => Just(i32::MIN),
            1 => Just(i32::MAX),
        ]
        .prop_map(Value::Int32)
        .boxed(),
        "s" => select(STRINGS)
            .prop_map(|s| Value::String(s.to_owned()))
            .boxed(),
        _ => select(DOUBLES).prop_map(Value::Double).boxed(),
    }
}

/// One property of a write: absent, NULL or a value.
fn prop_of(name: &'static str) -> impl Strategy<Value = Option<(&'static str, Option<Value>)>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some((name, None))),
        4 => value_of(name).prop_map(move |v| Some((name, Some(v)))),
    ]
}

fn op_body() -> impl Strategy<Value = (Kind, Vec<(&'static str, Option<Value>)>, Tag)> {
    // Weighted towards writes that succeed, so the table fills.
    let kind = prop_oneof![
        2 => Just(Kind::Insert),
        2 => Just(Kind::Replace),
        2 => Just(Kind::Merge),
        3 => Just(Kind::InsertOrReplace),
        3 => Just(Kind::InsertOrMerge),
        1 => Just(Kind::Delete),
    ];
    let tag = prop_oneof![
        3 => Just(Tag::Any),
        3 => Just(Tag::Fresh),
        2 => Just(Tag::Remembered),
        1 => Just(Tag::Stale),
    ];
    (kind, prop_of("n"), prop_of("s"), prop_of("d"), tag)
        .prop_map(|(kind, n, s, d, tag)| (kind, [n, s, d].into_iter().flatten().collect(), tag))
}

fn write_step() -> impl Strategy<Value = Step> {
    let size = prop_oneof![3 => Just(1usize), 2 => 2usize..=3];
    let defect = prop_oneof![
        18 => Just(Defect::None),
        1 => Just(Defect::Cross),
        1 => Just(Defect::Dup),
    ];
    (0..PKS.len(), size, defect).prop_flat_map(|(pk, n, defect)| {
        (
            subsequence((0..RKS.len()).collect::<Vec<_>>(), n),
            vec(op_body(), n),
        )
            .prop_map(move |(rks, bodies)| Step::Write {
                pk,
                ops: rks
                    .into_iter()
                    .zip(bodies)
                    .map(|(rk, (kind, props, tag))| OpSpec {
                        kind,
                        rk,
                        props,
                        tag,
                    })
                    .collect(),
                defect,
            })
    })
}

/// Each case starts by filling a random part of both partitions (one
/// InsertOrReplace EGT each), so updates, deletes and queries find
/// something.
fn population() -> impl Strategy<Value = Vec<Step>> {
    let fill = |pk: usize| {
        (
            subsequence((0..RKS.len()).collect::<Vec<_>>(), 0..=RKS.len()),
            vec((prop_of("n"), prop_of("s"), prop_of("d")), RKS.len()),
        )
            .prop_map(move |(rks, props)| Step::Write {
                pk,
                ops: rks
                    .into_iter()
                    .zip(props)
                    .map(|(rk, (n, s, d))| OpSpec {
                        kind: Kind::InsertOrReplace,
                        rk,
                        props: [n, s, d].into_iter().flatten().collect(),
                        tag: Tag::Any,
                    })
                    .collect(),
                defect: Defect::None,
            })
    };
    (fill(0), fill(1)).prop_map(|(a, b)| {
        [a, b]
            .into_iter()
            .filter(|s| matches!(s, Step::Write { ops, .. } if !ops.is_empty()))
            .collect()
    })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => write_step(),
        3 => (0..PKS.len(), 0..RKS.len()).prop_map(|(pk, rk)| Step::Read { pk, rk }),
        1 => select(&[1usize, 3, 1000][..]).prop_map(|page| Step::Scan { page }),
    ]
}

/// A comparison leaf of a random filter.
fn leaf() -> impl Strategy<Value = Filter> {
    let op = select(&CmpOp::ALL[..]);
    let strings = || select(STRINGS).prop_map(|s| Value::String(s.to_owned()));
    prop_oneof![
        3 => (op.clone(), -4i32..=4)
            .prop_map(|(op, c)| Filter::cmp(Field::prop("n"), op, Value::Int32(c))),
        2 => (op.clone(), strings())
            .prop_map(|(op, c)| Filter::cmp(Field::prop("s"), op, c)),
        1 => (op.clone(), select(DOUBLES))
            .prop_map(|(op, c)| Filter::cmp(Field::prop("d"), op, Value::Double(c))),
        1 => (op.clone(), select(&RKS[..]))
            .prop_map(|(op, c)| Filter::cmp(Field::RowKey, op, Value::String(c.to_owned()))),
        1 => (op, select(&PKS[..]))
            .prop_map(|(op, c)| Filter::cmp(Field::PartitionKey, op, Value::String(c.to_owned()))),
        1 => vec(-4i32..=4, 1..=3).prop_map(|cs| Filter::In {
            field: Field::prop("n"),
            values: cs.into_iter().map(Value::Int32).collect(),
        }),
        1 => vec(strings(), 1..=3).prop_map(|values| Filter::In {
            field: Field::prop("s"),
            values,
        }),
        1 => select(&["n", "s", "d"][..]).prop_map(|p| Filter::IsNull(Field::prop(p))),
    ]
}

fn filter() -> impl Strategy<Value = Filter> {
    leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 2..=3).prop_map(Filter::And),
            vec(inner.clone(), 2..=3).prop_map(Filter::Or),
            inner.prop_map(|f| Filter::Not(Box::new(f))),
        ]
    })
}

fn interval(keys: &'static [&'static str]) -> impl Strategy<Value = KeyInterval> {
    let bound = || {
        prop_oneof![
            1 => Just(Bound::Unbounded),
            2 => select(keys).prop_map(|k| Bound::Included(k.to_owned())),
            2 => select(keys).prop_map(|k| Bound::Excluded(k.to_owned())),
        ]
    };
    prop_oneof![
        2 => Just(KeyInterval::all()),
        2 => select(keys).prop_map(KeyInterval::point),
        2 => (bound(), bound()).prop_map(|(lo, hi)| KeyInterval::new(lo, hi)),
    ]
}

fn key_box() -> impl Strategy<Value = KeyBox> {
    (interval(&PKS), interval(&RKS)).prop_map(|(pk, rk)| KeyBox { pk, rk })
}

fn query() -> impl Strategy<Value = (Query, usize)> {
    (
        vec(key_box(), 1..=2),
        proptest::option::weighted(0.85, filter()),
        proptest::option::weighted(0.2, subsequence(vec!["n", "s", "d", "zz"], 1..=2)),
        select(&[1usize, 2, 5, 1000][..]),
    )
        .prop_map(|(spans, filter, projection, page)| {
            let q = Query {
                spans,
                filter,
                projection: projection.map(|p| p.into_iter().map(str::to_owned).collect()),
            };
            (q, page)
        })
}

// ---- running ------------------------------------------------------------------

/// One store under test with its remembered ETags.
struct Side<'a> {
    name: &'static str,
    store: &'a dyn TableStore,
    table: &'a str,
    remembered: HashMap<(usize, usize), ETag>,
}

impl Side<'_> {
    async fn if_match(&self, tag: Tag, pk: usize, rk: usize) -> IfMatch {
        match tag {
            Tag::Any => IfMatch::Any,
            Tag::Fresh => match self.get(PKS[pk], RKS[rk]).await {
                Some(e) => IfMatch::ETag(e.etag()),
                None => IfMatch::Any,
            },
            Tag::Remembered => self
                .remembered
                .get(&(pk, rk))
                .map_or(IfMatch::Any, |t| IfMatch::ETag(t.clone())),
            Tag::Stale => match self.get(PKS[pk], RKS[rk]).await {
                Some(e) => {
                    let touch = Operation::InsertOrMerge(EntityWrite::new(PKS[pk], RKS[rk]));
                    self.store
                        .execute(self.table, vec![touch].into())
                        .await
                        .unwrap_or_else(|e| panic!("{}: touch: {e}", self.name));
                    IfMatch::ETag(e.etag())
                }
                None => IfMatch::Any,
            },
        }
    }

    async fn get(&self, pk: &str, rk: &str) -> Option<Entity> {
        self.store
            .get(self.table, pk, rk)
            .await
            .unwrap_or_else(|e| panic!("{}: get ({pk:?}, {rk:?}): {e}", self.name))
    }

    async fn write(
        &self,
        pk: usize,
        specs: &[OpSpec],
        defect: Defect,
    ) -> Result<Vec<Outcome>, StoreError> {
        let mut ops = Vec::with_capacity(specs.len() + 1);
        for (i, spec) in specs.iter().enumerate() {
            let pk = match defect {
                Defect::Cross if i + 1 == specs.len() && specs.len() > 1 => 1 - pk,
                _ => pk,
            };
            ops.push(self.operation(pk, spec).await);
        }
        if let Defect::Dup = defect {
            let again = OpSpec {
                kind: Kind::InsertOrMerge,
                ..specs[0].clone()
            };
            ops.push(self.operation(pk, &again).await);
        }
        let ops: std::sync::Arc<[Operation]> = ops.into();
        let out = self.store.execute(self.table, ops.clone()).await?;
        Ok(out
            .into_iter()
            .zip(ops.iter())
            .map(|(o, op)| Outcome {
                existed: o.existed,
                entity: o.into_entity(op),
            })
            .collect())
    }

    async fn operation(&self, pk: usize, spec: &OpSpec) -> Operation {
        let mut w = EntityWrite::new(PKS[pk], RKS[spec.rk]);
        for (k, v) in &spec.props {
            w.properties.insert((*k).to_owned(), v.clone());
        }
        let if_match = || self.if_match(spec.tag, pk, spec.rk);
        match spec.kind {
            Kind::Insert => Operation::Insert(w),
            Kind::InsertOrReplace => Operation::InsertOrReplace(w),
            Kind::InsertOrMerge => Operation::InsertOrMerge(w),
            Kind::Replace => Operation::Replace {
                entity: w,
                if_match: if_match().await,
            },
            Kind::Merge => Operation::Merge {
                entity: w,
                if_match: if_match().await,
            },
            Kind::Delete => Operation::Delete {
                partition_key: w.partition_key,
                row_key: w.row_key,
                if_match: if_match().await,
            },
        }
    }
}

/// Keys and properties: what must agree across stores.
type Row = (String, String, std::collections::BTreeMap<String, Value>);

fn rows(es: &[Entity]) -> Vec<Row> {
    es.iter()
        .map(|e| {
            (
                e.partition_key.clone(),
                e.row_key.clone(),
                e.properties.clone(),
            )
        })
        .collect()
}

/// An operation's outcome with the entity it left (as RETURNING sees it).
#[derive(Debug)]
struct Outcome {
    existed: bool,
    entity: Option<Entity>,
}

fn compare_results(
    ctx: &str,
    kinds: &[Kind],
    local: &Result<Vec<Outcome>, StoreError>,
    azure: &Result<Vec<Outcome>, StoreError>,
) {
    match (local, azure) {
        (Ok(l), Ok(a)) => {
            assert_eq!(l.len(), a.len(), "{ctx}");
            for (i, (l, a)) in l.iter().zip(a).enumerate() {
                assert_eq!(
                    l.entity.as_ref().map(|e| rows(std::slice::from_ref(e))),
                    a.entity.as_ref().map(|e| rows(std::slice::from_ref(e))),
                    "{ctx}: outcome {i}"
                );
                if kinds.get(i) != Some(&Kind::InsertOrReplace) {
                    assert_eq!(l.existed, a.existed, "{ctx}: existed of outcome {i}");
                }
            }
        }
        (Err(l), Err(a)) => {
            assert_eq!(
                std::mem::discriminant(l.root()),
                std::mem::discriminant(a.root()),
                "{ctx}: different errors\n  local: {l:?}\n  azure: {a:?}"
            );
            assert_eq!(
                failed_at(l),
                failed_at(a),
                "{ctx}: different failing operations\n  local: {l:?}\n  azure: {a:?}"
            );
        }
        _ => panic!("{ctx}: one store failed\n  local: {local:?}\n  azure: {azure:?}"),
    }
}

async fn run_case(steps: Vec<Step>, queries: Vec<(Query, usize)>) {
    let azure = crate::azurite::store().await;
    let local = LocalStore::in_memory();
    let table = crate::azurite::table_name("diff");
    local.create_table(&table).await.unwrap();
    azure.create_table(&table).await.unwrap();
    let mut l = Side {
        name: "local",
        store: &local,
        table: &table,
        remembered: HashMap::new(),
    };
    let mut a = Side {
        name: "azure",
        store: &azure,
        table: &table,
        remembered: HashMap::new(),
    };
    for (i, step) in steps.iter().enumerate() {
        let ctx = format!("step {i} {step:?}");
        match step {
            Step::Write { pk, ops, defect } => {
                let lr = l.write(*pk, ops, *defect).await;
                let ar = a.write(*pk, ops, *defect).await;
                let kinds: Vec<Kind> = ops.iter().map(|o| o.kind).collect();
                compare_results(&ctx, &kinds, &lr, &ar);
            }
            Step::Read { pk, rk } => {
                let le = l.get(PKS[*pk], RKS[*rk]).await;
                let ae = a.get(PKS[*pk], RKS[*rk]).await;
                assert_eq!(
                    le.as_ref().map(|e| rows(std::slice::from_ref(e))),
                    ae.as_ref().map(|e| rows(std::slice::from_ref(e))),
                    "{ctx}"
                );
                for (side, e) in [(&mut l, le), (&mut a, ae)] {
                    match e {
                        Some(e) => side.remembered.insert((*pk, *rk), e.etag()),
                        None => side.remembered.remove(&(*pk, *rk)),
                    };
                }
            }
            Step::Scan { page } => {
                let q = Query::full_scan();
                assert_eq!(
                    rows(&scan(&local, &table, &q, *page).await),
                    rows(&scan(&azure, &table, &q, *page).await),
                    "{ctx}"
                );
            }
        }
    }

    let full = scan(&local, &table, &Query::full_scan(), 1000).await;
    assert_eq!(
        rows(&full),
        rows(&scan(&azure, &table, &Query::full_scan(), 1000).await),
        "final full scan"
    );
    for (q, page) in &queries {
        let want: Vec<Row> = full
            .iter()
            .filter(|e| q.selects(e))
            .map(|e| {
                let mut e = e.clone();
                if let Some(p) = &q.projection {
                    e.properties.retain(|k, _| p.contains(k));
                }
                e
            })
            .map(|e| rows(std::slice::from_ref(&e)).remove(0))
            .collect();
        let lq = rows(&scan(&local, &table, q, *page).await);
        let aq = rows(&scan(&azure, &table, q, *page).await);
        assert_eq!(lq, want, "local, query {q:?} in pages of {page}");
        assert_eq!(
            aq,
            want,
            "azure, query {q:?} in pages of {page}\n{}",
            odata(q)
        );
    }
    azure.drop_table(&table).await.unwrap();
}

fn odata(q: &Query) -> String {
    format!(
        "{:?}",
        tablegate_azure::odata::translate(q, tablegate_azure::Service::Storage)
    )
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_cases),
        // No regression files next to the sources; a failure prints its
        // minimal case. Shrinking talks to Azurite: keep it bounded.
        failure_persistence: None,
        max_shrink_iters: 512,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// Random single writes and EGTs on both stores agree step by step,
    /// and so do the final full scan and random filtered, paged queries.
    #[test]
    fn local_and_azure_agree(
        population in population(),
        steps in vec(step(), 1..=25),
        queries in vec(query(), 3..=5),
    ) {
        let steps = population.into_iter().chain(steps).collect();
        runtime().block_on(run_case(steps, queries));
    }
}
