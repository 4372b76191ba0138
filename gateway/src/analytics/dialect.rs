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
use std::sync::{Arc, LazyLock};

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

/// A rewrite rule that is a [`VisitorMut`] run over the whole statement.
macro_rules! visitor_rule {
    ($rule:ident) => {
        impl SqlStatementRewriteRule for $rule {
            fn rewrite(&self, mut s: Statement) -> Statement {
                let _ = s.visit(&mut $rule);
                s
            }
        }
    };
}

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
    /// The process's parser, shared by every session: the rules hold no
    /// session state, and the compatibility parser's list of known client
    /// queries, kept as tokens, was most of a session's memory when each
    /// session tokenized its own.
    pub fn shared() -> &'static SqlDialect {
        static SHARED: LazyLock<SqlDialect> = LazyLock::new(SqlDialect::new);
        &SHARED
    }

    pub fn new() -> SqlDialect {
        SqlDialect {
            rules: vec![
                Arc::new(AliasDuplicatedProjectionRewrite),
                Arc::new(UniqueNames),
                Arc::new(super::decorrelate::Decorrelate),
                Arc::new(VarcharLength),
                Arc::new(RewriteArrayAnyAllOperation),
                Arc::new(PrependUnqualifiedPgTableName),
                Arc::new(StripCallableQualifier),
                Arc::new(FixArrayLiteral),
                Arc::new(SpecialNames),
                Arc::new(RowValues),
                Arc::new(FunctionAlias),
                Arc::new(IntLiterals),
                Arc::new(DistinctOrderBy),
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
            return Ok(self
                .catalog
                .parse(sql)?
                .into_iter()
                .map(|s| PsqlCatalog.rewrite(s))
                .collect());
        }
        Ok(statements)
    }
}

/// `FROM generate_series(…) g`: PostgreSQL names a single-column
/// function's column after the table alias, so `g` is the number; in
/// DataFusion the column stays `value`. The alias gets its column list
/// (`g(g)`), as PostgreSQL reads it.
#[derive(Debug)]
struct FunctionAlias;

visitor_rule!(FunctionAlias);

impl VisitorMut for FunctionAlias {
    type Break = ();

    fn pre_visit_table_factor(
        &mut self,
        tf: &mut datafusion::sql::sqlparser::ast::TableFactor,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{TableAliasColumnDef, TableFactor};
        if let TableFactor::Table {
            name,
            args: Some(_),
            alias: Some(alias),
            ..
        } = tf
            && alias.columns.is_empty()
            && name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("generate_series"))
        {
            alias.columns = vec![TableAliasColumnDef::from_name(alias.name.value.clone())];
        }
        ControlFlow::Continue(())
    }
}

/// What psql's describe queries (`\\d+`, `\\du`, `\\dp`, `\\dn+`, `\\l+`,
/// `\\dT`) use that the catalog tables here cannot answer, answered as
/// PostgreSQL answers for a database with no privileges granted, no
/// options, policies or role memberships:
/// - `ARRAY(subquery)`: NULL (a list of none of those);
/// - privilege and option columns (`relacl`, `nspacl`, `reloptions`,
///   `setconfig`, …), `pg_settings.boot_val`, the system column
///   `tableoid` (`\\dL` joins descriptions on it), and `array_to_string`
///   of anything built from them: NULL;
/// - a correlated scalar subquery whose item is not an aggregate (`\\dT`'s
///   `(SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid = t.typrelid)`):
///   its item is wrapped in `max()`, the same value when it matches one row
///   (catalog lookups by oid do).
///
/// Only statements that read `pg_catalog` or `information_schema` get it.
#[derive(Debug)]
struct PsqlCatalog;

visitor_rule!(PsqlCatalog);

impl VisitorMut for PsqlCatalog {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, SelectItem, SetExpr};
        let null = || Expr::value(datafusion::sql::sqlparser::ast::Value::Null);
        let is_acl = |e: &Expr| unanswered_column(e);
        let called = |f: &Function, want: &str| {
            f.name
                .0
                .last()
                .and_then(ObjectNamePart::as_ident)
                .is_some_and(|i| i.value.eq_ignore_ascii_case(want))
        };
        match e {
            Expr::Function(f) if called(f, "array") => {
                if let FunctionArguments::Subquery(_) = f.args {
                    *e = null();
                }
            }
            Expr::Function(f) if called(f, "array_to_string") => {
                if let FunctionArguments::List(FunctionArgumentList { args, .. }) = &f.args
                    && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = args.first()
                    && mentions_unanswered(first)
                {
                    *e = null();
                }
            }
            // generate_subscripts(a, 1) beside unnest(a) (SQLAlchemy's
            // primary-key reflection): the positions 1..n as a list, unnested
            // in step with it.
            Expr::Function(f) if called(f, "generate_subscripts") => {
                if let FunctionArguments::List(FunctionArgumentList { args, .. }) = &f.args
                    && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(array))) = args.first()
                {
                    let n = Expr::Cast {
                        kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                        expr: Box::new(call("cardinality", vec![array.clone()])),
                        data_type: datafusion::sql::sqlparser::ast::DataType::BigInt(None),
                        array: false,
                        format: None,
                    };
                    let one = Expr::value(datafusion::sql::sqlparser::ast::Value::Number(
                        "1".into(),
                        false,
                    ));
                    *e = call("unnest", vec![call("generate_series", vec![one, n])]);
                }
            }
            // PostgreSQL 15's name for what the catalog (PostgreSQL 17's
            // columns) calls colllocale; psql 15's `\\dO` asks for it.
            Expr::Identifier(i) if i.value.eq_ignore_ascii_case("colliculocale") => {
                i.value = "colllocale".into();
            }
            Expr::CompoundIdentifier(ids)
                if ids
                    .last()
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("colliculocale")) =>
            {
                if let Some(i) = ids.last_mut() {
                    i.value = "colllocale".into();
                }
            }
            _ if is_acl(e) => *e = null(),
            Expr::Subquery(q) => {
                if let SetExpr::Select(sel) = &mut *q.body
                    && sel.selection.is_some()
                    && sel.group_by
                        == datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(vec![], vec![])
                    && let [SelectItem::UnnamedExpr(item)] = sel.projection.as_mut_slice()
                    && !matches!(item, Expr::Function(_))
                {
                    let inner = std::mem::replace(item, null());
                    *item = call("max", vec![inner]);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// A column the catalog tables here do not have: privileges (`relacl`,
/// `attacl`, …) and storage options (`reloptions`).
fn unanswered_column(e: &Expr) -> bool {
    let name = match e {
        Expr::Identifier(i) => &i.value,
        Expr::CompoundIdentifier(ids) => match ids.last() {
            Some(i) => &i.value,
            None => return false,
        },
        _ => return false,
    };
    let name = name.to_ascii_lowercase();
    name.ends_with("acl")
        || matches!(
            name.as_str(),
            "reloptions" | "setconfig" | "boot_val" | "tableoid"
        )
}

/// `e` reads an [`unanswered_column`] or is built from `ARRAY(subquery)`.
fn mentions_unanswered(e: &Expr) -> bool {
    use datafusion::sql::sqlparser::ast::Visit;
    struct Finder;
    impl datafusion::sql::sqlparser::ast::Visitor for Finder {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            let array_subquery = matches!(e, Expr::Function(f)
                if matches!(f.args, FunctionArguments::Subquery(_))
                    && f.name.0.last().and_then(ObjectNamePart::as_ident)
                        .is_some_and(|i| i.value.eq_ignore_ascii_case("array")));
            if array_subquery || unanswered_column(e) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    e.visit(&mut Finder).is_break()
}

/// `current_catalog` and a bare `current_schema` as the function calls
/// DataFusion plans (`current_user`, `session_user` and `user` are
/// functions of their own, [`super::functions`]).
#[derive(Debug)]
struct SpecialNames;

visitor_rule!(SpecialNames);

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

/// An integer literal in a select list has PostgreSQL's type: `integer`
/// when it fits, as `SELECT 1` does (DataFusion types every integer
/// literal bigint, and node-postgres hands a bigint back as a string).
/// A select item that is the literal, and the literals in its arithmetic
/// and CASE results, are cast, so `1 + 1` and `n * 2` over an `integer`
/// column are `integer` too (and fail with 22003 past its range, as
/// PostgreSQL's do). Function arguments keep DataFusion's types, but for
/// those of `pg_typeof` and `to_hex`, whose answers show the type. The same
/// expressions in GROUP BY and ORDER BY get the same casts, so they still
/// match their select item; a bare number there is a position, left alone.
#[derive(Debug)]
struct IntLiterals;

visitor_rule!(IntLiterals);

impl IntLiterals {
    /// Casts the int4 literals of `e`: `e` itself when `bare`, and those in
    /// its arithmetic operands and CASE results.
    fn cast(e: &mut Expr, bare: bool) {
        use datafusion::sql::sqlparser::ast::{DataType, Value};
        let number = |e: &Expr, sign: &str| {
            matches!(e, Expr::Value(v)
                if matches!(&v.value, Value::Number(n, _) if format!("{sign}{n}").parse::<i32>().is_ok()))
        };
        let literal = match &*e {
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => number(expr, "-"),
            other => number(other, ""),
        };
        if literal {
            if bare {
                let inner = std::mem::replace(e, Expr::value(Value::Null));
                *e = Expr::Cast {
                    kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                    expr: Box::new(inner),
                    data_type: DataType::Integer(None),
                    array: false,
                    format: None,
                };
            }
            return;
        }
        match e {
            Expr::BinaryOp {
                left,
                op:
                    BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
                    | BinaryOperator::Modulo,
                right,
            } => {
                IntLiterals::cast(left, true);
                IntLiterals::cast(right, true);
            }
            Expr::UnaryOp {
                op: UnaryOperator::Minus | UnaryOperator::Plus,
                expr,
            } => IntLiterals::cast(expr, true),
            Expr::Nested(inner) => IntLiterals::cast(inner, true),
            // What `pg_typeof` reports is what the select item would be;
            // `to_hex(-1)` is `ffffffff`, of an integer.
            Expr::Function(f)
                if ["pg_typeof", "to_hex"]
                    .iter()
                    .any(|n| f.name.to_string().eq_ignore_ascii_case(n)) =>
            {
                if let FunctionArguments::List(list) = &mut f.args
                    && let [
                        datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
                            datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(arg),
                        ),
                    ] = list.args.as_mut_slice()
                {
                    IntLiterals::cast(arg, true);
                }
            }
            Expr::Case {
                conditions,
                else_result,
                ..
            } => {
                for c in conditions {
                    IntLiterals::cast(&mut c.result, true);
                }
                if let Some(e) = else_result {
                    IntLiterals::cast(e, true);
                }
            }
            _ => {}
        }
    }
}

impl VisitorMut for IntLiterals {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{GroupByExpr, OrderByKind, SelectItem};
        for_each_select(&mut q.body, &mut |sel| {
            for item in &mut sel.projection {
                match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        IntLiterals::cast(e, true)
                    }
                    _ => {}
                }
            }
            if let GroupByExpr::Expressions(exprs, _) = &mut sel.group_by {
                for e in exprs {
                    IntLiterals::cast(e, false);
                }
            }
        });
        if let Some(OrderByKind::Expressions(exprs)) = q.order_by.as_mut().map(|o| &mut o.kind) {
            for o in exprs {
                IntLiterals::cast(&mut o.expr, false);
            }
        }
        // `VALUES (1), (2)` is a column of integer; with `(3000000000)` in
        // it, bigint, as the rows' common type.
        fn values(body: &mut datafusion::sql::sqlparser::ast::SetExpr) {
            use datafusion::sql::sqlparser::ast::SetExpr;
            match body {
                SetExpr::Values(v) => {
                    for e in v.rows.iter_mut().flat_map(|r| r.content.iter_mut()) {
                        IntLiterals::cast(e, true);
                    }
                }
                SetExpr::SetOperation { left, right, .. } => {
                    values(left);
                    values(right);
                }
                _ => {}
            }
        }
        values(&mut q.body);
        ControlFlow::Continue(())
    }
}

/// `SELECT DISTINCT a + b … ORDER BY a + b`: the ORDER BY item that is a
/// select item's expression becomes that item's position, which
/// DataFusion accepts (it refuses the expression, wanting its columns in
/// the select list, where PostgreSQL matches the whole expression).
#[derive(Debug)]
struct DistinctOrderBy;

visitor_rule!(DistinctOrderBy);

impl VisitorMut for DistinctOrderBy {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{OrderByKind, SelectItem, SetExpr, Value};
        let SetExpr::Select(sel) = &*q.body else {
            return ControlFlow::Continue(());
        };
        // A position counts select items, and `*` is one item of many columns.
        let wildcard = sel.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
        if sel.distinct.is_none() || wildcard {
            return ControlFlow::Continue(());
        }
        let Some(OrderByKind::Expressions(exprs)) = q.order_by.as_mut().map(|o| &mut o.kind) else {
            return ControlFlow::Continue(());
        };
        for o in exprs {
            if matches!(
                o.expr,
                Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Value(_)
            ) {
                continue;
            }
            let position = sel.projection.iter().position(|item| match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    *e == o.expr
                }
                _ => false,
            });
            if let Some(i) = position {
                o.expr = Expr::value(Value::Number((i + 1).to_string(), false));
            }
        }
        ControlFlow::Continue(())
    }
}

/// `CAST(x AS varchar(n))` keeps the first `n` characters, as PostgreSQL's
/// explicit cast does (DataFusion ignores the length).
#[derive(Debug)]
struct VarcharLength;

visitor_rule!(VarcharLength);

impl VisitorMut for VarcharLength {
    type Break = ();

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{CharacterLength, DataType, Value};
        let Expr::Cast {
            data_type:
                data_type @ (DataType::Varchar(Some(CharacterLength::IntegerLength { .. }))
                | DataType::CharacterVarying(Some(CharacterLength::IntegerLength { .. }))),
            ..
        } = e
        else {
            return ControlFlow::Continue(());
        };
        let (DataType::Varchar(Some(CharacterLength::IntegerLength { length, .. }))
        | DataType::CharacterVarying(Some(CharacterLength::IntegerLength { length, .. }))) =
            data_type.clone()
        else {
            return ControlFlow::Continue(());
        };
        *data_type = DataType::Varchar(None);
        let cast = std::mem::replace(e, Expr::value(Value::Null));
        *e = call(
            "left",
            vec![cast, Expr::value(Value::Number(length.to_string(), false))],
        );
        ControlFlow::Continue(())
    }
}

/// Select items DataFusion would name alike get aliases of their own:
/// PostgreSQL allows `SELECT a + 1, a + 1` and two scalar subqueries in one
/// select list (DataFusion names every subquery `(<subquery>)`), DataFusion
/// refuses a projection with two columns of one name. The result's names
/// are PostgreSQL's again afterwards (`pg_column_names`).
#[derive(Debug)]
struct UniqueNames;

visitor_rule!(UniqueNames);

impl VisitorMut for UniqueNames {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{SelectItem, Value, visit_expressions_mut};
        for_each_select(&mut q.body, &mut |sel| {
            let mut seen = std::collections::HashSet::new();
            for (i, item) in sel.projection.iter_mut().enumerate() {
                let key = match item {
                    SelectItem::UnnamedExpr(Expr::Subquery(_)) => "(<subquery>)".to_owned(),
                    SelectItem::UnnamedExpr(Expr::Identifier(id)) => id.value.to_lowercase(),
                    // Identifiers of two tables (`a.id, b.id`) are
                    // told apart by their qualifiers already.
                    SelectItem::UnnamedExpr(Expr::CompoundIdentifier(_)) => continue,
                    // DataFusion leaves casts out of a name: `a - 1` and
                    // `a::bigint - 1` are named alike.
                    SelectItem::UnnamedExpr(other) => {
                        let mut bare = other.clone();
                        let _ = visit_expressions_mut(&mut bare, |e| {
                            if let Expr::Cast { expr, .. } = e {
                                *e = std::mem::replace(&mut **expr, Expr::value(Value::Null));
                            }
                            ControlFlow::<()>::Continue(())
                        });
                        bare.to_string()
                    }
                    _ => continue,
                };
                if seen.insert(key) {
                    continue;
                }
                let placeholder = SelectItem::UnnamedExpr(Expr::value(
                    datafusion::sql::sqlparser::ast::Value::Null,
                ));
                if let SelectItem::UnnamedExpr(expr) = std::mem::replace(item, placeholder) {
                    *item = SelectItem::ExprWithAlias {
                        expr,
                        alias: Ident::new(format!("__tg_column_{}", i + 1)),
                    };
                }
            }
        });
        ControlFlow::Continue(())
    }
}

/// A literal with a fraction is numeric (the engine parses it as a
/// decimal, so `0.1 + 0.2 = 0.3`, as in PostgreSQL). What a 38-digit
/// decimal cannot hold (`1e300`, 40 digits) is a double instead of an
/// error: PostgreSQL's numeric holds it, a double comes closest.
#[derive(Debug)]
struct WideLiterals;

visitor_rule!(WideLiterals);

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

/// Row values compared element by element, as PostgreSQL defines them:
/// `(a, b) IN ((x, y), …)` is `(a = x AND b = y) OR …`, and
/// `(a, b) > (x, y)` is `a > x OR (a = x AND b > y)`. DataFusion compares
/// them as structs, where a NULL element equals a NULL element: a row
/// `NOT IN` list holding `('boston', NULL)` kept boston's rows, which
/// PostgreSQL leaves out (the comparison is unknown).
#[derive(Debug)]
struct RowValues;

visitor_rule!(RowValues);

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
    call(name, vec![])
}

/// Calls `f` with each SELECT of a query body (both sides of UNION,
/// INTERSECT and EXCEPT); not those of nested queries, which the visitor
/// reaches itself.
fn for_each_select(
    body: &mut datafusion::sql::sqlparser::ast::SetExpr,
    f: &mut dyn FnMut(&mut datafusion::sql::sqlparser::ast::Select),
) {
    use datafusion::sql::sqlparser::ast::SetExpr;
    match body {
        SetExpr::Select(sel) => f(sel),
        SetExpr::SetOperation { left, right, .. } => {
            for_each_select(left, f);
            for_each_select(right, f);
        }
        _ => {}
    }
}

/// `name(args…)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr};
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        args: FunctionArguments::List(FunctionArgumentList {
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
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
    fn a_cast_to_varchar_n_keeps_n_characters() {
        assert_eq!(
            one("SELECT CAST(s AS VARCHAR(2)), 'abc'::character varying(1), s::varchar FROM t"),
            "SELECT left(CAST(s AS VARCHAR), 2), left('abc'::VARCHAR, 1), s::VARCHAR AS \
             __tg_column_3 FROM t"
        );
    }

    #[test]
    fn select_items_named_alike_get_aliases_of_their_own() {
        assert_eq!(
            one("SELECT a + 1, a + 1, (SELECT 1 FROM t), (SELECT 2 FROM u), b, b FROM t"),
            "SELECT a + CAST(1 AS INTEGER), a + CAST(1 AS INTEGER) AS __tg_column_2, \
             (SELECT CAST(1 AS INTEGER) FROM t), (SELECT CAST(2 AS INTEGER) FROM u) AS \
             __tg_column_4, b, b AS __tg_column_6 FROM t"
        );
        // Casts are not in DataFusion's names.
        assert_eq!(
            one("SELECT a, a::bigint FROM t"),
            "SELECT a, a::BIGINT AS __tg_column_2 FROM t"
        );
        // Columns of two tables keep their qualifiers and names.
        let sql = "SELECT x.id, y.id FROM x JOIN y ON x.k = y.k";
        assert_eq!(one(sql), sql);
    }

    #[test]
    fn psql_describe_queries_read_no_grants_options_or_memberships() {
        let sql = "SELECT pg_catalog.array_to_string(c.relacl, E'\\n') AS p, \
                   pg_catalog.array_to_string(ARRAY(SELECT x FROM pg_catalog.pg_policy pol WHERE pol.polrelid = c.oid), E'\\n') AS q \
                   FROM pg_catalog.pg_class c \
                   WHERE (SELECT c2.relkind = 'c' FROM pg_catalog.pg_class c2 WHERE c2.oid = c.oid)";
        let out = one(sql);
        assert!(
            out.contains("NULL AS p") && out.contains("NULL AS q"),
            "{out}"
        );
        assert!(out.contains("max(c2.relkind = 'c')"), "{out}");
        // A user's own query keeps its subqueries and arrays as written.
        let sql = "SELECT array_to_string(ARRAY(SELECT v FROM t), ',') AS s FROM u";
        assert!(one(sql).contains("ARRAY(SELECT v FROM t)"), "{}", one(sql));
    }

    #[test]
    fn literals_take_postgresql_types() {
        assert_eq!(
            one("SELECT 1, -2, 3000000000, 1 + 1, 'x' AS s FROM t"),
            "SELECT CAST(1 AS INTEGER), CAST(-2 AS INTEGER), 3000000000, \
             CAST(1 AS INTEGER) + CAST(1 AS INTEGER), 'x' AS s FROM t"
        );
        // The same casts in GROUP BY and ORDER BY; a bare number there is a
        // position; function arguments keep their types, but pg_typeof's.
        assert_eq!(
            one(
                "SELECT a * 2, CASE WHEN b THEN 1 ELSE 0 END, round(a, 2), pg_typeof(a - 1) \
                 FROM t GROUP BY a * 2, CASE WHEN b THEN 1 ELSE 0 END, 3, 4 ORDER BY 1, a * 2"
            ),
            "SELECT a * CAST(2 AS INTEGER), CASE WHEN b THEN CAST(1 AS INTEGER) ELSE \
             CAST(0 AS INTEGER) END, round(a, 2), pg_typeof(a - CAST(1 AS INTEGER)) FROM t \
             GROUP BY a * CAST(2 AS INTEGER), CASE WHEN b THEN CAST(1 AS INTEGER) ELSE \
             CAST(0 AS INTEGER) END, 3, 4 ORDER BY 1, a * CAST(2 AS INTEGER)"
        );
        // Under DISTINCT, an ORDER BY expression of the select list is its position.
        assert_eq!(
            one("SELECT DISTINCT a + b AS s, c FROM t ORDER BY c, a + b DESC"),
            "SELECT DISTINCT a + b AS s, c FROM t ORDER BY c, 1 DESC"
        );
        assert_eq!(
            one("SELECT DISTINCT *, a + b FROM t ORDER BY a + b"),
            "SELECT DISTINCT *, a + b FROM t ORDER BY a + b"
        );
        assert_eq!(
            one("SELECT x FROM (VALUES (1), (3000000000), (-2 * 3)) AS v(x)"),
            "SELECT x FROM (VALUES (CAST(1 AS INTEGER)), (3000000000), \
             (CAST(-2 AS INTEGER) * CAST(3 AS INTEGER))) AS v (x)"
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
