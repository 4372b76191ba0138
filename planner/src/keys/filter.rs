//! The residual as a store filter ([`to_filter`]): the part of WHERE the
//! store evaluates on every scanned entity. Constants are put in the
//! column's own type first (`in_column_type`, shared with the key bounds),
//! typed keys compare as their stored key text, and the ETag compares as
//! the Timestamp it is derived from.

use tablegate_catalog::{Role, SqlType};
use tablegate_store::{CmpOp, Field, Filter, Value};

use super::derive::{lit_str, row_expanded};
use crate::expr::BExpr;

/// Converts an NNF predicate into the store's residual filter; `None` when
/// some part is beyond the store (functions, casts of columns, ...).
pub fn to_filter(e: &BExpr) -> Option<Filter> {
    Some(match e {
        BExpr::Bool(b) => {
            if *b {
                Filter::True
            } else {
                Filter::False
            }
        }
        BExpr::And(v) => Filter::And(v.iter().map(to_filter).collect::<Option<_>>()?),
        BExpr::Or(v) => Filter::Or(v.iter().map(to_filter).collect::<Option<_>>()?),
        BExpr::Not(x) => Filter::Not(Box::new(to_filter(x)?)),
        BExpr::Cmp(a, op, b) => match (malformed_etag(a, b), op) {
            // No row's ETag is a malformed one (and none is NULL).
            (true, CmpOp::Eq) => Filter::False,
            (true, CmpOp::Ne) => Filter::True,
            (true, _) => return None,
            // Equality compares the tags themselves: a remote service's
            // tag is finer than the Timestamp the store reads.
            (false, CmpOp::Eq | CmpOp::Ne) if etag_text(a, b).is_some() => Filter::Compare {
                field: Field::ETag,
                op: *op,
                value: Value::String(etag_text(a, b)?.to_owned()),
            },
            (false, _) => {
                let (field, value) = field_value(a, b)?;
                stored(a, in_column_type(a, field, *op, value))?
            }
        },
        BExpr::InList {
            expr,
            list,
            negated,
        } => {
            let mut field = field_of(expr)?;
            let mut values = Vec::with_capacity(list.len());
            for x in list {
                if malformed_etag(expr, x) {
                    continue;
                }
                if let Some(tag) = etag_text(expr, x) {
                    field = Field::ETag;
                    values.push(Value::String(tag.to_owned()));
                    continue;
                }
                let (f, v) = field_value(expr, x)?;
                // Values no row of the column's type can equal drop out.
                if let Filter::Compare {
                    op: CmpOp::Eq,
                    value,
                    ..
                } = stored(expr, in_column_type(expr, f, CmpOp::Eq, v))?
                {
                    values.push(value);
                }
            }
            let f = Filter::In { field, values };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::Between {
            expr,
            low,
            high,
            negated,
        } => {
            let (field, lo) = field_value(expr, low)?;
            let (_, hi) = field_value(expr, high)?;
            let f = Filter::And(vec![
                stored(expr, in_column_type(expr, field.clone(), CmpOp::Ge, lo))?,
                stored(expr, in_column_type(expr, field, CmpOp::Le, hi))?,
            ]);
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::Like {
            expr,
            pattern,
            escape,
            negated,
            case_insensitive,
        } => {
            // A typed key's stored text is not the text LIKE would match.
            if matches!(&**expr, BExpr::Column(c)
                if c.ty != SqlType::Text && matches!(c.role, Role::PartitionKey | Role::RowKey))
            {
                return None;
            }
            let f = Filter::Like {
                field: field_of(expr)?,
                pattern: lit_str(pattern)?.to_owned(),
                escape: *escape,
                case_insensitive: *case_insensitive,
            };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::IsNull { expr, negated } => {
            let field = field_of(expr)?;
            // A property stored with another type reads as NULL.
            let f = match &**expr {
                BExpr::Column(c) if c.role == Role::Property => Filter::IsNullAs(field, c.ty.edm()),
                _ => Filter::IsNull(field),
            };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::RowCmp { left, op, right } => to_filter(&row_expanded(left, *op, right))?,
        _ => return None,
    })
}

/// A comparison on a typed key column compares the stored key text: the
/// value in the key's encoding. `None` when it has none.
fn stored(col: &BExpr, f: Filter) -> Option<Filter> {
    match (col, f) {
        (BExpr::Column(c), Filter::Compare { field, op, value })
            if matches!(c.role, Role::PartitionKey | Role::RowKey) && c.ty != SqlType::Text =>
        {
            Some(Filter::Compare {
                field,
                op,
                value: Value::String(c.ty.encode_key(&value)?),
            })
        }
        (_, f) => Some(f),
    }
}

pub(super) fn field_of(e: &BExpr) -> Option<Field> {
    match e {
        BExpr::Column(c) => Some(match c.role {
            Role::PartitionKey => Field::PartitionKey,
            Role::RowKey => Field::RowKey,
            Role::Timestamp | Role::ETag => Field::Timestamp,
            Role::Property => Field::Property(c.name.clone()),
        }),
        _ => None,
    }
}

/// `field op value` with the constant in the column's own EDM type and the
/// same SQL meaning, three-valued logic included. SQL compares Int32, Int64
/// and Double with one another; a remote table service compares only
/// within one type (Azurite even fails on mixed ones), and a property
/// stored with another type than the column's reads as NULL anyway. So
/// `x > 2.5` on an integer column is `x > 2`, and `x = 2.5`, which no
/// integer satisfies, is `x < MIN` (false, or unknown for NULL — exactly
/// what `x = 2.5` is).
pub(super) fn in_column_type(col: &BExpr, field: Field, op: CmpOp, value: Value) -> Filter {
    use tablegate_store::EdmType;
    let cmp = |op, value| Filter::Compare {
        field: field.clone(),
        op,
        value,
    };
    let (sql_ty, ty) = match col {
        BExpr::Column(c) => (c.ty, c.ty.edm()),
        _ => return cmp(op, value),
    };
    let n: i128 = match (&value, ty) {
        (v, t) if v.edm_type() == t => return cmp(op, value),
        (Value::Int32(i), EdmType::Double) => return cmp(op, Value::Double(f64::from(*i))),
        (Value::Int64(i), EdmType::Double) => {
            let d = *i as f64;
            // Beyond 2^53 the nearest double is not the integer: keep it.
            return if d as i128 == i128::from(*i) {
                cmp(op, Value::Double(d))
            } else {
                cmp(op, value)
            };
        }
        (Value::Int32(i), _) => i128::from(*i),
        (Value::Int64(i), _) => i128::from(*i),
        // PostgreSQL orders NaN above every number.
        (Value::Double(d), _) if d.is_nan() => i128::MAX,
        (Value::Double(d), _) if d.fract() == 0.0 || d.is_infinite() => *d as i128,
        (Value::Double(d), _) => match op {
            CmpOp::Eq | CmpOp::Ne => {
                // No integer equals a fraction.
                let never = op == CmpOp::Eq;
                return in_column_type(
                    col,
                    field.clone(),
                    if never { CmpOp::Lt } else { CmpOp::Ge },
                    Value::Int64(i64::MIN),
                );
            }
            // x < 2.5 ⇔ x < 3, x >= 2.5 ⇔ x >= 3; x <= 2.5 ⇔ x <= 2, x > 2.5 ⇔ x > 2.
            CmpOp::Lt | CmpOp::Ge => d.ceil() as i128,
            CmpOp::Le | CmpOp::Gt => d.floor() as i128,
        },
        _ => return cmp(op, value),
    };
    // The column's own range (a smallint is an Int32 kept to 16 bits).
    let Some((min, max)) = sql_ty.int_range() else {
        return cmp(op, value);
    };
    let (min, max) = (i128::from(min), i128::from(max));
    let make: fn(i128) -> Value = match ty {
        EdmType::Int32 => |n| Value::Int32(n as i32),
        EdmType::Int64 => |n| Value::Int64(n as i64),
        _ => return cmp(op, value),
    };
    if (min..=max).contains(&n) {
        return cmp(op, make(n));
    }
    // Out of the column's range: the comparison holds for every value or
    // for none; said with the smallest value, so NULL stays unknown.
    let all = match op {
        CmpOp::Eq => false,
        CmpOp::Ne => true,
        CmpOp::Lt | CmpOp::Le => n > max,
        CmpOp::Gt | CmpOp::Ge => n < min,
    };
    cmp(if all { CmpOp::Ge } else { CmpOp::Lt }, make(min))
}

/// A column and a literal as a store field and value. The ETag compares as
/// the Timestamp it is derived from.
fn field_value(col: &BExpr, lit: &BExpr) -> Option<(Field, Value)> {
    let field = field_of(col)?;
    let value = match lit {
        BExpr::Lit(v) => v.clone(),
        _ => return None,
    };
    match (col, &value) {
        (BExpr::Column(c), Value::String(tag)) if c.role == Role::ETag => {
            Some((field, Value::DateTime(etag_timestamp(tag)?)))
        }
        _ => Some((field, value)),
    }
}

/// The tag `etag = lit` compares with, when `col` is the ETag column.
fn etag_text<'a>(col: &BExpr, lit: &'a BExpr) -> Option<&'a str> {
    match (col, lit) {
        (BExpr::Column(c), BExpr::Lit(Value::String(tag))) if c.role == Role::ETag => Some(tag),
        _ => None,
    }
}

/// `etag` against a text that is not an ETag the store gives out: it
/// equals no row's.
fn malformed_etag(col: &BExpr, lit: &BExpr) -> bool {
    matches!(
        (col, lit),
        (BExpr::Column(c), BExpr::Lit(Value::String(tag)))
            if c.role == Role::ETag && etag_timestamp(tag).is_none()
    )
}

/// The Timestamp inside an ETag `W/"datetime'…'"`: the embedded engine's
/// (`2026-11-28T13:29:26.642432Z`) or the Table service's, which
/// percent-encodes the colons and carries 100 ns ticks
/// (`2026-11-28T13%3A29%3A26.6424327Z`, read to the microsecond).
pub fn etag_timestamp(tag: &str) -> Option<tablegate_store::DateTime> {
    let inner = tag.strip_prefix("W/\"datetime'")?.strip_suffix("'\"")?;
    if !inner.contains('%') {
        return chrono_parse(inner);
    }
    let decoded = inner.replace("%3A", ":").replace("%3a", ":");
    let (whole, fraction) = decoded.strip_suffix('Z')?.split_once('.')?;
    if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    chrono_parse(&format!("{whole}.{}Z", &fraction[..fraction.len().min(6)]))
}

fn chrono_parse(s: &str) -> Option<tablegate_store::DateTime> {
    tablegate_catalog::types::parse_timestamp(s, true)
}
