//! Differential test: for random predicates over random data, the native
//! path (classification, key spans, residual filter, paging) returns exactly
//! what a brute-force evaluation over all rows returns, in clustered-key
//! order. The evaluator here is written independently of the planner and
//! the store: SQL three-valued logic, ordinal string order, its own LIKE.

use arrow_array::cast::AsArray;
use tablegate_planner::{ExecOptions, Plan, Planner};
use tablegate_store::{EntityWrite, Operation, Value};

const PKS: &[&str] = &["", "a", "a_b", "a%", "ab", "b", "111", "2", "é"];
const RKS: &[&str] = &["", "x", "xy", "y", "10", "9", "BIB:1", "AGE:2", "a_b"];
const STRS: &[&str] = &["a", "ab", "b", "x_y", ""];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone)]
struct Row {
    pk: String,
    rk: String,
    n: Option<i32>,
    s: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Col {
    Pk,
    Rk,
    N,
    S,
}

#[derive(Debug, Clone)]
enum Lit {
    Str(String),
    Int(i32),
    Null,
}

#[derive(Debug, Clone)]
enum P {
    Cmp(Col, &'static str, Lit),
    Between(Col, Lit, Lit, bool),
    In(Col, Vec<Lit>, bool),
    Like(Col, String, bool),
    IsNull(Col, bool),
    Row(&'static str, String, String),
    And(Box<P>, Box<P>),
    Or(Box<P>, Box<P>),
    Not(Box<P>),
}

const OPS: [&str; 6] = ["=", "<>", "<", "<=", ">", ">="];
const PATTERNS: &[&str] = &[
    "a%", "%", "a_b", "a\\_b", "a\\%", "%b", "_", "", "1%", "A%", "%y%", "x_",
];

fn text_col(r: &mut Rng) -> Col {
    [Col::Pk, Col::Rk, Col::S][r.below(3)]
}

fn lit_for(col: Col, r: &mut Rng) -> Lit {
    if r.chance(5) {
        return Lit::Null;
    }
    match col {
        Col::Pk => Lit::Str(r.pick(PKS).to_owned()),
        Col::Rk => Lit::Str(r.pick(RKS).to_owned()),
        Col::S => Lit::Str(r.pick(STRS).to_owned()),
        Col::N => Lit::Int(r.below(25) as i32 - 5),
    }
}

fn random_predicate(r: &mut Rng, depth: u32) -> P {
    let leaf = depth == 0 || r.chance(40);
    if !leaf {
        return match r.below(3) {
            0 => P::And(
                Box::new(random_predicate(r, depth - 1)),
                Box::new(random_predicate(r, depth - 1)),
            ),
            1 => P::Or(
                Box::new(random_predicate(r, depth - 1)),
                Box::new(random_predicate(r, depth - 1)),
            ),
            _ => P::Not(Box::new(random_predicate(r, depth - 1))),
        };
    }
    let col = [Col::Pk, Col::Pk, Col::Rk, Col::N, Col::S][r.below(5)];
    match r.below(7) {
        0 | 1 => P::Cmp(col, OPS[r.below(6)], lit_for(col, r)),
        2 => P::Between(col, lit_for(col, r), lit_for(col, r), r.chance(30)),
        3 => P::In(
            col,
            (0..1 + r.below(3)).map(|_| lit_for(col, r)).collect(),
            r.chance(30),
        ),
        4 => P::Like(text_col(r), r.pick(PATTERNS).to_owned(), r.chance(20)),
        5 => P::IsNull([Col::N, Col::S, Col::Pk][r.below(3)], r.chance(50)),
        _ => P::Row(
            OPS[r.below(6)],
            r.pick(PKS).to_owned(),
            r.pick(RKS).to_owned(),
        ),
    }
}

fn col_sql(c: Col) -> &'static str {
    match c {
        Col::Pk => "pk",
        Col::Rk => "rk",
        Col::N => "n",
        Col::S => "s",
    }
}

fn lit_sql(l: &Lit) -> String {
    match l {
        Lit::Str(s) => format!("'{}'", s.replace('\'', "''")),
        Lit::Int(i) => i.to_string(),
        Lit::Null => "NULL".into(),
    }
}

fn sql(p: &P) -> String {
    match p {
        P::Cmp(c, op, l) => format!("{} {op} {}", col_sql(*c), lit_sql(l)),
        P::Between(c, a, b, neg) => format!(
            "{} {}BETWEEN {} AND {}",
            col_sql(*c),
            if *neg { "NOT " } else { "" },
            lit_sql(a),
            lit_sql(b)
        ),
        P::In(c, v, neg) => format!(
            "{} {}IN ({})",
            col_sql(*c),
            if *neg { "NOT " } else { "" },
            v.iter().map(lit_sql).collect::<Vec<_>>().join(", ")
        ),
        P::Like(c, pat, neg) => format!(
            "{} {}LIKE '{}'",
            col_sql(*c),
            if *neg { "NOT " } else { "" },
            pat
        ),
        P::IsNull(c, neg) => format!("{} IS {}NULL", col_sql(*c), if *neg { "NOT " } else { "" }),
        P::Row(op, a, b) => format!("(pk, rk) {op} ('{a}', '{b}')"),
        P::And(a, b) => format!("({} AND {})", sql(a), sql(b)),
        P::Or(a, b) => format!("({} OR {})", sql(a), sql(b)),
        P::Not(a) => format!("NOT ({})", sql(a)),
    }
}

/// SQL LIKE with `\` as escape, by plain recursion (inputs are tiny).
fn like(text: &[char], pat: &[char]) -> bool {
    match pat.first() {
        None => text.is_empty(),
        Some('%') => (0..=text.len()).any(|i| like(&text[i..], &pat[1..])),
        Some('_') => !text.is_empty() && like(&text[1..], &pat[1..]),
        Some('\\') if pat.len() > 1 => text.first() == Some(&pat[1]) && like(&text[1..], &pat[2..]),
        Some(c) => text.first() == Some(c) && like(&text[1..], &pat[1..]),
    }
}

#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum V {
    S(String),
    I(i32),
}

fn value(row: &Row, c: Col) -> Option<V> {
    match c {
        Col::Pk => Some(V::S(row.pk.clone())),
        Col::Rk => Some(V::S(row.rk.clone())),
        Col::N => row.n.map(V::I),
        Col::S => row.s.clone().map(V::S),
    }
}

fn lit_value(l: &Lit) -> Option<V> {
    match l {
        Lit::Str(s) => Some(V::S(s.clone())),
        Lit::Int(i) => Some(V::I(*i)),
        Lit::Null => None,
    }
}

fn cmp(a: &V, op: &str, b: &V) -> bool {
    let o = a.partial_cmp(b).expect("same types");
    match op {
        "=" => o.is_eq(),
        "<>" => o.is_ne(),
        "<" => o.is_lt(),
        "<=" => o.is_le(),
        ">" => o.is_gt(),
        _ => o.is_ge(),
    }
}

fn not3(v: Option<bool>) -> Option<bool> {
    v.map(|b| !b)
}

/// Three-valued evaluation.
fn eval(p: &P, row: &Row) -> Option<bool> {
    match p {
        P::Cmp(c, op, l) => Some(cmp(&value(row, *c)?, op, &lit_value(l)?)),
        P::Between(c, a, b, neg) => {
            let v = value(row, *c);
            let lo = v
                .as_ref()
                .and_then(|v| lit_value(a).map(|a| cmp(v, ">=", &a)));
            let hi = v
                .as_ref()
                .and_then(|v| lit_value(b).map(|b| cmp(v, "<=", &b)));
            let r = and3(lo, hi);
            if *neg { not3(r) } else { r }
        }
        P::In(c, list, neg) => {
            let v = value(row, *c);
            // Not try_fold: None is SQL's unknown, which must not stop the
            // fold (a later TRUE still wins).
            #[allow(clippy::manual_try_fold)]
            let r = list.iter().fold(Some(false), |acc, l| {
                let eq = v
                    .as_ref()
                    .and_then(|v| lit_value(l).map(|l| cmp(v, "=", &l)));
                or3(acc, eq)
            });
            if *neg { not3(r) } else { r }
        }
        P::Like(c, pat, neg) => {
            let r = match value(row, *c)? {
                V::S(s) => like(
                    &s.chars().collect::<Vec<_>>(),
                    &pat.chars().collect::<Vec<_>>(),
                ),
                V::I(_) => unreachable!("LIKE on text columns only"),
            };
            Some(r != *neg)
        }
        P::IsNull(c, neg) => Some(value(row, *c).is_none() != *neg),
        P::Row(op, a, b) => {
            let l = (row.pk.as_str(), row.rk.as_str());
            let r = (a.as_str(), b.as_str());
            Some(match *op {
                "=" => l == r,
                "<>" => l != r,
                "<" => l < r,
                "<=" => l <= r,
                ">" => l > r,
                _ => l >= r,
            })
        }
        P::And(a, b) => and3(eval(a, row), eval(b, row)),
        P::Or(a, b) => or3(eval(a, row), eval(b, row)),
        P::Not(a) => not3(eval(a, row)),
    }
}

fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

async fn setup(seed: u64) -> (Planner, Vec<Row>) {
    let (p, store) = super::fixture::empty_planner().await;
    let ddl = "CREATE TABLE tbl (pk TEXT, rk TEXT, n INT, s TEXT, PRIMARY KEY (pk, rk))";
    let plan = p.plan(&Planner::parse(ddl).unwrap()[0], ddl).unwrap();
    p.run_ddl(&plan).await.unwrap();
    // Two range partitions on two servers, so pages end at a boundary.
    store.split_blocking("tbl", "ab").unwrap();
    store.move_range_blocking("tbl", "ab", 2).unwrap();
    let mut r = Rng(seed);
    let mut rows = Vec::new();
    for pk in PKS {
        for rk in RKS {
            if r.chance(55) {
                let row = Row {
                    pk: (*pk).to_owned(),
                    rk: (*rk).to_owned(),
                    n: (!r.chance(20)).then(|| r.below(25) as i32 - 5),
                    s: (!r.chance(25)).then(|| r.pick(STRS).to_owned()),
                };
                let mut w = EntityWrite::new(row.pk.clone(), row.rk.clone());
                if let Some(n) = row.n {
                    w = w.with("n", Value::Int32(n));
                }
                if let Some(s) = &row.s {
                    w = w.with("s", Value::String(s.clone()));
                }
                store
                    .execute_blocking("tbl", &[Operation::Insert(w)])
                    .unwrap();
                rows.push(row);
            }
        }
    }
    rows.sort_by(|a, b| (&a.pk, &a.rk).cmp(&(&b.pk, &b.rk)));
    (p, rows)
}

#[tokio::test]
async fn native_results_equal_brute_force() {
    let mut checked = 0;
    for seed in [0x1234_5678u64, 0xDEAD_BEEF, 0x0BAD_CAFE] {
        let (planner, rows) = setup(seed).await;
        let mut r = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
        for i in 0..150 {
            let p = random_predicate(&mut r, 3);
            let where_ = sql(&p);
            let query = format!("SELECT pk, rk FROM tbl WHERE {where_}");
            let expected: Vec<(String, String)> = rows
                .iter()
                .filter(|row| eval(&p, row) == Some(true))
                .map(|row| (row.pk.clone(), row.rk.clone()))
                .collect();
            let stmt = &Planner::parse(&query).unwrap_or_else(|e| panic!("{query}: {e}"))[0];
            let Plan::Select(select) = planner
                .plan(stmt, &query)
                .unwrap_or_else(|e| panic!("{query}: {e}"))
            else {
                panic!("not a select")
            };
            let opts = ExecOptions {
                page_size: [1, 3, 1000][i % 3],
                ..Default::default()
            };
            let (batches, _) = planner
                .execute(&select, &[], &opts)
                .unwrap_or_else(|e| panic!("{query}: {e}"))
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{query}: {e}"));
            let got: Vec<(String, String)> = batches
                .iter()
                .flat_map(|b| {
                    let pk = b.column(0).as_string::<i32>();
                    let rk = b.column(1).as_string::<i32>();
                    (0..b.num_rows()).map(move |i| (pk.value(i).to_owned(), rk.value(i).to_owned()))
                })
                .collect();
            assert_eq!(got, expected, "seed {seed:#x}, query {i}: {query}");
            checked += 1;
        }
    }
    assert_eq!(checked, 450);
}

/// IN lists longer than the planner's box budget are widened to a hull for
/// the scan; the list itself must stay in the residual filter.
#[tokio::test]
async fn long_in_lists_stay_exact() {
    let (planner, rows) = setup(0x5EED).await;
    let mut values: Vec<String> = (0..1_500).map(|i| format!("'zz{i:04}'")).collect();
    values.push("'a'".into());
    values.push("'111'".into());
    let query = format!("SELECT pk, rk FROM tbl WHERE pk IN ({})", values.join(", "));
    let Plan::Select(select) = planner
        .plan(&Planner::parse(&query).unwrap()[0], &query)
        .unwrap()
    else {
        panic!()
    };
    let (batches, _) = planner
        .execute(&select, &[], &ExecOptions::default())
        .unwrap()
        .collect()
        .await
        .unwrap();
    let got: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let pk = b.column(0).as_string::<i32>();
            (0..b.num_rows()).map(move |i| pk.value(i).to_owned())
        })
        .collect();
    let expected: Vec<String> = rows
        .iter()
        .filter(|r| r.pk == "a" || r.pk == "111")
        .map(|r| r.pk.clone())
        .collect();
    assert_eq!(got, expected);
}
