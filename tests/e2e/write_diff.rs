//! Writes against PostgreSQL 15: the same pseudo-random sequence of
//! INSERT / INSERT ... ON CONFLICT / UPDATE / DELETE runs in tablegate and
//! in PostgreSQL, and after each statement the outcomes (rows affected, or
//! the SQLSTATE) and the full table contents must be the same.
//!
//! The sequence is fixed (xorshift, fixed seed) so CI is deterministic; set
//! `WRITE_DIFF_SEED` (decimal or 0x hex) to explore other sequences locally.
//! Most statements carry literals (simple query protocol); some carry `$n`
//! parameters (extended protocol); some VALUES hold functions the analytics
//! engine computes.

use std::fmt::Write as _;

use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::pgref::SideBySide;
use super::rng::Rng;

/// `kvt`, not `kv`: table names have at least 3 characters in the store.
const DDL: &str =
    "CREATE TABLE kvt (pk text, rk text, n int, s text, d double precision, PRIMARY KEY (pk, rk))";

const STEPS: usize = 300;
const SEED: u64 = 0x5eed_1234_abcd_0001;
/// PartitionKeys p0..p3, RowKeys r00..r19: small enough that conflicts are
/// frequent.
const PKS: u64 = 4;
const RKS: u64 = 20;

type Row = (String, String, Option<i32>, Option<String>, Option<f64>);

impl Rng {
    /// True with probability `num / den`.
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    fn pk(&mut self) -> String {
        format!("p{}", self.below(PKS))
    }
    fn rk(&mut self) -> String {
        format!("r{:02}", self.below(RKS))
    }
    fn int(&mut self) -> i32 {
        self.below(100) as i32
    }
    /// A text value and its SQL literal.
    fn text(&mut self) -> (String, String) {
        let n = self.below(100);
        let v = match self.below(6) {
            0 => String::new(),
            1 => format!("it's {n}"),
            2 => format!("ünï {n}"),
            _ => format!("s{n}"),
        };
        let lit = format!("'{}'", v.replace('\'', "''"));
        (v, lit)
    }
    /// A double and its SQL literal; every value has an exact decimal form
    /// or is parsed by both sides from the same text.
    fn double(&mut self) -> (f64, String) {
        let lit = match self.below(6) {
            0 => "0.1".to_owned(),
            1 => "-2.75".to_owned(),
            2 => "1e10".to_owned(),
            _ => format!("{}.5", self.below(100)),
        };
        (lit.parse().unwrap(), lit)
    }
}

/// A parameter value, typed as the column it binds to.
#[derive(Debug, Clone)]
enum Param {
    Int(Option<i32>),
    Text(Option<String>),
    Float(Option<f64>),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Int(v) => v,
            Param::Text(v) => v,
            Param::Float(v) => v,
        }
    }
}

/// One statement, sent with the extended protocol when `params` is not
/// empty.
struct Step {
    sql: String,
    params: Vec<Param>,
}

impl Step {
    fn plain(sql: String) -> Step {
        Step {
            sql,
            params: Vec::new(),
        }
    }
    fn show(&self) -> String {
        if self.params.is_empty() {
            self.sql.clone()
        } else {
            format!("{}  -- params {:?}", self.sql, self.params)
        }
    }
}

/// A full row of literals `(pk, rk, n, s, d)`, each non-key column NULL
/// now and then.
fn row_literal(r: &mut Rng, pk: &str, rk: &str) -> String {
    let n = if r.chance(1, 6) {
        "NULL".to_owned()
    } else {
        r.int().to_string()
    };
    let s = if r.chance(1, 5) {
        "NULL".to_owned()
    } else if r.chance(1, 8) {
        // A function the write path hands to the analytics engine.
        let lit = r.text().1;
        match r.below(3) {
            0 => format!("upper({lit})"),
            1 => format!("repeat({lit}, 2)"),
            _ => format!("md5({lit})"),
        }
    } else {
        r.text().1
    };
    let d = if r.chance(1, 4) {
        "NULL".to_owned()
    } else {
        r.double().1
    };
    format!("('{pk}', '{rk}', {n}, {s}, {d})")
}

/// 1..=max distinct keys; in one PartitionKey when `pk` is given.
fn keys(r: &mut Rng, pk: Option<&str>, max: u64) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = (0..1 + r.below(max))
        .map(|_| (pk.map_or_else(|| r.pk(), str::to_owned), r.rk()))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The ON CONFLICT ... DO clauses: EXCLUDED of a named or unnamed column
/// (an unnamed one is NULL), an expression over the current row, every
/// column (InsertOrReplace), and DO NOTHING with and without a target.
fn on_conflict(r: &mut Rng) -> String {
    let k = r.below(5) + 1;
    match r.below(7) {
        0 => "ON CONFLICT (pk, rk) DO UPDATE SET n = EXCLUDED.n".into(),
        1 => "ON CONFLICT (pk, rk) DO UPDATE SET s = EXCLUDED.s".into(),
        2 => format!(
            "ON CONFLICT (pk, rk) DO UPDATE SET n = CASE WHEN kvt.n > {k} THEN kvt.n + {k} ELSE EXCLUDED.n END"
        ),
        3 => "ON CONFLICT (pk, rk) DO UPDATE SET n = kvt.n + EXCLUDED.n, d = EXCLUDED.d".into(),
        4 => "ON CONFLICT (pk, rk) DO UPDATE SET n = EXCLUDED.n, s = EXCLUDED.s, d = EXCLUDED.d"
            .into(),
        5 => "ON CONFLICT (pk, rk) DO NOTHING".into(),
        _ => "ON CONFLICT DO NOTHING".into(),
    }
}

/// A WHERE clause for UPDATE and DELETE, with literals.
fn where_literal(r: &mut Rng, pk: &str, rk: &str) -> String {
    match r.below(7) {
        0 | 1 => format!("pk = '{pk}' AND rk = '{rk}'"),
        2 => format!("pk = '{pk}'"),
        3 => format!("pk = '{pk}' AND n < {}", r.below(40)),
        4 => format!("pk = '{pk}' AND rk >= '{rk}'"),
        5 => format!("pk IN ('{pk}', '{}') AND rk = '{rk}'", r.pk()),
        // Over the whole table; a high bound, so it does not empty it.
        _ => format!("n > {}", 60 + r.below(40)),
    }
}

/// `present`: the keys in the table before this step (PostgreSQL's view),
/// so that multi-partition plain INSERTs can use absent keys (see below).
fn step(r: &mut Rng, present: &[Row]) -> Step {
    let pk = r.pk();
    let rk = r.rk();
    match r.below(22) {
        // Single-row INSERT, every column or a column list.
        0..=2 => Step::plain(format!(
            "INSERT INTO kvt VALUES {}",
            row_literal(r, &pk, &rk)
        )),
        3 => Step::plain(format!(
            "INSERT INTO kvt (rk, pk, n) VALUES ('{rk}', '{pk}', {})",
            r.int()
        )),
        4 => {
            let text = if r.chance(1, 4) {
                None
            } else {
                Some(r.text().0)
            };
            let d = if r.chance(1, 4) {
                None
            } else {
                Some(r.double().0)
            };
            Step {
                sql: "INSERT INTO kvt (pk, rk, n, s, d) VALUES ($1, $2, $3, $4, $5)".into(),
                params: vec![
                    Param::Text(Some(pk)),
                    Param::Text(Some(rk)),
                    Param::Int(Some(r.int())),
                    Param::Text(text),
                    Param::Float(d),
                ],
            }
        }
        // Multi-row INSERT in one PartitionKey: one EGT, so atomic as in
        // PostgreSQL, and an existing key fails the whole statement.
        5 | 6 => {
            let rows: Vec<String> = keys(r, Some(&pk), 5)
                .iter()
                .map(|(p, k)| row_literal(r, p, k))
                .collect();
            Step::plain(format!("INSERT INTO kvt VALUES {}", rows.join(", ")))
        }
        // Multi-row INSERT over several PartitionKeys, of keys absent
        // before the step. A multi-partition statement is one EGT per
        // PartitionKey by design, so when one key exists the
        // other partitions' rows may stay written, unlike PostgreSQL; that
        // difference is documented, not compared here.
        7 => {
            let mut rows = Vec::new();
            for (p, k) in keys(r, None, 5) {
                if !present.iter().any(|x| x.0 == p && x.1 == k) {
                    rows.push(row_literal(r, &p, &k));
                }
            }
            if rows.is_empty() {
                rows.push(row_literal(r, &pk, &rk));
            }
            Step::plain(format!("INSERT INTO kvt VALUES {}", rows.join(", ")))
        }
        // INSERT ... ON CONFLICT, one row or several (any partitions: it
        // cannot fail on an existing key).
        8..=10 => {
            let cols = if r.chance(1, 2) {
                "(pk, rk, n)"
            } else {
                "(pk, rk, n, s, d)"
            };
            let max = if r.chance(1, 2) { 1 } else { 5 };
            let rows: Vec<String> = keys(r, None, max)
                .iter()
                .map(|(p, k)| {
                    if cols == "(pk, rk, n)" {
                        format!("('{p}', '{k}', {})", r.int())
                    } else {
                        row_literal(r, p, k)
                    }
                })
                .collect();
            Step::plain(format!(
                "INSERT INTO kvt {cols} VALUES {} {}",
                rows.join(", "),
                on_conflict(r)
            ))
        }
        11 => Step {
            sql: format!(
                "INSERT INTO kvt (pk, rk, n, s) VALUES ($1, $2, $3, $4) {}",
                on_conflict(r)
            ),
            params: vec![
                Param::Text(Some(pk)),
                Param::Text(Some(rk)),
                Param::Int(Some(r.int())),
                Param::Text(Some(r.text().0)),
            ],
        },
        // UPDATE with literals.
        12..=14 => {
            let set = match r.below(7) {
                0 | 1 => format!("n = n + {}", r.below(7) + 1),
                2 => format!("s = {}", r.text().1),
                3 => "d = NULL".to_owned(),
                // CASE conditions read the row as WHERE does: NULL is not
                // true, and a missing ELSE is NULL.
                4 => format!(
                    "n = CASE WHEN n > {} THEN n - 1 WHEN s IS NULL THEN {} ELSE n + 1 END",
                    r.int(),
                    r.int()
                ),
                5 => format!(
                    "s = CASE WHEN d < 0 THEN 'neg' WHEN d >= {} THEN s || '+' END, d = CASE rk WHEN {} THEN 0 ELSE d END",
                    r.double().1,
                    r.text().1
                ),
                _ => format!("n = {}, s = NULL, d = {}", r.int(), r.double().1),
            };
            Step::plain(format!(
                "UPDATE kvt SET {set} WHERE {}",
                where_literal(r, &pk, &rk)
            ))
        }
        // UPDATE with parameters.
        15 => Step {
            sql: "UPDATE kvt SET n = n + $1 WHERE pk = $2 AND rk = $3".into(),
            params: vec![
                Param::Int(Some(r.below(7) as i32 + 1)),
                Param::Text(Some(pk)),
                Param::Text(Some(rk)),
            ],
        },
        16 => {
            let d = if r.chance(1, 2) {
                None
            } else {
                Some(r.double().0)
            };
            Step {
                sql: "UPDATE kvt SET d = $1, s = $2 WHERE pk = $3".into(),
                params: vec![
                    Param::Float(d),
                    Param::Text(Some(r.text().0)),
                    Param::Text(Some(pk)),
                ],
            }
        }
        // DELETE with literals and with parameters.
        17 | 18 => Step::plain(format!(
            "DELETE FROM kvt WHERE {}",
            where_literal(r, &pk, &rk)
        )),
        19 => {
            if r.chance(1, 2) {
                Step {
                    sql: "DELETE FROM kvt WHERE pk = $1 AND rk = $2".into(),
                    params: vec![Param::Text(Some(pk)), Param::Text(Some(rk))],
                }
            } else {
                Step {
                    sql: "DELETE FROM kvt WHERE n > $1".into(),
                    params: vec![Param::Int(Some(70 + r.below(30) as i32))],
                }
            }
        }
        _ => bad(r, &pk, &rk, present),
    }
}

/// Statements that PostgreSQL rejects (or that repeat a key), each
/// rejected before anything is written in tablegate too, so the table
/// stays the same in both.
///
/// Value errors that only show up while a multi-partition UPDATE or upsert
/// is applied are left out: tablegate applies such a statement one
/// PartitionKey at a time and keeps the partitions written before
/// the failing one. So the overflow statements here are in one partition
/// and built from the current contents to fail for sure: an overflow that
/// succeeded would leave values near `i32::MAX` for later multi-partition
/// `n = n + k` statements to trip over.
fn bad(r: &mut Rng, pk: &str, rk: &str, present: &[Row]) -> Step {
    let other = r.pk();
    let big = |x: &Row| x.2.is_some_and(|n| n > 47);
    match r.below(7) {
        // A NULL key column: 23502.
        0 => Step::plain(format!(
            "INSERT INTO kvt VALUES ('{other}', 'r99', 1, 'x', 1.5), (NULL, '{rk}', 2, 'y', 2.5)"
        )),
        1 => Step {
            sql: "INSERT INTO kvt (pk, rk, n) VALUES ($1, $2, $3)".into(),
            params: vec![
                Param::Text(Some(pk.into())),
                Param::Text(None),
                Param::Int(Some(1)),
            ],
        },
        // A key twice in one statement: 23505 for INSERT, 21000 for DO
        // UPDATE, and DO NOTHING keeps the first.
        2 => {
            let tail = match r.below(3) {
                0 => "",
                1 => " ON CONFLICT (pk, rk) DO UPDATE SET n = EXCLUDED.n",
                _ => " ON CONFLICT DO NOTHING",
            };
            Step::plain(format!(
                "INSERT INTO kvt (pk, rk, n) VALUES ('{pk}', '{rk}', 1), ('{other}', 'r98', 2), ('{pk}', '{rk}', 3){tail}"
            ))
        }
        // Malformed integers: 22P02.
        3 => Step::plain(format!(
            "INSERT INTO kvt (pk, rk, n) VALUES ('{pk}', '{rk}', 'abc') ON CONFLICT DO NOTHING"
        )),
        // Overflow in some rows of a partition and not in others (one EGT,
        // so nothing is written): 22003.
        4 | 5 => {
            let mut pks: Vec<&String> = present
                .iter()
                .filter(|x| big(x))
                .map(|x| &x.0)
                .filter(|p| present.iter().any(|x| &x.0 == *p && !big(x)))
                .collect();
            pks.dedup();
            match pks.get(r.below(pks.len().max(1) as u64) as usize) {
                Some(p) => Step::plain(format!(
                    "UPDATE kvt SET n = n + 2147483600, s = 'overflow' WHERE pk = '{p}'"
                )),
                None => Step::plain(format!(
                    "INSERT INTO kvt (pk, rk, n) VALUES ('{pk}', '{rk}', 2147483648)"
                )),
            }
        }
        // An upsert whose second row overflows, after one that would
        // insert: 22003, and neither is written.
        _ => {
            let rows: Vec<&Row> = present.iter().filter(|x| big(x)).collect();
            match rows.get(r.below(rows.len().max(1) as u64) as usize) {
                Some(x) => Step::plain(format!(
                    "INSERT INTO kvt (pk, rk, n) VALUES ('{p}', 'r97', 1), ('{p}', '{k}', 2147483600) \
                     ON CONFLICT (pk, rk) DO UPDATE SET n = kvt.n + EXCLUDED.n",
                    p = x.0,
                    k = x.1
                )),
                None => Step::plain(format!(
                    "INSERT INTO kvt (pk, rk, n) VALUES ('{pk}', '{rk}', 2147483648)"
                )),
            }
        }
    }
}

/// Rows affected, or the SQLSTATE.
async fn apply(c: &Client, s: &Step) -> Result<u64, String> {
    let r = if s.params.is_empty() {
        // The simple query protocol (literals only).
        c.simple_query(&s.sql).await.map(|msgs| {
            msgs.iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
                    _ => None,
                })
                .unwrap_or_default()
        })
    } else {
        let refs: Vec<&(dyn ToSql + Sync)> = s.params.iter().map(Param::as_sql).collect();
        c.execute(&s.sql, &refs).await
    };
    r.map_err(|e| {
        e.as_db_error()
            .map(|d| d.code().code().to_owned())
            .unwrap_or_else(|| format!("not a server error: {e}"))
    })
}

async fn contents(c: &Client) -> Vec<Row> {
    let mut rows: Vec<Row> = c
        .query("SELECT pk, rk, n, s, d FROM kvt", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    rows
}

/// The rows that differ, for the failure message.
fn diff(want: &[Row], got: &[Row]) -> String {
    let mut out = String::new();
    for w in want {
        match got.iter().find(|g| g.0 == w.0 && g.1 == w.1) {
            None => writeln!(out, "  missing in tablegate: {w:?}").unwrap(),
            Some(g) if g != w => {
                writeln!(out, "  postgres:  {w:?}\n  tablegate: {g:?}").unwrap();
            }
            Some(_) => {}
        }
    }
    for g in got {
        if !want.iter().any(|w| w.0 == g.0 && w.1 == g.1) {
            writeln!(out, "  extra in tablegate: {g:?}").unwrap();
        }
    }
    out
}

fn seed() -> u64 {
    match std::env::var("WRITE_DIFF_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.ok().filter(|&s| s != 0).unwrap_or_else(|| {
                panic!("WRITE_DIFF_SEED={v}: want a non-zero u64 (decimal or 0x hex)")
            })
        }
        Err(_) => SEED,
    }
}

#[tokio::test]
async fn random_writes_match_postgresql() {
    let SideBySide { p, t, .. } = &SideBySide::start().await;
    p.batch_execute(DDL).await.unwrap();
    t.batch_execute(DDL).await.unwrap();

    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut history: Vec<String> = Vec::new();
    let mut present: Vec<Row> = Vec::new();
    let (mut errors, mut affected, mut max_rows) = (0, 0, 0);
    for i in 0..STEPS {
        let st = step(&mut rng, &present);
        history.push(format!("{i:3}: {}", st.show()));
        let want = apply(p, &st).await;
        let got = apply(t, &st).await;
        let context = || format!("seed {seed:#x}; statements so far:\n{}", history.join("\n"));
        assert_eq!(
            got,
            want,
            "step {i}: outcome differs (left tablegate, right PostgreSQL) for\n  {}\n{}",
            st.show(),
            context()
        );
        match want {
            Ok(n) => affected += n,
            Err(_) => errors += 1,
        }
        let (want, got) = (contents(p).await, contents(t).await);
        assert!(
            got == want,
            "step {i}: contents differ after\n  {}\n{}{}",
            st.show(),
            diff(&want, &got),
            context()
        );
        max_rows = max_rows.max(want.len());
        present = want;
    }
    // The sequence exercises both paths and keeps the table populated.
    assert!(
        (10..150).contains(&errors),
        "{errors} of {STEPS} statements failed"
    );
    assert!(affected > STEPS as u64, "{affected} rows affected in all");
    assert!(
        max_rows >= 20,
        "the table never held more than {max_rows} rows"
    );
    assert!(!present.is_empty());
}
