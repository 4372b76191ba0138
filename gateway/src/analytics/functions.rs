//! PostgreSQL functions the analytics engine answers as PostgreSQL does:
//! the ones drivers, ORMs and psql call on connect or in metadata queries
//! (`version()`, `current_user`, `pg_typeof`, `pg_size_pretty`,
//! `obj_description` and its siblings), registered on every session's
//! DataFusion context over DataFusion's or datafusion-pg-catalog's own.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility, create_udf,
};
use datafusion::prelude::SessionContext;
use parking_lot::Mutex;

use crate::settings::Settings;

/// Registers the functions on `ctx` for a session of `user` whose settings
/// `session` holds.
pub fn register(ctx: &SessionContext, user: &str, session: Arc<Mutex<Settings>>) {
    let text = |name: &str, value: String| {
        let v = ScalarValue::Utf8(Some(value));
        create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_| Ok(ColumnarValue::Scalar(v.clone()))),
        )
    };
    ctx.register_udf(text("version", crate::settings::version_string()));
    // sqlparser reads `current_user`, `session_user` and `user` as calls.
    for name in ["current_user", "session_user", "user", "current_role"] {
        ctx.register_udf(text(name, user.to_owned()));
    }
    ctx.register_udf(create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let sizes = ColumnarValue::values_to_arrays(args)?;
            let sizes = datafusion::common::cast::as_int64_array(&sizes[0])?;
            let out: StringArray = sizes.iter().map(|s| s.map(size_pretty)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    ));
    ctx.register_udf(ScalarUDF::from(PgTypeof::new()));
    ctx.register_udf(ScalarUDF::from(ToHex::new()));
    ctx.register_udf(create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let names = ColumnarValue::values_to_arrays(args)?;
            let names = datafusion::common::cast::as_string_array(&names[0])?;
            let oids: datafusion::arrow::array::Int32Array =
                names.iter().map(|n| n.and_then(type_oid)).collect();
            Ok(ColumnarValue::Array(Arc::new(oids) as ArrayRef))
        }),
    ));
    ctx.register_udf(ScalarUDF::from(CurrentSetting::new(session)));
    ctx.register_udf(ScalarUDF::from(Format::new()));
    // One encoding (UTF8, number 6) and no tablespaces of PostgreSQL's kind.
    ctx.register_udf(ScalarUDF::from(Constant::new(
        "pg_char_to_encoding",
        &[1],
        ScalarValue::Int32(Some(6)),
    )));
    ctx.register_udf(ScalarUDF::from(Constant::new(
        "getdatabaseencoding",
        &[0],
        ScalarValue::Utf8(Some("UTF8".into())),
    )));
    ctx.register_udf(ScalarUDF::from(Constant::new(
        "pg_tablespace_location",
        &[1],
        ScalarValue::Utf8(Some(String::new())),
    )));
    // Every type and function is in pg_catalog, always on the search path.
    for name in [
        "pg_type_is_visible",
        "pg_function_is_visible",
        "pg_operator_is_visible",
        "pg_conversion_is_visible",
        "pg_collation_is_visible",
        "pg_opclass_is_visible",
        "pg_opfamily_is_visible",
        "pg_statistics_obj_is_visible",
        "pg_ts_config_is_visible",
        "pg_ts_dict_is_visible",
        "pg_ts_parser_is_visible",
        "pg_ts_template_is_visible",
    ] {
        ctx.register_udf(ScalarUDF::from(Constant::new(
            name,
            &[1],
            ScalarValue::Boolean(Some(true)),
        )));
    }
    // tablegate has no functions of its own in the catalog (\df lists
    // none); these only need to exist for psql's query.
    for name in ["pg_get_function_result", "pg_get_function_arguments"] {
        ctx.register_udf(ScalarUDF::from(Constant::new(
            name,
            &[1],
            ScalarValue::Utf8(None),
        )));
    }
    // tablegate keeps no comments: NULL, as PostgreSQL answers for an
    // object without one.
    for (name, arities) in [
        ("obj_description", &[1, 2][..]),
        ("col_description", &[2]),
        ("shobj_description", &[2]),
    ] {
        ctx.register_udf(ScalarUDF::from(Constant::new(
            name,
            arities,
            ScalarValue::Utf8(None),
        )));
    }
    // Forgets the statement log (tablegate.statements), as
    // pg_stat_statements_reset() does; answers how many entries went.
    ctx.register_udf(create_udf(
        "tablegate_statements_reset",
        vec![],
        DataType::Int64,
        Volatility::Volatile,
        Arc::new(|_: &[ColumnarValue]| {
            let n = crate::statements::statements().reset();
            Ok(ColumnarValue::Scalar(ScalarValue::Int64(Some(n as i64))))
        }),
    ));
    // Last, so it sees every function registered above.
    let int4: Vec<Arc<ScalarUDF>> = ctx
        .state()
        .scalar_functions()
        .values()
        .filter(|f| takes_int4(&f.signature().type_signature))
        .cloned()
        .collect();
    for f in int4 {
        ctx.register_udf(ScalarUDF::from(Int4Arguments::new(f)));
    }
}

/// The types `f`'s signature coerces arguments of `types` to.
fn coerced<F: datafusion::logical_expr::type_coercion::functions::UDFCoercionExt>(
    types: &[DataType],
    f: &F,
) -> Result<Vec<DataType>> {
    let fields: Vec<_> = types
        .iter()
        .map(|t| {
            Arc::new(datafusion::arrow::datatypes::Field::new(
                "a",
                t.clone(),
                true,
            ))
        })
        .collect();
    datafusion::logical_expr::type_coercion::functions::fields_with_udf(&fields, f)
        .map(|f| f.iter().map(|f| f.data_type().clone()).collect())
}

/// True when a signature names `integer` (Int32) for an argument.
fn takes_int4(s: &TypeSignature) -> bool {
    match s {
        TypeSignature::Exact(types) => types.contains(&DataType::Int32),
        TypeSignature::OneOf(all) => all.iter().any(takes_int4),
        _ => false,
    }
}

/// A function taking `integer` arguments that also takes `bigint` ones
/// there, cast down (an error past the range): `pg_get_userbyid(10)`
/// works, since PostgreSQL types `10` as `integer` where DataFusion has
/// `bigint`, and DataFusion will not narrow to an exact signature.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Int4Arguments {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl Int4Arguments {
    fn new(inner: Arc<ScalarUDF>) -> Self {
        let signature = Signature::user_defined(inner.signature().volatility);
        Int4Arguments { inner, signature }
    }
}

impl ScalarUDFImpl for Int4Arguments {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        let coerce = |types: &[DataType]| coerced(types, self.inner.as_ref());
        coerce(types).or_else(|first| {
            let narrowed: Vec<DataType> = types
                .iter()
                .map(|t| match t {
                    DataType::Int64 => DataType::Int32,
                    t => t.clone(),
                })
                .collect();
            coerce(&narrowed).map_err(|_| first)
        })
    }
    fn return_type(&self, types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(types)
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}

/// `pg_size_pretty(bigint)`: PostgreSQL 15's units and half-rounding.
pub fn size_pretty(size: i64) -> String {
    // (unit, limit before half-rounding in this unit, rounds, bits)
    const UNITS: &[(&str, i64, bool, u32)] = &[
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
        ("PB", 20 * 1024 - 1, true, 50),
    ];
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    let mut size = size;
    for (i, (name, limit, round, bits)) in UNITS.iter().enumerate() {
        let Some(next) = UNITS.get(i + 1) else {
            return format!("{} {name}", half_rounded(size));
        };
        if size.unsigned_abs() < *limit as u64 {
            let size = if *round { half_rounded(size) } else { size };
            return format!("{size} {name}");
        }
        let shift = next.3 - bits - u32::from(next.2) + u32::from(*round);
        size /= 1i64 << shift;
    }
    unreachable!("the last unit returns")
}

/// `to_regtype(name)`: the oid of a type tablegate has, by any of its
/// PostgreSQL names; NULL for others (psycopg asks for `hstore` on
/// connect).
fn type_oid(name: &str) -> Option<i32> {
    use pgwire::api::Type;
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let (base, array) = match name.strip_suffix("[]") {
        Some(b) => (b.trim(), true),
        None => (name, false),
    };
    let t = match base {
        "bool" | "boolean" => Type::BOOL,
        "bytea" => Type::BYTEA,
        "int2" | "smallint" => Type::INT2,
        "int4" | "integer" | "int" => Type::INT4,
        "int8" | "bigint" => Type::INT8,
        "float4" | "real" => Type::FLOAT4,
        "float8" | "double precision" => Type::FLOAT8,
        "numeric" | "decimal" => Type::NUMERIC,
        "text" => Type::TEXT,
        "varchar" | "character varying" => Type::VARCHAR,
        "uuid" => Type::UUID,
        "date" => Type::DATE,
        "time" | "time without time zone" => Type::TIME,
        "timestamp" | "timestamp without time zone" => Type::TIMESTAMP,
        "timestamptz" | "timestamp with time zone" => Type::TIMESTAMPTZ,
        "interval" => Type::INTERVAL,
        "json" => Type::JSON,
        "jsonb" => Type::JSONB,
        "oid" => Type::OID,
        _ => return None,
    };
    let t = if array {
        match t {
            Type::BOOL => Type::BOOL_ARRAY,
            Type::INT2 => Type::INT2_ARRAY,
            Type::INT4 => Type::INT4_ARRAY,
            Type::INT8 => Type::INT8_ARRAY,
            Type::FLOAT4 => Type::FLOAT4_ARRAY,
            Type::FLOAT8 => Type::FLOAT8_ARRAY,
            Type::TEXT => Type::TEXT_ARRAY,
            _ => return None,
        }
    } else {
        t
    };
    i32::try_from(t.oid()).ok()
}

/// PostgreSQL's name for the type of a value of `dt` (`format_type`).
pub(crate) fn pg_type_name(dt: &DataType) -> String {
    use pgwire::api::Type;
    let t = crate::encode::pg_type_of(dt);
    let name = |t: &Type| -> String {
        match *t {
            Type::INT2 => "smallint".into(),
            Type::INT4 => "integer".into(),
            Type::INT8 => "bigint".into(),
            Type::FLOAT4 => "real".into(),
            Type::FLOAT8 => "double precision".into(),
            Type::BOOL => "boolean".into(),
            Type::TIMESTAMPTZ => "timestamp with time zone".into(),
            Type::TIMESTAMP => "timestamp without time zone".into(),
            Type::TIME => "time without time zone".into(),
            _ => t.name().to_owned(),
        }
    };
    match t.kind() {
        postgres_types::Kind::Array(elem) => format!("{}[]", name(elem)),
        _ => name(&t),
    }
}

/// `to_hex(integer)` and `to_hex(bigint)`: two's complement in the
/// argument's own width, as PostgreSQL's (`to_hex(-1::int)` is `ffffffff`;
/// DataFusion's widens to 64 bits first).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToHex {
    signature: Signature,
}

impl ToHex {
    fn new() -> Self {
        ToHex {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Int32]),
                    TypeSignature::Exact(vec![DataType::Int64]),
                ],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for ToHex {
    fn name(&self) -> &str {
        "to_hex"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let values = ColumnarValue::values_to_arrays(&args.args)?;
        let out: StringArray = match values[0].data_type() {
            DataType::Int32 => datafusion::common::cast::as_int32_array(&values[0])?
                .iter()
                .map(|v| v.map(|v| format!("{:x}", v as u32)))
                .collect(),
            _ => datafusion::common::cast::as_int64_array(&values[0])?
                .iter()
                .map(|v| v.map(|v| format!("{:x}", v as u64)))
                .collect(),
        };
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// `pg_typeof(any)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl PgTypeof {
    fn new() -> Self {
        PgTypeof {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("pg_typeof takes one argument");
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            pg_type_name(&arg.data_type()),
        ))))
    }
}

/// `current_setting(name [, missing_ok])`: what SHOW says.
#[derive(Debug)]
struct CurrentSetting {
    signature: Signature,
    session: Arc<Mutex<Settings>>,
}

impl CurrentSetting {
    fn new(session: Arc<Mutex<Settings>>) -> Self {
        CurrentSetting {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
            session,
        }
    }
}

impl PartialEq for CurrentSetting {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.session, &other.session)
    }
}

impl Eq for CurrentSetting {}

impl std::hash::Hash for CurrentSetting {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.session).hash(state);
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = datafusion::common::cast::as_string_array(&arrays[0])?;
        let missing_ok = match arrays.get(1) {
            Some(a) => Some(datafusion::common::cast::as_boolean_array(a)?),
            None => None,
        };
        let session = self.session.lock();
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let Some(name) = name else {
                out.push(None);
                continue;
            };
            match session.get(name) {
                Ok(v) => out.push(Some(v)),
                Err(_) if missing_ok.is_some_and(|m| m.value(i)) => out.push(None),
                Err(e) => return Err(DataFusionError::External(Box::new(e))),
            }
        }
        let out: ArrayRef = Arc::new(StringArray::from(out));
        Ok(
            match args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
                false => ColumnarValue::Array(out),
            },
        )
    }
}

/// `format(formatstr, args…)`: PostgreSQL's `%s`, `%I`, `%L` and `%%`, with
/// `n$` positions and `-`/width padding.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl Format {
    fn new() -> Self {
        Format {
            signature: Signature::variadic_any(Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.is_empty() {
            return exec_err!("function format() requires at least one argument");
        }
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts = arrays.iter().map(pg_texts).collect::<Result<Vec<_>>>()?;
        let rows = arrays.first().map_or(0, |a| a.len());
        let mut out = datafusion::arrow::array::StringBuilder::new();
        let mut row_args = Vec::with_capacity(texts.len());
        for i in 0..rows {
            row_args.clear();
            row_args.extend(texts.iter().map(|t| t[i].as_deref()));
            match row_args[0] {
                None => out.append_null(),
                Some(f) => out.append_value(format_row(f, &row_args[1..])?),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// Each value as PostgreSQL's text output writes it.
fn pg_texts(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Float32Type, Float64Type};
    Ok(match a.data_type() {
        DataType::Boolean => a
            .as_boolean()
            .iter()
            .map(|b| b.map(|b| if b { "t" } else { "f" }.to_owned()))
            .collect(),
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .iter()
            .map(|d| d.map(crate::encode::pg_float_text))
            .collect(),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .map(|d| d.map(crate::encode::pg_float4_text))
            .collect(),
        _ => {
            let t = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
            let t = t.as_string::<i32>();
            (0..t.len())
                .map(|i| (!t.is_null(i)).then(|| t.value(i).to_owned()))
                .collect()
        }
    })
}

/// One row of `format()`.
fn format_row(f: &str, args: &[Option<&str>]) -> Result<String> {
    // PostgreSQL's SQLSTATEs: 22023 for a bad format, 22004 for a NULL name.
    let err = |m: String| {
        let code = if m.starts_with("null") {
            "22004"
        } else {
            "22023"
        };
        DataFusionError::External(Box::new(crate::sqlstate::PgError::new(code, m)))
    };
    let mut out = String::with_capacity(f.len());
    let mut chars = f.chars().peekable();
    let mut next = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            out.push('%');
            continue;
        }
        let number = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                chars.next();
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
            }
            n
        };
        let mut position = None;
        let mut left = chars.peek() == Some(&'-');
        if left {
            chars.next();
        }
        let mut width = number(&mut chars);
        if !left && chars.peek() == Some(&'$') {
            chars.next();
            position = width.take();
            left = chars.peek() == Some(&'-');
            if left {
                chars.next();
            }
            width = number(&mut chars);
        }
        let index = match position {
            Some(0) => {
                return Err(err(
                    "format specifies argument 0, but arguments are numbered from 1".into(),
                ));
            }
            Some(p) => p - 1,
            None => next,
        };
        next = index + 1;
        let Some(kind) = chars.next() else {
            return Err(err("unterminated format() type specifier".into()));
        };
        let Some(value) = args.get(index) else {
            return Err(err("too few arguments for format()".into()));
        };
        let text = match (kind, value) {
            ('s', v) => v.unwrap_or_default().to_owned(),
            ('I', None) => {
                return Err(err(
                    "null values cannot be formatted as an SQL identifier".into()
                ));
            }
            ('I', Some(v)) => quote_ident(v),
            ('L', None) => "NULL".to_owned(),
            ('L', Some(v)) => quote_literal(v),
            (k, _) => return Err(err(format!("unrecognized format() type specifier \"{k}\""))),
        };
        let pad = width.unwrap_or(0).saturating_sub(text.chars().count());
        if left {
            out.push_str(&text);
        }
        out.extend(std::iter::repeat_n(' ', pad));
        if !left {
            out.push_str(&text);
        }
    }
    Ok(out)
}

/// `quote_ident`: bare when PostgreSQL would read it back unchanged.
pub(super) fn quote_ident(v: &str) -> String {
    let bare = v
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if bare {
        v.to_owned()
    } else {
        format!("\"{}\"", v.replace('"', "\"\""))
    }
}

/// `quote_literal`: `E'…'` when there is a backslash, as PostgreSQL writes it.
fn quote_literal(v: &str) -> String {
    let quoted = v.replace('\'', "''");
    if v.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// A function of any arguments, in one of `arities` counts, with one answer.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    signature: Signature,
    value: ScalarValue,
}

impl Constant {
    fn new(name: &'static str, arities: &[usize], value: ScalarValue) -> Self {
        Constant {
            name,
            signature: Signature::one_of(
                arities
                    .iter()
                    .map(|&n| match n {
                        0 => TypeSignature::Nullary,
                        n => TypeSignature::Any(n),
                    })
                    .collect(),
                Volatility::Stable,
            ),
            value,
        }
    }
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.value.data_type())
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_resolve_as_to_regtype_does() {
        assert_eq!(type_oid("integer"), Some(23));
        assert_eq!(type_oid("pg_catalog.int4"), Some(23));
        assert_eq!(type_oid("timestamp with time zone"), Some(1184));
        assert_eq!(type_oid("text[]"), Some(1009));
        assert_eq!(type_oid("hstore"), None);
    }

    #[test]
    fn format_answers_as_postgresql_15() {
        let f = |fmt: &str, args: &[Option<&str>]| format_row(fmt, args).map_err(|e| e.to_string());
        assert_eq!(f("%s-%s", &[Some("a"), None]), Ok("a-".into()));
        assert_eq!(
            f("%2$s %1$s %s", &[Some("a"), Some("b")]),
            Ok("b a b".into())
        );
        assert_eq!(
            f("|%5s|%-5s|", &[Some("ab"), Some("cd")]),
            Ok("|   ab|cd   |".into())
        );
        assert_eq!(
            f("%I.%I", &[Some("public"), Some("My \"T\"")]),
            Ok("public.\"My \"\"T\"\"\"".into())
        );
        assert_eq!(
            f("%L %L %L", &[Some("it's"), None, Some("a\\b")]),
            Ok("'it''s' NULL E'a\\\\b'".into())
        );
        assert_eq!(f("100%%", &[]), Ok("100%".into()));
        assert!(
            f("%s %s", &[Some("a")])
                .unwrap_err()
                .contains("too few arguments")
        );
        assert!(
            f("%x", &[Some("a")])
                .unwrap_err()
                .contains("unrecognized format() type specifier \"x\"")
        );
        assert!(f("%I", &[None]).unwrap_err().contains("SQL identifier"));
    }

    #[test]
    fn sizes_print_as_postgresql_15_prints_them() {
        // Each figure is PostgreSQL 15's `SELECT pg_size_pretty(n)`.
        for (n, want) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (-10240, "-10 kB"),
            (1_234_567, "1206 kB"),
            (20_970_000, "20 MB"),
            (123_456_789_012, "115 GB"),
            (i64::MAX, "8192 PB"),
            (i64::MIN, "-8192 PB"),
        ] {
            assert_eq!(size_pretty(n), want, "{n}");
        }
    }
}
