//! SQL text to the statement DataFusion plans: PostgreSQL syntax, with
//! datafusion-pg-catalog's rewrites where they keep the answer the same.
//!
//! datafusion-pg-catalog's `PostgresCompatibilityParser` exists for the
//! catalog queries psql, pgcli and drivers send. Some of its rewrites
//! change what a query returns: a correlated subquery in the select list
//! becomes `NULL`, an uncorrelated one gets `LIMIT 1` (PostgreSQL refuses a
//! second row with 21000), and names in ORDER BY are qualified with a
//! wildcard's table (the wrong one when two tables have the name). Those
//! are acceptable for a `\d` column DataFusion cannot plan, never for a
//! user's query over the store. So a statement that reads no system
//! catalog gets the crate's other rewrites, and only one that reads
//! `pg_catalog` or `information_schema` goes through the whole
//! compatibility parser (with its list of known client queries).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArgumentList, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, Statement, UnaryOperator, VisitMut, VisitorMut, visit_relations,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_pg_catalog::sql::rules::{
    AliasDuplicatedProjectionRewrite, FixArrayLiteral, FixVersionColumnName,
    PrependUnqualifiedPgTableName, RewriteArrayAnyAllOperation, RewritePgCatalogOperator,
    RewriteRegCastToSubquery, SqlStatementRewriteRule, StripCallableQualifier, StripCollate,
};

/// The analytics engine's SQL parser.
#[derive(Debug)]
pub struct SqlDialect {
    /// The crate's rewrites in its order, less `RemoveSubqueryFromProjection`
    /// and `ResolveUnqualifiedIdentifier` (it qualified `ORDER BY name`
    /// with a `t.*` table's name even when another table's `name` was
    /// meant), and with [`SpecialNames`] for its `current_user` to
    /// `session_user` renaming (which made `SELECT current_user,
    /// session_user` two columns of one name), and [`RowValues`].
    rules: Vec<Arc<dyn SqlStatementRewriteRule>>,
    catalog: PostgresCompatibilityParser,
}

impl Default for SqlDialect {
    fn default() -> Self {
        SqlDialect::new()
    }
}

impl SqlDialect {
    pub fn new() -> SqlDialect {
        SqlDialect {
            rules: vec![
                Arc::new(AliasDuplicatedProjectionRewrite),
                Arc::new(RewriteArrayAnyAllOperation),
                Arc::new(PrependUnqualifiedPgTableName),
                Arc::new(StripCallableQualifier),
                Arc::new(FixArrayLiteral),
                Arc::new(SpecialNames),
                Arc::new(RowValues),
                Arc::new(IntLiterals),
                Arc::new(WideLiterals),
                Arc::new(StripCollate),
                Arc::new(RewritePgCatalogOperator),
                Arc::new(RewriteRegCastToSubquery::new()),
                Arc::new(FixVersionColumnName),
            ],
            catalog: PostgresCompatibilityParser::new(),
        }
    }

    /// Parses `sql` into statements ready for DataFusion's planner.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
            // The compatibility parser replaces some client queries token
            // by token before parsing; it also gives the error otherwise.
            return self.catalog.parse(sql);
        };
        let statements: Vec<Statement> = statements
            .into_iter()
            .map(|s| self.rules.iter().fold(s, |s, r| r.rewrite(s)))
            .collect();
        if statements.iter().any(reads_system_catalog) {
            return self.catalog.parse(sql);
        }
        Ok(statements)
    }
}

/// `current_catalog` and a bare `current_schema` as the function calls
/// DataFusion plans (`current_user`, `session_user` and `user` are
/// functions of their own, [`super::functions`]).
#[derive(Debug)]
struct SpecialNames;

impl SqlStatementRewriteRule for SpecialNames {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = s.visit(&mut SpecialNames);
        s
    }
}

impl VisitorMut for SpecialNames {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let named = |e: &Expr, want: &str| match e {
            Expr::Identifier(i) => i.quote_style.is_none() && i.value.eq_ignore_ascii_case(want),
            Expr::Function(f) => {
                f.name.0.len() == 1
                    && f.name.0[0]
                        .as_ident()
                        .is_some_and(|i| i.value.eq_ignore_ascii_case(want))
            }
            _ => false,
        };
        if matches!(e, Expr::Identifier(_)) && named(e, "current_schema") {
            *e = empty_call("current_schema");
        } else if matches!(e, Expr::Function(_)) && named(e, "current_catalog") {
            *e = empty_call("current_database");
        }
        ControlFlow::Continue(())
    }
}

/// Row values compared element by element, as PostgreSQL defines them:
/// `(a, b) IN ((x, y), …)` is `(a = x AND b = y) OR …`, and
/// An integer literal in a select list has PostgreSQL's type: `integer`
/// when it fits, as `SELECT 1` does (DataFusion types every integer
/// literal bigint, and node-postgres hands a bigint back as a string).
/// Only a select item that is the literal itself (or its negation) is
/// cast: inside an expression DataFusion's wider arithmetic stays.
#[derive(Debug)]
struct IntLiterals;

impl SqlStatementRewriteRule for IntLiterals {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = s.visit(&mut IntLiterals);
        s
    }
}

impl VisitorMut for IntLiterals {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{DataType, SelectItem, SetExpr, Value};
        fn int4(e: &Expr) -> bool {
            match e {
                Expr::Value(v) => {
                    matches!(&v.value, Value::Number(n, _) if n.parse::<i32>().is_ok())
                }
                Expr::UnaryOp {
                    op: UnaryOperator::Minus,
                    expr,
                } => matches!(&**expr, Expr::Value(v)
                    if matches!(&v.value, Value::Number(n, _)
                        if format!("-{n}").parse::<i32>().is_ok())),
                _ => false,
            }
        }
        fn cast(e: &mut Expr) {
            if int4(e) {
                let inner = std::mem::replace(e, Expr::value(Value::Null));
                *e = Expr::Cast {
                    kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                    expr: Box::new(inner),
                    data_type: DataType::Integer(None),
                    array: false,
                    format: None,
                };
            }
        }
        fn visit(body: &mut SetExpr) {
            match body {
                SetExpr::Select(sel) => {
                    for item in &mut sel.projection {
                        match item {
                            SelectItem::UnnamedExpr(e)
                            | SelectItem::ExprWithAlias { expr: e, .. } => cast(e),
                            _ => {}
                        }
                    }
                }
                SetExpr::SetOperation { left, right, .. } => {
                    visit(left);
                    visit(right);
                }
                _ => {}
            }
        }
        visit(&mut q.body);
        ControlFlow::Continue(())
    }
}

/// A literal with a fraction is numeric (the engine parses it as a
/// decimal, so `0.1 + 0.2 = 0.3`, as in PostgreSQL). What a 38-digit
/// decimal cannot hold (`1e300`, 40 digits) is a double instead of an
/// error: PostgreSQL's numeric holds it, a double comes closest.
#[derive(Debug)]
struct WideLiterals;

impl SqlStatementRewriteRule for WideLiterals {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = s.visit(&mut WideLiterals);
        s
    }
}

impl VisitorMut for WideLiterals {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{DataType, Value};
        let Expr::Value(v) = e else {
            return ControlFlow::Continue(());
        };
        let Value::Number(n, _) = &v.value else {
            return ControlFlow::Continue(());
        };
        let digits = n.bytes().filter(u8::is_ascii_digit).count();
        if n.contains(['e', 'E']) || digits > 38 {
            let text = n.clone();
            *e = Expr::Cast {
                kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
                data_type: DataType::DoublePrecision,
                array: false,
                format: None,
            };
        }
        ControlFlow::Continue(())
    }
}

/// `(a, b) > (x, y)` is `a > x OR (a = x AND b > y)`. DataFusion compares
/// them as structs, where a NULL element equals a NULL element: a row
/// `NOT IN` list holding `('boston', NULL)` kept boston's rows, which
/// PostgreSQL leaves out (the comparison is unknown).
#[derive(Debug)]
struct RowValues;

impl SqlStatementRewriteRule for RowValues {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = s.visit(&mut RowValues);
        s
    }
}

impl VisitorMut for RowValues {
    type Break = ();

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let row = |e: &Expr| match e {
            Expr::Tuple(v) => Some(v.clone()),
            Expr::Nested(inner) => match &**inner {
                Expr::Tuple(v) => Some(v.clone()),
                _ => None,
            },
            _ => None,
        };
        let expanded = match &*e {
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let Some(left) = row(expr) else {
                    return ControlFlow::Continue(());
                };
                let Some(rows) = list
                    .iter()
                    .map(|item| row(item).filter(|r| r.len() == left.len()))
                    .collect::<Option<Vec<_>>>()
                else {
                    return ControlFlow::Continue(());
                };
                let any = rows
                    .iter()
                    .map(|r| row_comparison(&left, &BinaryOperator::Eq, r))
                    .reduce(|a, b| binary(a, BinaryOperator::Or, b));
                match (any, negated) {
                    (Some(any), true) => Expr::UnaryOp {
                        op: UnaryOperator::Not,
                        expr: Box::new(nested(any)),
                    },
                    (Some(any), false) => any,
                    (None, _) => return ControlFlow::Continue(()),
                }
            }
            Expr::BinaryOp { left, op, right } => match (row(left), row(right)) {
                (Some(l), Some(r)) if l.len() == r.len() && !l.is_empty() => match op {
                    BinaryOperator::Eq
                    | BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq => row_comparison(&l, op, &r),
                    _ => return ControlFlow::Continue(()),
                },
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        *e = nested(expanded);
        ControlFlow::Continue(())
    }
}

/// `(l…) op (r…)` element by element (equal, non-empty lengths).
fn row_comparison(l: &[Expr], op: &BinaryOperator, r: &[Expr]) -> Expr {
    let cmp = |i: usize, op: BinaryOperator| binary(l[i].clone(), op, r[i].clone());
    let all = |parts: Vec<Expr>| {
        parts
            .into_iter()
            .reduce(|a, b| binary(a, BinaryOperator::And, b))
    };
    let equal = |n: usize| all((0..n).map(|i| cmp(i, BinaryOperator::Eq)).collect());
    let n = l.len();
    match op {
        BinaryOperator::Eq => nested(equal(n).expect("non-empty")),
        BinaryOperator::NotEq => Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(nested(equal(n).expect("non-empty"))),
        },
        _ => {
            let strict = match op {
                BinaryOperator::Lt | BinaryOperator::LtEq => BinaryOperator::Lt,
                _ => BinaryOperator::Gt,
            };
            (0..n)
                .map(|i| {
                    let last = if i + 1 == n {
                        op.clone()
                    } else {
                        strict.clone()
                    };
                    let mut parts: Vec<Expr> = (0..i).map(|j| cmp(j, BinaryOperator::Eq)).collect();
                    parts.push(cmp(i, last));
                    nested(all(parts).expect("non-empty"))
                })
                .reduce(|a, b| binary(a, BinaryOperator::Or, b))
                .map(nested)
                .expect("non-empty")
        }
    }
}

fn binary(left: Expr, op: BinaryOperator, right: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(left),
        op,
        right: Box::new(right),
    }
}

fn nested(e: Expr) -> Expr {
    match e {
        Expr::Nested(_) => e,
        e => Expr::Nested(Box::new(e)),
    }
}

/// `name()`.
fn empty_call(name: &str) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        args: FunctionArguments::List(FunctionArgumentList {
            args: vec![],
            duplicate_treatment: None,
            clauses: vec![],
        }),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// True when `s` names a relation in `pg_catalog` or `information_schema`
/// (unqualified pg_catalog names are qualified by then).
fn reads_system_catalog(s: &Statement) -> bool {
    visit_relations(s, |name: &ObjectName| {
        let first = name.0.first().and_then(ObjectNamePart::as_ident);
        match first {
            Some(i)
                if name.0.len() > 1
                    && (i.value.eq_ignore_ascii_case("pg_catalog")
                        || i.value.eq_ignore_ascii_case("information_schema")) =>
            {
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        }
    })
    .is_break()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> String {
        let mut s = SqlDialect::new().parse(sql).unwrap();
        assert_eq!(s.len(), 1);
        s.remove(0).to_string()
    }

    #[test]
    fn subqueries_over_user_tables_are_kept_as_written() {
        let sql = "SELECT c.id, (SELECT max(o.amount) FROM ord AS o WHERE o.cid = c.id) AS mx FROM cust AS c";
        assert_eq!(one(sql), sql);
        let sql = "SELECT (SELECT o.amount FROM ord AS o) AS a";
        assert_eq!(one(sql), sql);
        // Not qualified with the wildcard's table (which picked the wrong
        // `name` when both tables have one); DataFusion resolves it.
        let sql = "SELECT o.*, c.name FROM ord AS o JOIN cust AS c ON o.cid = c.id ORDER BY name";
        assert_eq!(one(sql), sql);
    }

    #[test]
    fn catalog_queries_get_the_compatibility_rewrites() {
        // psql's `\d` asks for a correlated subquery DataFusion cannot plan.
        let sql = "SELECT a.attname, (SELECT d.adbin FROM pg_attrdef d WHERE d.adrelid = a.attrelid) AS def FROM pg_catalog.pg_attribute a";
        assert!(one(sql).contains("NULL AS def"), "{}", one(sql));
        assert!(one("SELECT * FROM pg_class").contains("pg_catalog.pg_class"));
        assert_eq!(one("SELECT version()"), "SELECT version() AS version");
        assert_eq!(
            one("SELECT current_user, session_user, current_schema, current_catalog"),
            "SELECT current_user, session_user, current_schema(), current_database()"
        );
    }

    #[test]
    fn literals_take_postgresql_types() {
        assert_eq!(
            one("SELECT 1, -2, 3000000000, 1 + 1, 'x' AS s FROM t"),
            "SELECT CAST(1 AS INTEGER), CAST(-2 AS INTEGER), 3000000000, 1 + 1, 'x' AS s FROM t"
        );
        assert_eq!(
            one("SELECT x FROM (SELECT 7 AS x UNION SELECT 8) AS s"),
            "SELECT x FROM (SELECT CAST(7 AS INTEGER) AS x UNION SELECT CAST(8 AS INTEGER)) AS s"
        );
        assert_eq!(
            one("SELECT f * 1e300, 1.5 FROM t"),
            "SELECT f * CAST('1e300' AS DOUBLE PRECISION), 1.5 FROM t"
        );
    }

    #[test]
    fn row_values_are_compared_element_by_element() {
        assert_eq!(
            one("SELECT x FROM t WHERE (a, b) NOT IN ((1, 2), (3, NULL))"),
            "SELECT x FROM t WHERE (NOT ((a = 1 AND b = 2) OR (a = 3 AND b = NULL)))"
        );
        assert_eq!(
            one("SELECT x FROM t WHERE (a, b, c) >= (1, 2, 3)"),
            "SELECT x FROM t WHERE ((a > 1) OR (a = 1 AND b > 2) OR (a = 1 AND b = 2 AND c >= 3))"
        );
        assert_eq!(
            one("SELECT x FROM t WHERE (a, b) <> (1, 2)"),
            "SELECT x FROM t WHERE (NOT (a = 1 AND b = 2))"
        );
        // Not rows of one length: left for DataFusion's error.
        let sql = "SELECT x FROM t WHERE (a, b) IN ((1, 2, 3))";
        assert_eq!(one(sql), sql);
    }

    #[test]
    fn syntax_errors_are_errors() {
        assert!(SqlDialect::new().parse("SELEC 1").is_err());
    }
}
