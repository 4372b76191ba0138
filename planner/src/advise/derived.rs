//! Keys the seeds compute rather than store, as the advisor models them:
//! a compound key (`event__distance`), a RowKey made unique by a suffix
//! (`age__bib`, the seeds' `AGE:055__1234`), a hash-bucket prefix against
//! append-only inserts, and an inverted value for the log-tail pattern
//! (the newest entries first).
//!
//! A derived key is an extra text column of the modelled table, computed
//! from the row ([`augment`]). A workload statement is rewritten so that a
//! design keyed by a derived column can use it ([`rewrite`]): predicates on
//! the source columns gain an equivalent predicate on the derived one
//! (`event = $1 AND distance = $2` gains `event__distance = $5`), whose
//! parameter is computed from the source values once they are drawn
//! ([`Computed`]); `ORDER BY ts DESC` becomes `ORDER BY ts_inverted`. An
//! added predicate is implied by the statement's own, so under a design
//! that does not use it, it keeps every row the statement keeps.

use sqlparser::ast;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use tablegate_catalog::{Column, SqlType, TableDef};
use tablegate_store::{CmpOp, Value};

use crate::expr::{BExpr, op_text};
use crate::whatif::Sample;

/// Hash buckets a bucketed PartitionKey spreads a key over.
pub const BUCKETS: u32 = 16;
/// Joins the parts of a compound key, as in the seeds' examples.
const SEP: &str = "__";
/// Above every character a key can hold: the end of a compound prefix.
const TOP: char = '\u{10FFFF}';

/// How a derived key is computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Two columns' keys joined by `__`.
    Compound(String, String),
    /// A hash of the column's key, in [`BUCKETS`] buckets.
    Bucket(String),
    /// The column's value inverted: descending order as ascending keys.
    Inverted(String),
}

/// A derived key column.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// Its column name in the modelled table.
    pub name: String,
    /// How it is computed.
    pub kind: Kind,
}

impl Derived {
    /// `a__b`.
    pub fn compound(a: &str, b: &str) -> Derived {
        Derived {
            name: format!("{a}{SEP}{b}"),
            kind: Kind::Compound(a.to_owned(), b.to_owned()),
        }
    }

    /// `c_bucket`.
    pub fn bucket(c: &str) -> Derived {
        Derived {
            name: format!("{c}_bucket"),
            kind: Kind::Bucket(c.to_owned()),
        }
    }

    /// `c_inverted`.
    pub fn inverted(c: &str) -> Derived {
        Derived {
            name: format!("{c}_inverted"),
            kind: Kind::Inverted(c.to_owned()),
        }
    }

    /// The columns it is computed from.
    pub fn sources(&self) -> Vec<&str> {
        match &self.kind {
            Kind::Compound(a, b) => vec![a, b],
            Kind::Bucket(c) | Kind::Inverted(c) => vec![c],
        }
    }

    /// How it is computed, in words and SQL.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Compound(a, b) => format!(
                "{} = {a} || '{SEP}' || {b} (a compound key, keys as stored)",
                self.name
            ),
            Kind::Bucket(c) => format!(
                "{} = a hash of {c} mod {BUCKETS} (a bucket prefix: inserts spread over {BUCKETS} PartitionKeys; a range of {c} reads each bucket)",
                self.name
            ),
            Kind::Inverted(c) => format!(
                "{} = {c} inverted (the newest first: the log-tail pattern)",
                self.name
            ),
        }
    }

    /// The SQL expression that computes this key as the model stores it,
    /// for copying rows into a table keyed by it; `None` where there is
    /// none yet (hash buckets, inverted values, timestamp and uuid parts).
    pub fn sql(&self, real: &TableDef) -> Option<String> {
        match &self.kind {
            Kind::Compound(a, b) => Some(format!(
                "{} || '{SEP}' || {}",
                key_sql(a, real.resolve(a).ok()?.ty)?,
                key_sql(b, real.resolve(b).ok()?.ty)?
            )),
            Kind::Bucket(_) | Kind::Inverted(_) => None,
        }
    }

    /// The key for the source values given (a leading part of a compound
    /// key when only its first value is given); `None` when a value is
    /// missing or not of its column's type.
    fn compute(&self, real: &TableDef, values: &[Value]) -> Option<String> {
        let enc = |col: &str, v: &Value| real.resolve(col).ok()?.ty.encode_key(v);
        match &self.kind {
            Kind::Compound(a, b) => match values {
                [x] => enc(a, x),
                [x, y] => Some(format!("{}{SEP}{}", enc(a, x)?, enc(b, y)?)),
                _ => None,
            },
            Kind::Bucket(c) => {
                let k = enc(c, values.first()?)?;
                Some(format!("{:02}", fnv(&k) % BUCKETS))
            }
            Kind::Inverted(_) => {
                let n = match values.first()? {
                    Value::Int32(i) => i64::from(*i),
                    Value::Int64(i) => *i,
                    Value::DateTime(t) => t.0,
                    _ => return None,
                };
                SqlType::Int8.encode_key(&Value::Int64(!n))
            }
        }
    }
}

/// A column's stored key as SQL: integers zero-padded to their width, the
/// negative ones after a `-` as the key codec writes them (`bigint` only
/// when not negative: its offset does not fit the type).
fn key_sql(col: &str, ty: SqlType) -> Option<String> {
    let int = |digits: usize| {
        let max = "9".repeat(digits);
        format!(
            "CASE WHEN {col} >= 0 THEN lpad(CAST({col} AS text), {digits}, '0') ELSE '-' || lpad(CAST({max} + {col} AS text), {digits}, '0') END"
        )
    };
    match ty {
        SqlType::Text => Some(col.to_owned()),
        SqlType::Int2 => Some(int(5)),
        SqlType::Int4 => Some(int(10)),
        SqlType::Int8 => Some(format!(
            "CASE WHEN {col} >= 0 THEN lpad(CAST({col} AS text), 19, '0') END"
        )),
        SqlType::Date => Some(format!("CAST({col} AS text)")),
        _ => None,
    }
}

/// Whether a column of type `ty` can be inverted.
pub fn invertible(ty: SqlType) -> bool {
    matches!(
        ty,
        SqlType::Int2
            | SqlType::Int4
            | SqlType::Int8
            | SqlType::Timestamp
            | SqlType::Timestamptz
            | SqlType::Date
    )
}

fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// `real` with the derived columns added (keys unchanged), and the sample
/// with their values.
pub fn augment(real: &TableDef, sample: &Sample, derived: &[Derived]) -> (TableDef, Sample) {
    let mut def = real.clone();
    for d in derived {
        def.columns.push(Column::property(&d.name, SqlType::Text));
    }
    let sources: Vec<Vec<_>> = derived
        .iter()
        .map(|d| {
            d.sources()
                .iter()
                .filter_map(|c| real.resolve(c).ok())
                .collect()
        })
        .collect();
    let entities = sample
        .entities
        .iter()
        .map(|e| {
            let mut e = e.clone();
            for (d, cols) in derived.iter().zip(&sources) {
                let values: Option<Vec<Value>> =
                    cols.iter().map(|c| real.value_of(&e, c)).collect();
                if let Some(k) = values.and_then(|v| d.compute(real, &v)) {
                    e.properties.insert(d.name.clone(), Value::String(k));
                }
            }
            e
        })
        .collect();
    (
        def,
        Sample {
            total: sample.total,
            entities,
        },
    )
}

/// A value in a statement: a constant or a parameter (0-based).
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A constant.
    Lit(Value),
    /// `$n`.
    Param(usize),
}

/// A parameter a rewrite added: its value is the derived key of other
/// values of the statement, plus a suffix (the bounds of a compound
/// prefix).
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// The added parameter (0-based).
    pub param: usize,
    /// Index into the derived keys.
    pub derived: usize,
    /// The source values.
    pub args: Vec<Arg>,
    /// Appended to the key.
    pub suffix: String,
}

impl Computed {
    /// The parameter's value once the statement's own are drawn.
    pub fn value(
        &self,
        real: &TableDef,
        derived: &[Derived],
        params: &[Option<Value>],
    ) -> Option<Value> {
        let values: Option<Vec<Value>> = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Lit(v) => Some(v.clone()),
                Arg::Param(p) => params.get(*p).cloned().flatten(),
            })
            .collect();
        let key = derived[self.derived].compute(real, &values?)?;
        Some(Value::String(key + &self.suffix))
    }
}

/// The predicates of a statement's WHERE clause the rewrite reads: its
/// top-level conjuncts comparing a column with a constant or parameter.
#[derive(Debug, Default)]
pub struct Conjuncts(pub Vec<(String, CmpOp, Arg)>);

impl Conjuncts {
    /// Collects the conjuncts of `e`.
    pub fn of(e: Option<&BExpr>) -> Conjuncts {
        fn arg(e: &BExpr) -> Option<Arg> {
            match e {
                BExpr::Lit(v) => Some(Arg::Lit(v.clone())),
                BExpr::Param(n, _) => Some(Arg::Param(*n)),
                _ => None,
            }
        }
        fn walk(e: &BExpr, out: &mut Vec<(String, CmpOp, Arg)>) {
            match e {
                BExpr::And(v) => v.iter().for_each(|x| walk(x, out)),
                BExpr::Cmp(a, op, b) => match (&**a, &**b) {
                    (BExpr::Column(c), x) => {
                        if let Some(x) = arg(x) {
                            out.push((c.name.clone(), *op, x));
                        }
                    }
                    (x, BExpr::Column(c)) => {
                        if let Some(x) = arg(x) {
                            out.push((c.name.clone(), super::flip(*op), x));
                        }
                    }
                    _ => {}
                },
                BExpr::Between {
                    expr,
                    low,
                    high,
                    negated: false,
                } => {
                    if let (BExpr::Column(c), Some(l), Some(h)) = (&**expr, arg(low), arg(high)) {
                        out.push((c.name.clone(), CmpOp::Ge, l));
                        out.push((c.name.clone(), CmpOp::Le, h));
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        if let Some(e) = e {
            walk(e, &mut out);
        }
        Conjuncts(out)
    }

    /// The value `col` is equal to, if a conjunct says.
    pub fn eq(&self, col: &str) -> Option<&Arg> {
        self.0
            .iter()
            .find(|(c, op, _)| c == col && *op == CmpOp::Eq)
            .map(|(.., a)| a)
    }

    /// The range conjuncts on `col`.
    pub fn ranges<'a>(&'a self, col: &'a str) -> impl Iterator<Item = (CmpOp, &'a Arg)> + 'a {
        self.0
            .iter()
            .filter(move |(c, op, _)| {
                c == col && matches!(op, CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge)
            })
            .map(|(_, op, a)| (*op, a))
    }

    /// The columns constrained at all.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(c, ..)| c.as_str())
    }
}

/// The columns a query orders by descending (`ORDER BY c DESC`).
pub fn descending(q: &ast::Query) -> Vec<String> {
    order_exprs(q)
        .iter()
        .filter(|o| o.options.asc == Some(false))
        .filter_map(|o| match &o.expr {
            ast::Expr::Identifier(i) => Some(crate::expr::fold(i)),
            _ => None,
        })
        .collect()
}

fn order_exprs(q: &ast::Query) -> &[ast::OrderByExpr] {
    match q.order_by.as_ref().map(|o| &o.kind) {
        Some(ast::OrderByKind::Expressions(v)) => v,
        _ => &[],
    }
}

/// `q` with the predicates and orderings that let a design keyed by the
/// derived columns serve it. `params` is the number of parameters `q`
/// has; added ones follow.
pub fn rewrite(
    q: &ast::Query,
    conj: &Conjuncts,
    derived: &[Derived],
    params: usize,
) -> (ast::Query, Vec<Computed>) {
    let mut added: Vec<String> = Vec::new();
    let mut computed: Vec<Computed> = Vec::new();
    let mut add = |d: usize, op: CmpOp, args: Vec<Arg>, suffix: String| {
        let param = params + computed.len();
        added.push(format!(
            "{} {} ${}",
            derived[d].name,
            op_text(op),
            param + 1
        ));
        computed.push(Computed {
            param,
            derived: d,
            args,
            suffix,
        });
    };
    let top = format!("{SEP}{TOP}");
    let mut lists: Vec<String> = Vec::new();
    for (i, d) in derived.iter().enumerate() {
        match &d.kind {
            Kind::Compound(a, b) => match (conj.eq(a), conj.eq(b)) {
                (Some(x), Some(y)) => add(i, CmpOp::Eq, vec![x.clone(), y.clone()], String::new()),
                (Some(x), None) => {
                    add(i, CmpOp::Ge, vec![x.clone()], SEP.to_owned());
                    add(i, CmpOp::Le, vec![x.clone()], top.clone());
                }
                _ => {
                    let ranges: Vec<_> = conj.ranges(a).map(|(o, x)| (o, x.clone())).collect();
                    for (op, x) in ranges {
                        let suffix = match op {
                            CmpOp::Gt | CmpOp::Le => top.clone(),
                            _ => String::new(),
                        };
                        add(i, op, vec![x], suffix);
                    }
                }
            },
            Kind::Bucket(c) => match conj.eq(c) {
                Some(x) => add(i, CmpOp::Eq, vec![x.clone()], String::new()),
                None if conj.ranges(c).next().is_some() => {
                    let all: Vec<String> = (0..BUCKETS).map(|b| format!("'{b:02}'")).collect();
                    lists.push(format!("{} IN ({})", d.name, all.join(", ")));
                }
                None => {}
            },
            Kind::Inverted(c) => {
                if let Some(x) = conj.eq(c) {
                    add(i, CmpOp::Eq, vec![x.clone()], String::new());
                }
                let ranges: Vec<_> = conj.ranges(c).map(|(o, x)| (o, x.clone())).collect();
                for (op, x) in ranges {
                    add(i, super::flip(op), vec![x], String::new());
                }
            }
        }
    }
    added.extend(lists);
    let mut q = q.clone();
    if let ast::SetExpr::Select(s) = &mut *q.body {
        for text in &added {
            let Ok(e) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(text)
                .and_then(|mut p| p.parse_expr())
            else {
                continue;
            };
            s.selection = Some(match s.selection.take() {
                Some(w) => ast::Expr::BinaryOp {
                    left: Box::new(ast::Expr::Nested(Box::new(w))),
                    op: ast::BinaryOperator::And,
                    right: Box::new(e),
                },
                None => e,
            });
        }
    }
    // The log-tail pattern: descending order on a column is ascending
    // order on its inverted key.
    if let Some(ast::OrderByKind::Expressions(v)) = q.order_by.as_mut().map(|o| &mut o.kind) {
        for o in v {
            let ast::Expr::Identifier(id) = &o.expr else {
                continue;
            };
            let name = crate::expr::fold(id);
            if let Some(d) = derived
                .iter()
                .find(|d| d.kind == Kind::Inverted(name.clone()))
            {
                o.expr = ast::Expr::Identifier(ast::Ident::new(&d.name));
                o.options.asc = match o.options.asc {
                    Some(false) => None,
                    _ => Some(false),
                };
            }
        }
    }
    (q, computed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablegate_store::DateTime;

    fn table() -> TableDef {
        TableDef::new(
            "runners",
            vec![
                Column::property("event", SqlType::Text),
                Column::property("distance", SqlType::Text),
                Column::property("bib", SqlType::Int4),
                Column::property("at", SqlType::Timestamptz),
            ],
            &["bib".to_owned()],
        )
        .unwrap()
    }

    #[test]
    fn derived_keys_keep_the_order_they_promise() {
        let t = table();
        let c = Derived::compound("event", "bib");
        let k = |v: &[Value]| c.compute(&t, v).unwrap();
        let e = |s: &str| Value::String(s.into());
        assert_eq!(k(&[e("NYC"), Value::Int32(7)]), "NYC__0000000007");
        // A prefix's bounds hold every key that starts with it.
        let full = k(&[e("NYC"), Value::Int32(7)]);
        assert!(k(&[e("NYC")]) <= full && full <= k(&[e("NYC")]) + &format!("{SEP}{TOP}"));
        let inv = Derived::inverted("at");
        let at = |us: i64| inv.compute(&t, &[Value::DateTime(DateTime(us))]).unwrap();
        assert!(at(2_000) < at(1_000) && at(1_000) < at(-5));
        let b = Derived::bucket("bib");
        let buckets: std::collections::BTreeSet<String> = (0..1000)
            .map(|i| b.compute(&t, &[Value::Int32(i)]).unwrap())
            .collect();
        assert_eq!(buckets.len(), BUCKETS as usize);
    }

    #[test]
    fn a_rewrite_adds_implied_predicates_with_computed_parameters() {
        let derived = [
            Derived::compound("event", "distance"),
            Derived::inverted("at"),
        ];
        let q = match Parser::new(&PostgreSqlDialect {})
            .try_with_sql("SELECT bib FROM runners WHERE event = $1 AND distance = 'Full' AND at > $2 ORDER BY at DESC LIMIT 5")
            .unwrap()
            .parse_statement()
            .unwrap()
        {
            ast::Statement::Query(q) => q,
            _ => unreachable!(),
        };
        let conj = Conjuncts(vec![
            ("event".into(), CmpOp::Eq, Arg::Param(0)),
            (
                "distance".into(),
                CmpOp::Eq,
                Arg::Lit(Value::String("Full".into())),
            ),
            ("at".into(), CmpOp::Gt, Arg::Param(1)),
        ]);
        let (r, computed) = rewrite(&q, &conj, &derived, 2);
        assert_eq!(
            r.to_string(),
            "SELECT bib FROM runners WHERE ((event = $1 AND distance = 'Full' AND at > $2) AND event__distance = $3) AND at_inverted < $4 ORDER BY at_inverted LIMIT 5"
        );
        let t = table();
        let params = [
            Some(Value::String("NYC".into())),
            Some(Value::DateTime(DateTime(0))),
        ];
        assert_eq!(
            computed[0].value(&t, &derived, &params),
            Some(Value::String("NYC__Full".into()))
        );
        assert_eq!(computed[1].param, 3);
    }
}
