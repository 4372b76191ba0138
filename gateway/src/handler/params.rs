//! Parameters: a portal's values decoded as the types the planner
//! inferred (honouring the types the client declared), and EXECUTE's
//! constants.

use std::sync::LazyLock;

use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::FromSqlText;
use pgwire::types::format::FormatOptions;
use postgres_types::FromSqlOwned;
use sqlparser::ast;
use tablegate_catalog::SqlType;
use tablegate_store::Value;

use super::prepare::Parsed;
use crate::encode::pg_type;
use crate::sqlstate::{NUL_IN_TEXT, PgError};

/// Parameter `i` of a portal as `T`: what pgwire's `Portal::parameter`
/// does, except that a text-format value is parsed with one shared
/// `FormatOptions`. pgwire builds a default one (four `String`s) per call,
/// on the prepared point lookup's hot path.
fn portal_param<'a, T>(portal: &'a Portal<Parsed>, i: usize, ty: &Type) -> PgWireResult<Option<T>>
where
    T: FromSqlOwned + FromSqlText<'a>,
{
    static TEXT_FORMAT: LazyLock<FormatOptions> = LazyLock::new(FormatOptions::default);
    if !T::accepts(ty) {
        return Err(PgWireError::InvalidRustTypeForParameter(
            ty.name().to_owned(),
        ));
    }
    let raw = portal
        .parameters
        .get(i)
        .ok_or(PgWireError::ParameterIndexOutOfBound(i))?;
    let Some(raw) = raw else {
        return Ok(None);
    };
    if portal.parameter_format.is_binary(i) {
        T::from_sql(ty, raw)
    } else {
        T::from_sql_text(ty, raw, &TEXT_FORMAT)
    }
    .map(Some)
    .map_err(PgWireError::FailedToParseParameter)
}

/// An EXECUTE parameter: a constant (number, string, boolean, NULL,
/// possibly negated or cast), read as the statement's parameter type.
pub(super) fn constant_param(e: &ast::Expr, want: SqlType) -> Result<Option<Value>, PgError> {
    fn text(e: &ast::Expr) -> Result<Option<String>, PgError> {
        Ok(match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Null => None,
                ast::Value::Number(n, _) => Some(n.clone()),
                ast::Value::SingleQuotedString(s) => Some(s.clone()),
                ast::Value::Boolean(b) => Some(b.to_string()),
                other => {
                    return Err(PgError::feature_not_supported(format!(
                        "EXECUTE parameter {other} is not supported"
                    )));
                }
            },
            ast::Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => text(expr)?.map(|t| format!("-{t}")),
            ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => text(expr)?,
            other => {
                return Err(PgError::feature_not_supported(format!(
                    "EXECUTE parameter {other} is not a constant"
                ))
                .hint("pass constants: numbers, 'strings', true/false or NULL"));
            }
        })
    }
    match text(e)? {
        None => Ok(None),
        Some(t) => want.parse_text(&t).map(Some).map_err(|e| PgError::from(&e)),
    }
}

/// Decodes parameter `i` of a portal as the SQL type the planner inferred,
/// honouring the type the client declared (tokio-postgres and JDBC bind
/// typed values; psql and simple drivers send text).
pub(super) fn decode_param(
    portal: &Portal<Parsed>,
    i: usize,
    want: SqlType,
    open: bool,
) -> Result<Option<Value>, PgError> {
    let declared = portal
        .statement
        .parameter_types
        .get(i)
        .cloned()
        .flatten()
        .filter(|t| *t != Type::UNKNOWN)
        .unwrap_or_else(|| pg_type(want));
    let bad =
        |e: PgWireError| PgError::invalid_text_representation(format!("parameter ${}: {e}", i + 1));
    let v: Option<Value> = match declared {
        Type::INT2 => portal_param::<i16>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Int64(v.into())),
        Type::INT4 => portal_param::<i32>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Int64(v.into())),
        Type::INT8 => portal_param::<i64>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Int64),
        Type::FLOAT4 => portal_param::<f32>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Double(v.into())),
        Type::FLOAT8 => portal_param::<f64>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Double),
        Type::BOOL => portal_param::<bool>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Boolean),
        Type::TIMESTAMPTZ => {
            portal_param::<chrono::DateTime<chrono::FixedOffset>>(portal, i, &declared)
                .map_err(bad)?
                .map(|t| Value::DateTime(tablegate_store::DateTime(t.timestamp_micros())))
        }
        Type::TIMESTAMP => portal_param::<chrono::NaiveDateTime>(portal, i, &declared)
            .map_err(bad)?
            .map(|t| Value::DateTime(tablegate_store::DateTime(t.and_utc().timestamp_micros()))),
        Type::DATE => portal_param::<chrono::NaiveDate>(portal, i, &declared)
            .map_err(bad)?
            .map(|d| {
                let midnight = d.and_hms_opt(0, 0, 0).expect("midnight exists");
                Value::DateTime(tablegate_store::DateTime(
                    midnight.and_utc().timestamp_micros(),
                ))
            }),
        // Binary-format bytea and uuid are their raw bytes (text format
        // goes through the column type's text parser below).
        Type::BYTEA | Type::UUID if portal.parameter_format.is_binary(i) => {
            match portal.parameters.get(i).cloned().flatten() {
                None => None,
                Some(b) if declared == Type::BYTEA => Some(Value::Binary(b.to_vec())),
                Some(b) => Some(Value::Guid(b.as_ref().try_into().map_err(|_| {
                    PgError::invalid_text_representation(format!(
                        "parameter ${}: a binary uuid has 16 bytes, not {}",
                        i + 1,
                        b.len()
                    ))
                })?)),
            }
        }
        // Text, in either format, is its UTF-8 bytes: parsed where it lies.
        _ => match portal.parameters.get(i) {
            None => return Err(bad(PgWireError::ParameterIndexOutOfBound(i))),
            Some(None) => None,
            Some(Some(raw)) => {
                let text = std::str::from_utf8(raw).map_err(|e| {
                    PgError::character_not_in_repertoire(format!(
                        "parameter ${}: not UTF-8: {e}",
                        i + 1
                    ))
                })?;
                // As in PostgreSQL, whose text never holds U+0000 (nor
                // does a stored key).
                if text.contains('\0') {
                    return Err(PgError::character_not_in_repertoire(format!(
                        "parameter ${}: {NUL_IN_TEXT}",
                        i + 1
                    )));
                }
                Some(want.parse_text(text).map_err(|e| PgError::from(&e))?)
            }
        },
    };
    // Numbers meet the column's numeric type; everything else must match.
    Ok(match (v, want) {
        (None, _) => None,
        (v, _) if open => v,
        (Some(Value::Int64(n)), SqlType::Int2 | SqlType::Int4) => {
            let (min, max) = want.int_range().expect("an integer type");
            if !(min..=max).contains(&n) {
                return Err(PgError::numeric_value_out_of_range(format!(
                    "parameter ${}: {n} is out of range for type {}",
                    i + 1,
                    want.pg_name()
                )));
            }
            Some(Value::Int32(n as i32))
        }
        // A timestamp bound to a date keeps its day, as a cast does.
        (Some(Value::DateTime(t)), SqlType::Date) => {
            Some(Value::DateTime(tablegate_catalog::types::date_of(t)))
        }
        (Some(Value::Int64(n)), SqlType::Float8) => Some(Value::Double(n as f64)),
        (Some(v), want) if v.edm_type() == want.edm() => Some(v),
        (Some(v), want) => {
            return Err(PgError::datatype_mismatch(format!(
                "parameter ${} is {} but {} is expected",
                i + 1,
                v.edm_type().name(),
                want.pg_name()
            )));
        }
    })
}
