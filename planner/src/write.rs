//! Write planning: INSERT, UPDATE and DELETE bound against the catalog.
//!
//! A [`WritePlan`] says which entities a statement touches and how each
//! one's new state is computed; [`crate::apply`] runs it (autocommit: as
//! entity-group transactions per PartitionKey; inside BEGIN: staged in the
//! [`crate::txn::Transaction`]).
//!
//! - `INSERT ... VALUES` / `INSERT ... SELECT`: rows become Insert
//!   operations (an existing key is 23505).
//! - `ON CONFLICT (pk, rk) DO UPDATE SET c = EXCLUDED.c, ...` is a blind
//!   InsertOrMerge when it sets exactly the columns the INSERT supplies,
//!   and InsertOrReplace when it sets every column; any other SET (an
//!   expression over the current row, a subset of the columns) is read,
//!   then Insert or Merge with If-Match. `DO NOTHING` reads, then inserts
//!   the absent keys.
//! - `UPDATE` / `DELETE`: the WHERE is classified like a query's and the
//!   matched entities are written with If-Match of the ETag they were read
//!   with; `WHERE etag = '...'` is therefore an explicit If-Match.
//!
//! Deliberately limited: values are constants, parameters, columns,
//! `EXCLUDED.column`, arithmetic, `||`, casts, `now()` and
//! `gen_random_uuid()`; key columns cannot be updated (a key is the
//! entity's identity in the store).

use std::sync::Arc;

use sqlparser::ast::{self, BinaryOperator, Expr, SelectItem, UnaryOperator};
use tablegate_catalog::{Catalog, ColumnDefault, ColumnRef, Role, SqlType, TableDef};
use tablegate_store::{Entity, Value};

use crate::error::{PlanError, Result};
use crate::expr::{BExpr, Binder, Count, char_position, fold};
use crate::plan::{OutputColumn, Route, SelectPlan, plan_query};

/// A planned INSERT, UPDATE or DELETE.
#[derive(Debug, Clone)]
pub struct WritePlan {
    /// The table written.
    pub table: Arc<TableDef>,
    /// What the statement does.
    pub kind: WriteKind,
    /// RETURNING columns (empty: no RETURNING).
    pub returning: Vec<OutputColumn>,
    /// Parameter types by index.
    pub param_types: Vec<SqlType>,
}

/// The statement forms.
#[derive(Debug, Clone)]
pub enum WriteKind {
    /// INSERT.
    Insert {
        /// Target columns, in the order values are given.
        columns: Vec<ColumnRef>,
        /// Every user column of the table, in declaration order, with the
        /// index in `columns` of the value that fills it (`None`: its
        /// DEFAULT): resolved once when planned, shared by every row.
        targets: Vec<(Arc<ColumnRef>, Option<usize>)>,
        /// The rows.
        source: InsertSource,
        /// ON CONFLICT.
        conflict: OnConflict,
    },
    /// UPDATE.
    Update {
        /// SET column = value.
        set: Vec<(ColumnRef, VExpr)>,
        /// The matched entities, as a query (all columns).
        scan: Arc<SelectPlan>,
    },
    /// DELETE.
    Delete {
        /// The matched entities, as a query (all columns).
        scan: Arc<SelectPlan>,
    },
}

/// Where INSERT's rows come from.
#[derive(Debug, Clone)]
pub enum InsertSource {
    /// `VALUES (...), (...)`.
    Values(Vec<Vec<VExpr>>),
    /// `INSERT ... SELECT` (native path).
    Query(Arc<SelectPlan>),
}

/// ON CONFLICT.
#[derive(Debug, Clone)]
pub enum OnConflict {
    /// No clause: an existing key is 23505.
    Error,
    /// `DO NOTHING`.
    DoNothing,
    /// `DO UPDATE SET ...`.
    Update {
        /// Assignments (may use `EXCLUDED.col` and the current row).
        set: Vec<(ColumnRef, VExpr)>,
        /// `Some` when the update is a blind upsert: `true` InsertOrMerge,
        /// `false` InsertOrReplace.
        blind_merge: Option<bool>,
    },
}

impl WritePlan {
    /// The command tag's verb.
    pub fn verb(&self) -> &'static str {
        match self.kind {
            WriteKind::Insert { .. } => "INSERT",
            WriteKind::Update { .. } => "UPDATE",
            WriteKind::Delete { .. } => "DELETE",
        }
    }

    /// An INSERT's resolved columns ([`WriteKind::Insert::targets`]);
    /// `None` for UPDATE and DELETE.
    pub fn insert_targets(&self) -> Option<&[(Arc<ColumnRef>, Option<usize>)]> {
        match &self.kind {
            WriteKind::Insert { targets, .. } => Some(targets),
            _ => None,
        }
    }
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
}

/// A value expression of a write.
#[derive(Debug, Clone, PartialEq)]
pub enum VExpr {
    /// A constant.
    Lit(Value),
    /// NULL.
    Null,
    /// `DEFAULT`.
    Default,
    /// `$n` (0-based).
    Param(usize),
    /// A column of the current row (UPDATE, ON CONFLICT DO UPDATE).
    Column(ColumnRef),
    /// `EXCLUDED.col`: the value proposed for insertion.
    Excluded(ColumnRef),
    /// Arithmetic.
    Arith(Box<VExpr>, ArithOp, Box<VExpr>),
    /// Unary minus.
    Neg(Box<VExpr>),
    /// `a || b`.
    Concat(Box<VExpr>, Box<VExpr>),
    /// `CAST(x AS type)` / `x::type`.
    Cast(Box<VExpr>, SqlType),
    /// `now()`.
    Now,
    /// `gen_random_uuid()`.
    RandomUuid,
}

/// A row proposed for insertion: every user column's value. The columns
/// are shared by every row of a statement (a 100-row INSERT would
/// otherwise copy each column's name 100 times).
pub type Row = Vec<(Arc<ColumnRef>, Option<Value>)>;

/// What an expression is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct EvalCtx<'a> {
    /// The table.
    pub table: &'a TableDef,
    /// Parameter values.
    pub params: &'a [Option<Value>],
    /// The current row (UPDATE, conflict).
    pub current: Option<&'a Entity>,
    /// The proposed row (`EXCLUDED`).
    pub excluded: Option<&'a Row>,
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A column's DEFAULT (NULL when it has none).
pub fn default_value(col: &ColumnRef, table: &TableDef) -> Result<Option<Value>> {
    let def = table
        .columns
        .iter()
        .find(|c| c.name == col.name)
        .and_then(|c| c.default.clone());
    Ok(match def {
        None => None,
        Some(ColumnDefault::Constant(t)) => Some(col.ty.parse_text(&t)?),
        Some(ColumnDefault::Now) => Some(Value::DateTime(tablegate_store::DateTime(now_micros()))),
        Some(ColumnDefault::RandomUuid) => Some(Value::Guid(*uuid::Uuid::new_v4().as_bytes())),
        Some(ColumnDefault::Identity { .. }) => {
            let id = crate::identity::take(&table.name, &col.name)?;
            Some(match col.ty {
                SqlType::Int4 => Value::Int32(i32::try_from(id).map_err(|_| {
                    PlanError::InvalidValue(format!(
                        "identity column \"{}\" reached the end of integer: declare it bigint (bigserial)",
                        col.name
                    ))
                })?),
                _ => Value::Int64(id),
            })
        }
        Some(ColumnDefault::Bucket) => Some(Value::String(SESSION_BUCKET.with(|b| b.clone()))),
        Some(ColumnDefault::RowId) => Some(Value::String(format!(
            "{:014x}-{:016x}",
            now_micros(),
            uuid::Uuid::new_v4().as_u128() as u64
        ))),
    })
}

thread_local! {
    /// A table without a primary key puts this connection's rows in one
    /// hash bucket (connections run on threads of their own), so one
    /// session's transaction stays in one PartitionKey while concurrent
    /// sessions spread over the buckets.
    static SESSION_BUCKET: String = format!(
        "b{:02}",
        uuid::Uuid::new_v4().as_u128() % u128::from(tablegate_catalog::HIDDEN_BUCKETS)
    );
}

impl VExpr {
    /// Evaluates to a value (`None` is NULL). `DEFAULT` is the caller's.
    pub fn eval(&self, ctx: &EvalCtx<'_>) -> Result<Option<Value>> {
        Ok(match self {
            VExpr::Lit(v) => Some(v.clone()),
            VExpr::Null | VExpr::Default => None,
            VExpr::Param(n) => ctx.params.get(*n).cloned().ok_or_else(|| {
                PlanError::InvalidParameter(format!(
                    "there is no parameter ${}: {} supplied",
                    n + 1,
                    ctx.params.len()
                ))
            })?,
            VExpr::Column(c) => ctx.current.and_then(|e| ctx.table.value_of(e, c)),
            VExpr::Excluded(c) => ctx
                .excluded
                .and_then(|row| row.iter().find(|(rc, _)| rc.name == c.name))
                .and_then(|(_, v)| v.clone()),
            VExpr::Neg(x) => match x.eval(ctx)? {
                None => None,
                Some(Value::Int32(i)) => {
                    Some(Value::Int32(i.checked_neg().ok_or_else(|| {
                        PlanError::OutOfRange("integer out of range".into())
                    })?))
                }
                Some(Value::Int64(i)) => {
                    Some(Value::Int64(i.checked_neg().ok_or_else(|| {
                        PlanError::OutOfRange("bigint out of range".into())
                    })?))
                }
                Some(Value::Double(d)) => Some(Value::Double(-d)),
                Some(v) => {
                    return Err(PlanError::TypeMismatch {
                        left: String::new(),
                        op: "-".into(),
                        right: v.edm_type().name().into(),
                        hint: "negate a number".into(),
                    });
                }
            },
            VExpr::Arith(a, op, b) => match (a.eval(ctx)?, b.eval(ctx)?) {
                (Some(x), Some(y)) => Some(arith(&x, *op, &y)?),
                _ => None,
            },
            VExpr::Concat(a, b) => match (a.eval(ctx)?, b.eval(ctx)?) {
                (Some(x), Some(y)) => Some(Value::String(format!("{}{}", text(&x), text(&y)))),
                _ => None,
            },
            VExpr::Cast(x, ty) => match x.eval(ctx)? {
                None => None,
                Some(v) => Some(cast(v, *ty, "CAST")?),
            },
            VExpr::Now => Some(Value::DateTime(tablegate_store::DateTime(now_micros()))),
            VExpr::RandomUuid => Some(Value::Guid(*uuid::Uuid::new_v4().as_bytes())),
        })
    }
}

/// A value as text (for `||` and assignment to text columns).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Int32(i) => i.to_string(),
        Value::Int64(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        Value::Boolean(b) => if *b { "true" } else { "false" }.to_owned(),
        other => crate::expr::sql_literal(other)
            .trim_matches('\'')
            .to_owned(),
    }
}

fn arith(x: &Value, op: ArithOp, y: &Value) -> Result<Value> {
    let int = |v: &Value| match v {
        Value::Int32(i) => Some(i64::from(*i)),
        Value::Int64(i) => Some(*i),
        _ => None,
    };
    let float = |v: &Value| match v {
        Value::Int32(i) => Some(f64::from(*i)),
        Value::Int64(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        _ => None,
    };
    let both_int32 = matches!((x, y), (Value::Int32(_), Value::Int32(_)));
    if let (Some(a), Some(b)) = (int(x), int(y)) {
        if matches!(op, ArithOp::Div | ArithOp::Mod) && b == 0 {
            return Err(PlanError::DivisionByZero);
        }
        let r = match op {
            ArithOp::Add => a.checked_add(b),
            ArithOp::Sub => a.checked_sub(b),
            ArithOp::Mul => a.checked_mul(b),
            ArithOp::Div => a.checked_div(b),
            ArithOp::Mod => a.checked_rem(b),
        };
        let r = r.ok_or_else(|| PlanError::OutOfRange("bigint out of range".into()))?;
        return Ok(if both_int32 {
            Value::Int32(
                i32::try_from(r)
                    .map_err(|_| PlanError::OutOfRange("integer out of range".into()))?,
            )
        } else {
            Value::Int64(r)
        });
    }
    match (float(x), float(y)) {
        (Some(a), Some(b)) => {
            if matches!(op, ArithOp::Div | ArithOp::Mod) && b == 0.0 {
                return Err(PlanError::DivisionByZero);
            }
            Ok(Value::Double(match op {
                ArithOp::Add => a + b,
                ArithOp::Sub => a - b,
                ArithOp::Mul => a * b,
                ArithOp::Div => a / b,
                ArithOp::Mod => a % b,
            }))
        }
        _ => Err(PlanError::TypeMismatch {
            left: x.edm_type().name().into(),
            op: match op {
                ArithOp::Add => "+",
                ArithOp::Sub => "-",
                ArithOp::Mul => "*",
                ArithOp::Div => "/",
                ArithOp::Mod => "%",
            }
            .into(),
            right: y.edm_type().name().into(),
            hint: "arithmetic works on numbers".into(),
        }),
    }
}

/// Converts a value to a column type as PostgreSQL's assignment casts do:
/// numbers convert between each other (rounding, range-checked) and to
/// text; text parses as the type; anything else must already match.
pub fn cast(v: Value, ty: SqlType, column: &str) -> Result<Value> {
    let range =
        |t: &str| PlanError::OutOfRange(format!("{t} out of range for column \"{column}\""));
    Ok(match (v, ty) {
        (Value::Int64(i), SqlType::Int4) => {
            Value::Int32(i32::try_from(i).map_err(|_| range("integer"))?)
        }
        (Value::Double(d), SqlType::Int4) => {
            let r = d.round_ties_even();
            if !(f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&r) {
                return Err(range("integer"));
            }
            Value::Int32(r as i32)
        }
        (Value::Int32(i), SqlType::Int8) => Value::Int64(i.into()),
        (Value::Double(d), SqlType::Int8) => {
            let r = d.round_ties_even();
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
                return Err(range("bigint"));
            }
            Value::Int64(r as i64)
        }
        (Value::Int32(i), SqlType::Float8) => Value::Double(i.into()),
        (Value::Int64(i), SqlType::Float8) => Value::Double(i as f64),
        (
            v @ (Value::Int32(_) | Value::Int64(_) | Value::Double(_) | Value::Boolean(_)),
            SqlType::Text,
        ) => Value::String(text(&v)),
        (Value::String(s), ty) if ty != SqlType::Text => ty.parse_text(&s)?,
        (v, ty) if ty.accepts(&v) => v,
        (v, ty) => {
            return Err(PlanError::DatatypeMismatch(format!(
                "column \"{column}\" is of type {} but expression is of type {}",
                ty.pg_name(),
                v.edm_type().name()
            )));
        }
    })
}

/// Evaluates `e` for column `col` (DEFAULT included) and converts it to
/// the column's type.
pub fn assign(e: &VExpr, col: &ColumnRef, ctx: &EvalCtx<'_>) -> Result<Option<Value>> {
    let v = match e {
        VExpr::Default => default_value(col, ctx.table)?,
        e => e.eval(ctx)?,
    };
    v.map(|v| cast(v, col.ty, &col.name)).transpose()
}

/// Binds value expressions of one write statement.
struct Values<'a, 'b> {
    b: &'b mut Binder<'a>,
    /// Columns of the current row may be referenced.
    columns: bool,
    /// `EXCLUDED.col` may be referenced.
    excluded: bool,
}

impl Values<'_, '_> {
    fn unsupported(e: &Expr) -> PlanError {
        PlanError::Unsupported {
            feature: format!("expression {e} in a write"),
            hint: "write values as constants, parameters, columns, EXCLUDED.column, arithmetic, ||, casts, now() or gen_random_uuid(); compute others in the client".into(),
        }
    }

    fn bind(&mut self, e: &Expr, ty: SqlType, top: bool) -> Result<VExpr> {
        Ok(match e {
            Expr::Nested(inner) => self.bind(inner, ty, top)?,
            Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => match ty {
                    SqlType::Text => VExpr::Lit(Value::String(n.to_string())),
                    SqlType::Int4 | SqlType::Int8 | SqlType::Float8 => match n.parse::<i64>() {
                        Ok(i) => VExpr::Lit(Value::Int64(i)),
                        Err(_) => VExpr::Lit(Value::Double(n.parse().map_err(|_| {
                            PlanError::InvalidValue(format!("invalid number {n}"))
                        })?)),
                    },
                    other => {
                        return Err(PlanError::DatatypeMismatch(format!(
                            "expression {n} is a number, but {} is expected",
                            other.pg_name()
                        )));
                    }
                },
                ast::Value::SingleQuotedString(s)
                | ast::Value::EscapedStringLiteral(s)
                | ast::Value::DollarQuotedString(ast::DollarQuotedString { value: s, .. }) => {
                    VExpr::Lit(ty.parse_text(s)?)
                }
                ast::Value::Boolean(b) => match ty {
                    SqlType::Bool => VExpr::Lit(Value::Boolean(*b)),
                    SqlType::Text => VExpr::Lit(Value::String(b.to_string())),
                    other => {
                        return Err(PlanError::DatatypeMismatch(format!(
                            "expression {b} is of type boolean, but {} is expected",
                            other.pg_name()
                        )));
                    }
                },
                ast::Value::Null => VExpr::Null,
                ast::Value::Placeholder(p) => {
                    let n = p
                        .strip_prefix('$')
                        .and_then(|n| n.parse::<usize>().ok())
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| PlanError::Syntax {
                            message: format!("invalid parameter {p}"),
                            position: None,
                        })?
                        - 1;
                    self.b.note_param(n, ty);
                    VExpr::Param(n)
                }
                _ => return Err(Self::unsupported(e)),
            },
            Expr::Identifier(i)
                if top && i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default") =>
            {
                VExpr::Default
            }
            Expr::Identifier(i)
                if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("current_timestamp") =>
            {
                VExpr::Now
            }
            Expr::CompoundIdentifier(ids) if ids.len() == 2 && fold(&ids[0]) == "excluded" => {
                if !self.excluded {
                    return Err(PlanError::UnknownTable {
                        name: "excluded".into(),
                        position: char_position(self.b.sql, ids[0].span.start),
                    });
                }
                VExpr::Excluded(self.b.column(&ids[1..])?)
            }
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
                let ids = match e {
                    Expr::Identifier(i) => std::slice::from_ref(i),
                    Expr::CompoundIdentifier(ids) => ids.as_slice(),
                    _ => unreachable!(),
                };
                let col = self.b.column(ids)?;
                if !self.columns {
                    return Err(PlanError::UnknownColumn {
                        name: col.name.clone(),
                        position: char_position(self.b.sql, ids[ids.len() - 1].span.start),
                        hint: Some(format!(
                            "there is a column named \"{}\" in table \"{}\", but it cannot be referenced from this part of the query",
                            col.name, self.b.table.name
                        )),
                    });
                }
                VExpr::Column(col)
            }
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match self.bind(expr, ty, false)? {
                VExpr::Lit(Value::Int64(i)) => VExpr::Lit(Value::Int64(-i)),
                VExpr::Lit(Value::Double(d)) => VExpr::Lit(Value::Double(-d)),
                other => VExpr::Neg(Box::new(other)),
            },
            Expr::UnaryOp {
                op: UnaryOperator::Plus,
                expr,
            } => self.bind(expr, ty, false)?,
            Expr::BinaryOp { left, op, right } => {
                let arith = match op {
                    BinaryOperator::Plus => Some(ArithOp::Add),
                    BinaryOperator::Minus => Some(ArithOp::Sub),
                    BinaryOperator::Multiply => Some(ArithOp::Mul),
                    BinaryOperator::Divide => Some(ArithOp::Div),
                    BinaryOperator::Modulo => Some(ArithOp::Mod),
                    _ => None,
                };
                match (arith, op) {
                    (Some(a), _) => {
                        // Literals inside arithmetic are numbers whatever
                        // the target (the result is converted at the end).
                        let t = if matches!(ty, SqlType::Int4 | SqlType::Int8 | SqlType::Float8) {
                            ty
                        } else {
                            SqlType::Int8
                        };
                        VExpr::Arith(
                            Box::new(self.bind(left, t, false)?),
                            a,
                            Box::new(self.bind(right, t, false)?),
                        )
                    }
                    (None, BinaryOperator::StringConcat) => VExpr::Concat(
                        Box::new(self.bind(left, SqlType::Text, false)?),
                        Box::new(self.bind(right, SqlType::Text, false)?),
                    ),
                    _ => return Err(Self::unsupported(e)),
                }
            }
            Expr::Cast {
                expr, data_type, ..
            } => {
                let to = SqlType::parse(&data_type.to_string())?;
                match self.bind(expr, to, false)? {
                    lit @ VExpr::Lit(_) => lit,
                    other => VExpr::Cast(Box::new(other), to),
                }
            }
            Expr::TypedString(ts) => {
                let to = SqlType::parse(&ts.data_type.to_string())?;
                let text = match &ts.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                };
                VExpr::Lit(to.parse_text(&text)?)
            }
            Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                let no_args = match &f.args {
                    ast::FunctionArguments::None => true,
                    ast::FunctionArguments::List(l) => l.args.is_empty(),
                    ast::FunctionArguments::Subquery(_) => false,
                };
                match name.as_str() {
                    "now" | "current_timestamp" | "transaction_timestamp" if no_args => VExpr::Now,
                    "gen_random_uuid" if no_args => VExpr::RandomUuid,
                    _ => return Err(Self::unsupported(e)),
                }
            }
            _ => return Err(Self::unsupported(e)),
        })
    }
}

fn table_of(catalog: &Catalog, name: &ast::ObjectName, sql: &str) -> Result<Arc<TableDef>> {
    let ident = name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .cloned()
        .ok_or_else(|| PlanError::Unsupported {
            feature: format!("table reference {name}"),
            hint: "name a table".into(),
        })?;
    let folded = fold(&ident);
    catalog.table(&folded).map_err(|_| PlanError::UnknownTable {
        name: folded,
        position: char_position(sql, ident.span.start),
    })
}

/// Resolves a column a write assigns: a user column, not a system one.
fn target(b: &Binder<'_>, idents: &[ast::Ident]) -> Result<ColumnRef> {
    let col = b.column(idents)?;
    if matches!(col.role, Role::Timestamp | Role::ETag) {
        return Err(PlanError::ReadOnlyColumn { column: col.name });
    }
    Ok(col)
}

fn assignment_target(b: &Binder<'_>, a: &ast::Assignment) -> Result<ColumnRef> {
    match &a.target {
        ast::AssignmentTarget::ColumnName(n) => {
            let ids: Vec<ast::Ident> = n.0.iter().filter_map(|p| p.as_ident().cloned()).collect();
            // `SET t.col = ...` is not PostgreSQL; the last part names the column.
            let col = target(b, &ids[ids.len().saturating_sub(1)..])?;
            if matches!(col.role, Role::PartitionKey | Role::RowKey) {
                return Err(PlanError::Unsupported {
                    feature: format!("changing the key column \"{}\"", col.name),
                    hint: "a key is the entity's identity in the store: INSERT the row under the new key and DELETE the old one (in one transaction when both share a PartitionKey)".into(),
                });
            }
            Ok(col)
        }
        ast::AssignmentTarget::Tuple(_) => Err(PlanError::Unsupported {
            feature: "SET (a, b) = (...)".into(),
            hint: "assign columns one by one".into(),
        }),
    }
}

fn returning(b: &Binder<'_>, items: Option<&Vec<SelectItem>>) -> Result<Vec<OutputColumn>> {
    let mut out = Vec::new();
    for item in items.into_iter().flatten() {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                out.extend(b.table.star().into_iter().map(|c| OutputColumn {
                    name: c.name.clone(),
                    column: c,
                }));
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let alias = match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(fold(alias)),
                    _ => None,
                };
                let col = match e {
                    Expr::Identifier(i) => b.column(std::slice::from_ref(i))?,
                    Expr::CompoundIdentifier(ids) => b.column(ids)?,
                    other => {
                        return Err(PlanError::Unsupported {
                            feature: format!("RETURNING {other}"),
                            hint: "RETURNING lists columns (or *)".into(),
                        });
                    }
                };
                out.push(OutputColumn {
                    name: alias.unwrap_or_else(|| col.name.clone()),
                    column: col,
                });
            }
            other => {
                return Err(PlanError::Unsupported {
                    feature: format!("RETURNING {other}"),
                    hint: "RETURNING lists columns (or *)".into(),
                });
            }
        }
    }
    Ok(out)
}

/// A query over the matched rows of an UPDATE / DELETE: every column, the
/// WHERE as a predicate, on the native path.
fn scan_plan(
    b: &mut Binder<'_>,
    table: &Arc<TableDef>,
    selection: Option<&Expr>,
    verb: &str,
) -> Result<SelectPlan> {
    let predicate = selection.map(|e| b.predicate(e)).transpose()?;
    if let Some(p) = &predicate
        && p.has_opaque()
    {
        return Err(PlanError::NeedsAnalytics {
            reason: format!("{verb} with a condition the store cannot evaluate ({p})"),
        });
    }
    Ok(SelectPlan {
        table: table.clone(),
        columns: table
            .star()
            .into_iter()
            .map(|c| OutputColumn {
                name: c.name.clone(),
                column: c,
            })
            .collect(),
        predicate,
        limit: Count::All,
        offset: Count::All,
        param_types: Vec::new(),
        route: Route::Native,
        schema: Default::default(),
    })
}

fn finish_params(b: &Binder<'_>) -> Vec<SqlType> {
    b.params
        .iter()
        .map(|t| t.unwrap_or(SqlType::Text))
        .collect()
}

/// Plans `INSERT`.
pub fn plan_insert(catalog: &Catalog, ins: &ast::Insert, sql: &str) -> Result<WritePlan> {
    let name = match &ins.table {
        ast::TableObject::TableName(n) => n,
        other => {
            return Err(PlanError::Unsupported {
                feature: format!("INSERT INTO {other}"),
                hint: "insert into a table".into(),
            });
        }
    };
    let table = table_of(catalog, name, sql)?;
    let alias = ins.table_alias.as_ref().map(|a| fold(&a.alias));
    let mut b = Binder::new(&table, alias, sql);
    let user: Vec<ColumnRef> = table
        .visible()
        .map(|c| table.resolve(&c.name))
        .collect::<std::result::Result<_, _>>()?;
    let columns: Vec<ColumnRef> = if ins.columns.is_empty() {
        user.clone()
    } else {
        let mut cols = Vec::new();
        for n in &ins.columns {
            let ids: Vec<ast::Ident> = n.0.iter().filter_map(|p| p.as_ident().cloned()).collect();
            let c = target(&b, &ids)?;
            if cols.iter().any(|x: &ColumnRef| x.name == c.name) {
                return Err(PlanError::Syntax {
                    message: format!("column \"{}\" specified more than once", c.name),
                    position: None,
                });
            }
            cols.push(c);
        }
        cols
    };
    let source = match ins.source.as_deref() {
        None => {
            return Err(PlanError::Unsupported {
                feature: "INSERT without VALUES or SELECT".into(),
                hint: "INSERT INTO t (...) VALUES (...)".into(),
            });
        }
        Some(q) => match &*q.body {
            ast::SetExpr::Values(values) if q.order_by.is_none() && q.limit_clause.is_none() => {
                let mut rows = Vec::with_capacity(values.rows.len());
                for row in &values.rows {
                    let row = &row.content;
                    if row.len() > columns.len() {
                        return Err(PlanError::Syntax {
                            message: "INSERT has more expressions than target columns".into(),
                            position: None,
                        });
                    }
                    if row.len() < columns.len() && !ins.columns.is_empty() {
                        return Err(PlanError::Syntax {
                            message: "INSERT has more target columns than expressions".into(),
                            position: None,
                        });
                    }
                    let mut v = Values {
                        b: &mut b,
                        columns: false,
                        excluded: false,
                    };
                    let mut out = Vec::with_capacity(row.len());
                    for (e, c) in row.iter().zip(&columns) {
                        out.push(v.bind(e, c.ty, true)?);
                    }
                    rows.push(out);
                }
                InsertSource::Values(rows)
            }
            _ => {
                let select = plan_query(catalog, q, sql)?;
                if let Route::Engine(reason) = &select.route {
                    return Err(PlanError::NeedsAnalytics {
                        reason: format!("INSERT ... SELECT with {reason}"),
                    });
                }
                if select.columns.len() > columns.len() {
                    return Err(PlanError::Syntax {
                        message: "INSERT has more expressions than target columns".into(),
                        position: None,
                    });
                }
                // The SELECT's parameters come first in its own numbering;
                // INSERT ... SELECT with parameters in both parts shares it.
                for (i, t) in select.param_types.iter().enumerate() {
                    b.note_param(i, *t);
                }
                InsertSource::Query(Arc::new(select))
            }
        },
    };
    let conflict = match &ins.on {
        None => OnConflict::Error,
        Some(ast::OnInsert::OnConflict(oc)) => {
            if let Some(t) = &oc.conflict_target {
                match t {
                    ast::ConflictTarget::Columns(cols) => {
                        let mut named: Vec<String> = cols.iter().map(fold).collect();
                        named.sort();
                        let mut keys = vec![table.partition_key.clone()];
                        keys.extend(table.row_key.clone());
                        keys.sort();
                        if named != keys {
                            return Err(PlanError::Unsupported {
                                feature: format!("ON CONFLICT ({})", named.join(", ")),
                                hint: format!(
                                    "the only unique constraint is the primary key: ON CONFLICT ({})",
                                    keys.join(", ")
                                ),
                            });
                        }
                    }
                    ast::ConflictTarget::OnConstraint(_) => {
                        return Err(PlanError::Unsupported {
                            feature: "ON CONFLICT ON CONSTRAINT".into(),
                            hint: "name the primary key columns: ON CONFLICT (pk, rk)".into(),
                        });
                    }
                }
            }
            match &oc.action {
                ast::OnConflictAction::DoNothing => OnConflict::DoNothing,
                ast::OnConflictAction::DoUpdate(du) => {
                    if oc.conflict_target.is_none() {
                        return Err(PlanError::Syntax {
                            message: "ON CONFLICT DO UPDATE requires inference specification or constraint name".into(),
                            position: None,
                        });
                    }
                    if du.selection.is_some() {
                        return Err(PlanError::Unsupported {
                            feature: "ON CONFLICT DO UPDATE ... WHERE".into(),
                            hint: "use UPDATE ... WHERE after the INSERT, in one transaction"
                                .into(),
                        });
                    }
                    let mut set = Vec::new();
                    for a in &du.assignments {
                        let col = assignment_target(&b, a)?;
                        let mut v = Values {
                            b: &mut b,
                            columns: true,
                            excluded: true,
                        };
                        let e = v.bind(&a.value, col.ty, true)?;
                        set.push((col, e));
                    }
                    let copies = set
                        .iter()
                        .all(|(c, e)| matches!(e, VExpr::Excluded(x) if x.name == c.name));
                    let mut set_cols: Vec<&str> =
                        set.iter().map(|(c, _)| c.name.as_str()).collect();
                    set_cols.sort_unstable();
                    // Columns the proposed row carries a value for: the
                    // named ones and those with a DEFAULT.
                    let mut supplied: Vec<&str> = user
                        .iter()
                        .filter(|c| c.role == Role::Property)
                        .filter(|c| {
                            columns.iter().any(|x| x.name == c.name)
                                || table
                                    .columns
                                    .iter()
                                    .any(|d| d.name == c.name && d.default.is_some())
                        })
                        .map(|c| c.name.as_str())
                        .collect();
                    supplied.sort_unstable();
                    let every: Vec<&str> = {
                        let mut v: Vec<&str> = user
                            .iter()
                            .filter(|c| c.role == Role::Property)
                            .map(|c| c.name.as_str())
                            .collect();
                        v.sort_unstable();
                        v
                    };
                    let blind_merge = if !copies {
                        None
                    } else if set_cols == every {
                        Some(false)
                    } else if set_cols == supplied {
                        Some(true)
                    } else {
                        None
                    };
                    OnConflict::Update { set, blind_merge }
                }
            }
        }
        Some(other) => {
            return Err(PlanError::Unsupported {
                feature: format!("{other}"),
                hint: "use ON CONFLICT (pk, rk) DO UPDATE SET ...".into(),
            });
        }
    };
    let returning = returning(&b, ins.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Insert {
            targets: insert_targets(&table, &columns)?,
            columns,
            source,
            conflict,
        },
        returning,
        param_types,
    })
}

fn single_table(
    from: &[ast::TableWithJoins],
    verb: &str,
) -> Result<(ast::ObjectName, Option<String>)> {
    match from {
        [twj] if twj.joins.is_empty() => match &twj.relation {
            ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => Ok((name.clone(), alias.as_ref().map(|a| fold(&a.name)))),
            other => Err(PlanError::Unsupported {
                feature: format!("{verb} {other}"),
                hint: "name one table".into(),
            }),
        },
        _ => Err(PlanError::Unsupported {
            feature: format!("{verb} of several tables or a join"),
            hint: "write one table per statement".into(),
        }),
    }
}

/// Plans `UPDATE`.
pub fn plan_update(catalog: &Catalog, up: &ast::Update, sql: &str) -> Result<WritePlan> {
    if up.from.is_some() {
        return Err(PlanError::Unsupported {
            feature: "UPDATE ... FROM".into(),
            hint: "update one table; read the other first".into(),
        });
    }
    if up.limit.is_some() || !up.order_by.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "UPDATE ... ORDER BY / LIMIT".into(),
            hint: "narrow the WHERE instead".into(),
        });
    }
    let (name, alias) = single_table(std::slice::from_ref(&up.table), "UPDATE")?;
    let table = table_of(catalog, &name, sql)?;
    let mut b = Binder::new(&table, alias, sql);
    let mut set = Vec::new();
    for a in &up.assignments {
        let col = assignment_target(&b, a)?;
        if set
            .iter()
            .any(|(c, _): &(ColumnRef, VExpr)| c.name == col.name)
        {
            return Err(PlanError::Syntax {
                message: format!("multiple assignments to same column \"{}\"", col.name),
                position: None,
            });
        }
        let mut v = Values {
            b: &mut b,
            columns: true,
            excluded: false,
        };
        let e = v.bind(&a.value, col.ty, true)?;
        set.push((col, e));
    }
    let scan = scan_plan(&mut b, &table, up.selection.as_ref(), "UPDATE")?;
    let returning = returning(&b, up.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Update {
            set,
            scan: Arc::new(SelectPlan {
                param_types: param_types.clone(),
                ..scan
            }),
        },
        returning,
        param_types,
    })
}

/// Plans `DELETE`.
pub fn plan_delete(catalog: &Catalog, del: &ast::Delete, sql: &str) -> Result<WritePlan> {
    if del.using.is_some() || !del.tables.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "DELETE ... USING".into(),
            hint: "delete from one table".into(),
        });
    }
    if del.limit.is_some() || !del.order_by.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "DELETE ... ORDER BY / LIMIT".into(),
            hint: "narrow the WHERE instead".into(),
        });
    }
    let from = match &del.from {
        ast::FromTable::WithFromKeyword(v) | ast::FromTable::WithoutKeyword(v) => v,
    };
    let (name, alias) = single_table(from, "DELETE")?;
    let table = table_of(catalog, &name, sql)?;
    let mut b = Binder::new(&table, alias, sql);
    let scan = scan_plan(&mut b, &table, del.selection.as_ref(), "DELETE")?;
    let returning = returning(&b, del.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Delete {
            scan: Arc::new(SelectPlan {
                param_types: param_types.clone(),
                ..scan
            }),
        },
        returning,
        param_types,
    })
}

/// The bound predicate of a write's scan, for callers that show it.
pub fn predicate(plan: &WritePlan) -> Option<&BExpr> {
    match &plan.kind {
        WriteKind::Update { scan, .. } | WriteKind::Delete { scan } => scan.predicate.as_ref(),
        WriteKind::Insert { .. } => None,
    }
}

/// The columns a COPY names (all user columns when none), resolved.
fn copy_columns(
    table: &TableDef,
    columns: &[ast::Ident],
    for_write: bool,
) -> Result<Vec<ColumnRef>> {
    if columns.is_empty() {
        return table
            .visible()
            .map(|c| Ok(table.resolve(&c.name)?))
            .collect();
    }
    let b = Binder::new(table, None, "");
    columns
        .iter()
        .map(|i| {
            if for_write {
                target(&b, std::slice::from_ref(i))
            } else {
                b.column(std::slice::from_ref(i))
            }
        })
        .collect()
}

/// An INSERT's [`WriteKind::Insert::targets`].
fn insert_targets(
    table: &TableDef,
    columns: &[ColumnRef],
) -> Result<Vec<(Arc<ColumnRef>, Option<usize>)>> {
    table
        .columns
        .iter()
        .map(|c| {
            let col = table.resolve(&c.name)?;
            let given = columns.iter().position(|x| x.name == col.name);
            Ok((Arc::new(col), given))
        })
        .collect()
}

/// `COPY t [(cols)] FROM STDIN`: an INSERT of the named columns whose rows
/// the caller supplies ([`crate::apply::insert_rows`]).
pub fn plan_copy_in(
    catalog: &Catalog,
    name: &ast::ObjectName,
    columns: &[ast::Ident],
) -> Result<(WritePlan, Vec<ColumnRef>)> {
    let table = table_of(catalog, name, "")?;
    let cols = copy_columns(&table, columns, true)?;
    Ok((
        WritePlan {
            table: table.clone(),
            kind: WriteKind::Insert {
                targets: insert_targets(&table, &cols)?,
                columns: cols.clone(),
                source: InsertSource::Values(Vec::new()),
                conflict: OnConflict::Error,
            },
            returning: Vec::new(),
            param_types: Vec::new(),
        },
        cols,
    ))
}

/// `COPY t [(cols)] TO STDOUT`: a query of the named (or all user)
/// columns, in key order.
pub fn plan_copy_out(
    catalog: &Catalog,
    name: &ast::ObjectName,
    columns: &[ast::Ident],
) -> Result<SelectPlan> {
    let table = table_of(catalog, name, "")?;
    let cols = copy_columns(&table, columns, false)?;
    Ok(SelectPlan {
        table: table.clone(),
        columns: cols
            .into_iter()
            .map(|c| OutputColumn {
                name: c.name.clone(),
                column: c,
            })
            .collect(),
        predicate: None,
        limit: Count::All,
        offset: Count::All,
        param_types: Vec::new(),
        route: Route::Native,
        schema: Default::default(),
    })
}
