//! The value-expression language of writes: what `VALUES`, `SET` and
//! `ON CONFLICT DO UPDATE SET` assign, and column DEFAULTs.
//!
//! Owns the expression type ([`VExpr`]), its binding from SQL against one
//! table (`ValueBinder`, at plan time: literals take the type of the
//! column they are assigned to, parameters get that type inferred) and its
//! evaluation per row ([`VExpr::eval`] against an [`EvalCtx`]: parameter
//! values, the current row, the row proposed by `EXCLUDED`), with
//! PostgreSQL's assignment casts ([`cast`], [`assign`]). Write planning
//! ([`crate::write`]) decides where expressions appear; running writes
//! ([`crate::apply`]) evaluates them.
//!
//! Deliberately limited: values are constants, parameters, columns,
//! `EXCLUDED.column`, arithmetic, `||`, casts, `now()`,
//! `gen_random_uuid()` and, where the row's columns may be read (UPDATE's
//! and ON CONFLICT's SET), CASE over WHERE-style conditions. Anything else
//! is refused at plan time, so a write never needs the analytics engine to
//! compute a value.

use std::sync::Arc;

use sqlparser::ast::{self, BinaryOperator, Expr, UnaryOperator};
use tablegate_catalog::{ColumnDefault, ColumnRef, SqlType, TableDef};
use tablegate_store::{Entity, Value};

use crate::error::{PlanError, Result};
use crate::expr::{BExpr, Binder, char_position, fold};
use crate::keys::to_filter;

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
    /// `CASE [x] WHEN … THEN … [ELSE …] END`: the first arm whose condition,
    /// a predicate on the current row evaluated as WHERE evaluates it, is
    /// true; else the `ELSE` value (NULL without one).
    Case(Vec<(BExpr, VExpr)>, Box<VExpr>),
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
                SqlType::Int2 | SqlType::Int4 => {
                    let (_, max) = col.ty.int_range().expect("an integer type");
                    if id > max {
                        return Err(PlanError::InvalidValue(format!(
                            "identity column \"{}\" reached the end of {}: declare it bigint (bigserial)",
                            col.name,
                            col.ty.pg_name()
                        )));
                    }
                    Value::Int32(id as i32)
                }
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
            VExpr::Case(arms, otherwise) => {
                // Bound only where the row's columns may be read, so the
                // row is there.
                let Some(row) = ctx.current else {
                    return Err(PlanError::Unsupported {
                        feature: "CASE without a current row".into(),
                        hint: CASE_HINT.into(),
                    });
                };
                for (condition, value) in arms {
                    let condition = condition.substitute(ctx.params)?;
                    let filter = to_filter(&condition).ok_or_else(|| PlanError::Unsupported {
                        feature: "this CASE condition in a write".into(),
                        hint: CASE_HINT.into(),
                    })?;
                    if filter.eval(row) == Some(true) {
                        return value.eval(ctx);
                    }
                }
                otherwise.eval(ctx)?
            }
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
        (Value::Int32(i), SqlType::Int2) => {
            Value::Int32(i16::try_from(i).map_err(|_| range("smallint"))?.into())
        }
        (Value::Int64(i), SqlType::Int2) => {
            Value::Int32(i16::try_from(i).map_err(|_| range("smallint"))?.into())
        }
        (Value::Int64(i), SqlType::Int4) => {
            Value::Int32(i32::try_from(i).map_err(|_| range("integer"))?)
        }
        (Value::Double(d), SqlType::Int2 | SqlType::Int4) => {
            let r = d.round_ties_even();
            let (min, max) = ty.int_range().expect("an integer type");
            if !(min as f64..=max as f64).contains(&r) {
                return Err(range(ty.pg_name()));
            }
            Value::Int32(r as i32)
        }
        // timestamp to date keeps the day (UTC).
        (Value::DateTime(t), SqlType::Date) => {
            Value::DateTime(tablegate_catalog::types::date_of(t))
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

/// What a CASE condition in a write may be.
const CASE_HINT: &str = "a CASE condition in a write compares the row's columns with constants or parameters, as WHERE does";

/// Binds value expressions of one write statement. Made where needed and
/// dropped again: it borrows the statement's binder mutably (to note
/// parameter types), and the planner needs that binder in between.
pub(crate) struct ValueBinder<'a, 'b> {
    /// The statement's binder: columns, parameters, error positions.
    pub(crate) b: &'b mut Binder<'a>,
    /// Columns of the current row may be referenced.
    pub(crate) columns: bool,
    /// `EXCLUDED.col` may be referenced.
    pub(crate) excluded: bool,
}

impl ValueBinder<'_, '_> {
    fn unsupported(e: &Expr) -> PlanError {
        PlanError::Unsupported {
            feature: format!("expression {e} in a write"),
            hint: "write values as constants, parameters, columns, EXCLUDED.column, arithmetic, ||, casts, now(), gen_random_uuid() or (in SET) CASE; compute others in the client".into(),
        }
    }

    /// Binds `e`, assigned to a column of type `ty`. `top` is true for the
    /// whole assigned expression, where (only) `DEFAULT` may stand.
    pub(crate) fn bind(&mut self, e: &Expr, ty: SqlType, top: bool) -> Result<VExpr> {
        Ok(match e {
            Expr::Nested(inner) => self.bind(inner, ty, top)?,
            Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => match ty {
                    SqlType::Text => VExpr::Lit(Value::String(n.to_string())),
                    t if t.is_numeric() => match n.parse::<i64>() {
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
                        let t = if ty.is_numeric() { ty } else { SqlType::Int8 };
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
            Expr::Case {
                operand,
                conditions,
                else_result,
                ..
            } if self.columns => {
                let mut arms = Vec::with_capacity(conditions.len());
                for w in conditions {
                    let condition = match operand {
                        Some(x) => Expr::BinaryOp {
                            left: x.clone(),
                            op: BinaryOperator::Eq,
                            right: Box::new(w.condition.clone()),
                        },
                        None => w.condition.clone(),
                    };
                    let condition = self.b.predicate(&condition)?;
                    if condition.has_opaque() {
                        return Err(PlanError::Unsupported {
                            feature: format!("CASE condition {} in a write", w.condition),
                            hint: CASE_HINT.into(),
                        });
                    }
                    arms.push((condition, self.bind(&w.result, ty, false)?));
                }
                let otherwise = match else_result {
                    Some(e) => self.bind(e, ty, false)?,
                    None => VExpr::Null,
                };
                VExpr::Case(arms, Box::new(otherwise))
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
