//! Bound predicates: sqlparser expressions resolved against one table.
//!
//! Binding resolves column names, gives literals the type of the column they
//! are compared with (as PostgreSQL types an unknown-typed literal), infers
//! parameter types from the same context, and turns anything the store
//! cannot evaluate (functions, casts of columns, arithmetic, column-to-column
//! comparisons) into an [`BExpr::Opaque`] node, which keeps the query off the
//! native path.

use std::fmt;

use sqlparser::ast::{self, BinaryOperator, Expr, UnaryOperator};
use tablegate_catalog::{ColumnRef, Role, SqlType, TableDef};
use tablegate_store::{CmpOp, Value};

use crate::error::{PlanError, Result};

/// A bound boolean or scalar expression.
#[derive(Debug, Clone, PartialEq)]
pub enum BExpr {
    /// A column of the table.
    Column(ColumnRef),
    /// A typed constant.
    Lit(Value),
    /// SQL NULL.
    Null,
    /// `$n` (0-based), with its inferred type; replaced at bind time.
    Param(usize, SqlType),
    /// `true` / `false`.
    Bool(bool),
    /// `left op right`.
    Cmp(Box<BExpr>, CmpOp, Box<BExpr>),
    /// Conjunction.
    And(Vec<BExpr>),
    /// Disjunction.
    Or(Vec<BExpr>),
    /// Negation.
    Not(Box<BExpr>),
    /// `expr [NOT] IN (list)`.
    InList {
        /// Tested expression.
        expr: Box<BExpr>,
        /// Candidates.
        list: Vec<BExpr>,
        /// NOT IN.
        negated: bool,
    },
    /// `expr [NOT] BETWEEN low AND high`.
    Between {
        /// Tested expression.
        expr: Box<BExpr>,
        /// Lower bound.
        low: Box<BExpr>,
        /// Upper bound.
        high: Box<BExpr>,
        /// NOT BETWEEN.
        negated: bool,
    },
    /// `expr [NOT] [I]LIKE pattern [ESCAPE c]`.
    Like {
        /// Tested expression.
        expr: Box<BExpr>,
        /// Pattern (a text literal or parameter).
        pattern: Box<BExpr>,
        /// Escape character (`\` by default, as in PostgreSQL).
        escape: Option<char>,
        /// NOT LIKE.
        negated: bool,
        /// ILIKE.
        case_insensitive: bool,
    },
    /// `expr IS [NOT] NULL`.
    IsNull {
        /// Tested expression.
        expr: Box<BExpr>,
        /// IS NOT NULL.
        negated: bool,
    },
    /// `(a, b) op (x, y)`: lexicographic row comparison.
    RowCmp {
        /// Left row.
        left: Vec<BExpr>,
        /// Operator.
        op: CmpOp,
        /// Right row.
        right: Vec<BExpr>,
    },
    /// Something only a full SQL engine evaluates; kept as SQL text.
    Opaque(String),
}

/// How a literal looked before it met a column.
#[derive(Debug, Clone)]
enum Untyped {
    Str(String),
    Num(String),
}

/// An operand while binding.
#[derive(Debug, Clone)]
enum Operand {
    Col(ColumnRef),
    Untyped(Untyped),
    Typed(Value),
    Bool(bool),
    Null,
    Param(usize),
    Opaque(String),
}

/// Binds expressions of one statement against one table.
#[derive(Debug)]
pub struct Binder<'a> {
    /// The table.
    pub table: &'a TableDef,
    /// Names the table may be referred to by (name, alias).
    pub qualifiers: Vec<String>,
    /// Inferred parameter types, by index.
    pub params: Vec<Option<SqlType>>,
    /// The SQL text, for error positions.
    pub sql: &'a str,
}

/// Converts a sqlparser location (1-based line and column) into a 1-based
/// character offset in `sql`.
pub fn char_position(sql: &str, loc: sqlparser::tokenizer::Location) -> Option<usize> {
    if loc.line == 0 {
        return None;
    }
    let mut pos = 0usize;
    for (i, line) in sql.split('\n').enumerate() {
        if i + 1 == loc.line as usize {
            return Some(pos + loc.column as usize);
        }
        pos += line.chars().count() + 1;
    }
    None
}

/// Folds an identifier as PostgreSQL does: lower case unless quoted.
pub fn fold(ident: &ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// A numeric literal compared (`op`, column on the left) with an integer
/// column, exactly as PostgreSQL compares it (as numeric, not as a double
/// that rounds `9223372036854775806.5` to 2^63). An integer in bigint's
/// range is itself; a fraction is rounded the way that keeps the
/// comparison's meaning on integers (`x < 2.5` is `x < 3`, `x > 2.5` is
/// `x > 2`); what lies beyond bigint becomes a double beyond it, and a
/// fraction no integer can equal a value that equals none, so the column's
/// own range rules (`keys::filter::in_column_type`) finish the job.
fn integer_operand(n: &str, op: &str) -> Option<Value> {
    let t = n.trim();
    if t.contains(['e', 'E']) {
        let d: f64 = t.parse().ok()?;
        return Some(if d.fract() == 0.0 && d.abs() < 9.2e18 {
            Value::Int64(d as i64)
        } else {
            Value::Double(d)
        });
    }
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if !(int.bytes().all(|b| b.is_ascii_digit()) && frac.bytes().all(|b| b.is_ascii_digit()))
        || (int.is_empty() && frac.is_empty())
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    // Past 30 digits every integer type is far behind: say "huge".
    let beyond = if neg { -1e30 } else { 1e30 };
    if int.len() > 30 {
        return Some(Value::Double(beyond));
    }
    let magnitude: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let trunc = if neg { -magnitude } else { magnitude };
    let n = if frac.bytes().any(|b| b != b'0') {
        match op {
            "<" | ">=" => trunc + i128::from(!neg),
            "<=" | ">" => trunc - i128::from(neg),
            // No integer equals a fraction: the literal as a double when it
            // still is one, else NaN (equal to no integer either).
            _ => {
                let d: f64 = t.parse().ok()?;
                return Some(Value::Double(if d.fract() != 0.0 { d } else { f64::NAN }));
            }
        }
    } else {
        trunc
    };
    Some(match i64::try_from(n) {
        Ok(i) => Value::Int64(i),
        Err(_) => Value::Double(beyond),
    })
}

/// The operator seen from the other side (`a < b` is `b > a`).
pub fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        o => o,
    }
}

fn cmp_op(op: &BinaryOperator) -> Option<CmpOp> {
    Some(match op {
        BinaryOperator::Eq => CmpOp::Eq,
        BinaryOperator::NotEq => CmpOp::Ne,
        BinaryOperator::Lt => CmpOp::Lt,
        BinaryOperator::LtEq => CmpOp::Le,
        BinaryOperator::Gt => CmpOp::Gt,
        BinaryOperator::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

/// The SQL spelling of an operator.
pub fn op_text(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "=",
        CmpOp::Ne => "<>",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

impl<'a> Binder<'a> {
    /// A binder for `table` (also reachable as `alias`).
    pub fn new(table: &'a TableDef, alias: Option<String>, sql: &'a str) -> Self {
        let mut qualifiers = vec![table.name.to_lowercase()];
        qualifiers.extend(alias);
        Binder {
            table,
            qualifiers,
            params: Vec::new(),
            sql,
        }
    }

    /// Resolves a column reference.
    pub fn column(&self, idents: &[ast::Ident]) -> Result<ColumnRef> {
        let (qual, name) = match idents {
            [c] => (None, c),
            [t, c] => (Some(t), c),
            [_, t, c] => (Some(t), c),
            _ => {
                return Err(PlanError::Unsupported {
                    feature: format!(
                        "column reference {}",
                        ast::ObjectName::from(idents.to_vec())
                    ),
                    hint: "refer to columns as column or table.column".into(),
                });
            }
        };
        let position = char_position(self.sql, name.span.start);
        if let Some(q) = qual
            && !self.qualifiers.contains(&fold(q))
        {
            return Err(PlanError::UnknownTable {
                name: q.value.clone(),
                position: char_position(self.sql, q.span.start),
            });
        }
        let folded = fold(name);
        self.table.resolve(&folded).map_err(|_| {
            let similar: Vec<_> = self
                .table
                .star()
                .into_iter()
                .map(|c| c.name)
                .filter(|c| {
                    c.eq_ignore_ascii_case(&folded)
                        || c.contains(&folded)
                        || folded.contains(c.as_str())
                })
                .collect();
            PlanError::UnknownColumn {
                name: folded.clone(),
                position,
                hint: (!similar.is_empty())
                    .then(|| format!("perhaps you meant {}", similar.join(" or "))),
            }
        })
    }

    pub(crate) fn note_param(&mut self, n: usize, ty: SqlType) {
        if self.params.len() <= n {
            self.params.resize(n + 1, None);
        }
        self.params[n].get_or_insert(ty);
    }

    fn operand(&mut self, e: &Expr) -> Result<Operand> {
        Ok(match e {
            Expr::Nested(inner) => return self.operand(inner),
            Expr::Identifier(i) => Operand::Col(self.column(std::slice::from_ref(i))?),
            Expr::CompoundIdentifier(ids) => Operand::Col(self.column(ids)?),
            Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => Operand::Untyped(Untyped::Num(n.to_string())),
                ast::Value::SingleQuotedString(s)
                | ast::Value::EscapedStringLiteral(s)
                | ast::Value::DollarQuotedString(ast::DollarQuotedString { value: s, .. }) => {
                    Operand::Untyped(Untyped::Str(s.clone()))
                }
                ast::Value::Boolean(b) => Operand::Bool(*b),
                ast::Value::Null => Operand::Null,
                ast::Value::Placeholder(p) => Operand::Param(param_index(p)?),
                _ => Operand::Opaque(e.to_string()),
            },
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match self.operand(expr)? {
                Operand::Untyped(Untyped::Num(n)) => {
                    Operand::Untyped(Untyped::Num(format!("-{n}")))
                }
                _ => Operand::Opaque(e.to_string()),
            },
            Expr::TypedString(ts) => {
                let text = match &ts.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                };
                self.typed_literal(&ts.data_type, &text, e)?
            }
            Expr::Cast {
                expr: inner,
                data_type,
                ..
            } => match self.operand(inner)? {
                Operand::Untyped(Untyped::Str(s)) | Operand::Untyped(Untyped::Num(s)) => {
                    self.typed_literal(data_type, &s, e)?
                }
                Operand::Param(n) => match SqlType::parse(&data_type.to_string()) {
                    Ok(ty) => {
                        self.note_param(n, ty);
                        Operand::Param(n)
                    }
                    Err(_) => Operand::Opaque(e.to_string()),
                },
                Operand::Null => Operand::Null,
                _ => Operand::Opaque(e.to_string()),
            },
            other => Operand::Opaque(other.to_string()),
        })
    }

    fn typed_literal(&self, data_type: &ast::DataType, text: &str, e: &Expr) -> Result<Operand> {
        match SqlType::parse(&data_type.to_string()) {
            Ok(ty) => Ok(Operand::Typed(
                ty.parse_text(text)
                    .map_err(|err| PlanError::InvalidValue(err.to_string()))?,
            )),
            Err(_) => Ok(Operand::Opaque(e.to_string())),
        }
    }

    /// Gives an operand compared with `col` the column's type.
    fn coerce(&mut self, col: &ColumnRef, op: &str, v: Operand) -> Result<BExpr> {
        let mismatch = |right: &str, hint: &str| PlanError::TypeMismatch {
            left: col.ty.pg_name().to_owned(),
            op: op.to_owned(),
            right: right.to_owned(),
            hint: hint.to_owned(),
        };
        Ok(match v {
            Operand::Null => BExpr::Null,
            Operand::Param(n) => {
                self.note_param(n, col.ty);
                BExpr::Param(n, col.ty)
            }
            Operand::Untyped(Untyped::Str(s)) => {
                if col.role == Role::ETag {
                    return Ok(BExpr::Lit(Value::String(s)));
                }
                BExpr::Lit(
                    col.ty
                        .parse_text(&s)
                        .map_err(|e| PlanError::InvalidValue(e.to_string()))?,
                )
            }
            Operand::Untyped(Untyped::Num(n)) => match col.ty {
                SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => BExpr::Lit(
                    integer_operand(&n, op)
                        .ok_or_else(|| PlanError::InvalidValue(format!("invalid number {n}")))?,
                ),
                SqlType::Float8 => {
                    match n.parse::<i64>() {
                        Ok(i) => BExpr::Lit(Value::Int64(i)),
                        Err(_) => BExpr::Lit(Value::Double(n.parse().map_err(|_| {
                            PlanError::InvalidValue(format!("invalid number {n}"))
                        })?)),
                    }
                }
                SqlType::Text => {
                    return Err(mismatch(
                        if n.contains('.') {
                            "numeric"
                        } else {
                            "integer"
                        },
                        &format!("key and text columns compare with text: write '{n}' in quotes"),
                    ));
                }
                _ => {
                    return Err(mismatch(
                        "integer",
                        "compare with a value of the column's type",
                    ));
                }
            },
            Operand::Bool(b) => match col.ty {
                SqlType::Bool => BExpr::Lit(Value::Boolean(b)),
                _ => {
                    return Err(mismatch(
                        "boolean",
                        "compare with a value of the column's type",
                    ));
                }
            },
            Operand::Typed(v) => {
                let lit_numeric = matches!(v, Value::Int32(_) | Value::Int64(_) | Value::Double(_));
                if v.edm_type() != col.ty.edm() && !(col.ty.is_numeric() && lit_numeric) {
                    return Err(mismatch(
                        v.edm_type().name(),
                        "cast the value to the column's type",
                    ));
                }
                BExpr::Lit(v)
            }
            Operand::Col(c) => BExpr::Opaque(format!("{} {op} {}", col.name, c.name)),
            Operand::Opaque(s) => BExpr::Opaque(format!("{} {op} {s}", col.name)),
        })
    }

    fn comparison(&mut self, left: &Expr, op: CmpOp, right: &Expr, whole: &Expr) -> Result<BExpr> {
        if let (Expr::Tuple(l), Expr::Tuple(r)) = (strip(left), strip(right)) {
            if l.len() != r.len() {
                return Err(PlanError::Syntax {
                    message: "row comparison with rows of different lengths".into(),
                    position: None,
                });
            }
            let mut lb = Vec::new();
            let mut rb = Vec::new();
            for (a, b) in l.iter().zip(r) {
                match self.comparison(a, CmpOp::Eq, b, whole)? {
                    BExpr::Cmp(x, _, y) => {
                        lb.push(*x);
                        rb.push(*y);
                    }
                    _ => return Ok(BExpr::Opaque(whole.to_string())),
                }
            }
            return Ok(BExpr::RowCmp {
                left: lb,
                op,
                right: rb,
            });
        }
        let l = self.operand(left)?;
        let r = self.operand(right)?;
        let text = op_text(op);
        Ok(match (l, r) {
            (Operand::Col(c), other) => {
                let v = self.coerce(&c, text, other)?;
                match v {
                    BExpr::Opaque(_) => BExpr::Opaque(whole.to_string()),
                    v => BExpr::Cmp(Box::new(BExpr::Column(c)), op, Box::new(v)),
                }
            }
            (other, Operand::Col(c)) => {
                let v = self.coerce(&c, op_text(flip(op)), other)?;
                match v {
                    BExpr::Opaque(_) => BExpr::Opaque(whole.to_string()),
                    v => BExpr::Cmp(Box::new(BExpr::Column(c)), flip(op), Box::new(v)),
                }
            }
            (Operand::Null, _) | (_, Operand::Null) => BExpr::Null,
            (Operand::Untyped(Untyped::Num(a)), Operand::Untyped(Untyped::Num(b))) => {
                match (a.parse::<f64>(), b.parse::<f64>()) {
                    (Ok(x), Ok(y)) => BExpr::Bool(
                        Value::Double(x)
                            .sql_cmp(&Value::Double(y))
                            .is_some_and(|o| cmp_holds(op, o)),
                    ),
                    _ => BExpr::Opaque(whole.to_string()),
                }
            }
            (Operand::Untyped(Untyped::Str(a)), Operand::Untyped(Untyped::Str(b))) => {
                BExpr::Bool(cmp_holds(op, a.cmp(&b)))
            }
            _ => BExpr::Opaque(whole.to_string()),
        })
    }

    /// Binds a WHERE predicate.
    pub fn predicate(&mut self, e: &Expr) -> Result<BExpr> {
        Ok(match e {
            Expr::Nested(inner) => self.predicate(inner)?,
            // Long AND / OR chains are flattened without recursion: a
            // 20,000-term OR is one node, not 20,000 nested ones, so nothing
            // after binding recurses deeply.
            Expr::BinaryOp {
                op: op @ (BinaryOperator::And | BinaryOperator::Or),
                ..
            } => {
                let mut terms = Vec::new();
                let mut stack = vec![e];
                while let Some(x) = stack.pop() {
                    match strip(x) {
                        Expr::BinaryOp { left, op: o, right } if o == op => {
                            stack.push(right);
                            stack.push(left);
                        }
                        leaf => terms.push(self.predicate(leaf)?),
                    }
                }
                if *op == BinaryOperator::And {
                    BExpr::And(terms)
                } else {
                    BExpr::Or(terms)
                }
            }
            Expr::BinaryOp { left, op, right } => match cmp_op(op) {
                Some(c) => self.comparison(left, c, right, e)?,
                None => BExpr::Opaque(e.to_string()),
            },
            Expr::UnaryOp {
                op: UnaryOperator::Not,
                expr,
            } => BExpr::Not(Box::new(self.predicate(expr)?)),
            Expr::IsNull(x) | Expr::IsNotNull(x) => match self.operand(x)? {
                Operand::Col(c) => BExpr::IsNull {
                    expr: Box::new(BExpr::Column(c)),
                    negated: matches!(e, Expr::IsNotNull(_)),
                },
                Operand::Null => BExpr::Bool(matches!(e, Expr::IsNull(_))),
                _ => BExpr::Opaque(e.to_string()),
            },
            // `(a, b) IN ((x, y), …)` is `(a, b) = (x, y) OR …`, so a row
            // IN over the keys is a set of point lookups.
            Expr::InList {
                expr,
                list,
                negated,
            } if matches!(strip(expr), Expr::Tuple(_)) => {
                if !list
                    .iter()
                    .all(|item| matches!(strip(item), Expr::Tuple(_)))
                {
                    return Ok(BExpr::Opaque(e.to_string()));
                }
                let mut rows = Vec::with_capacity(list.len());
                for item in list {
                    match self.comparison(expr, CmpOp::Eq, item, e)? {
                        BExpr::Opaque(_) => return Ok(BExpr::Opaque(e.to_string())),
                        row => rows.push(row),
                    }
                }
                let any = BExpr::Or(rows);
                if *negated {
                    BExpr::Not(Box::new(any))
                } else {
                    any
                }
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => match self.operand(expr)? {
                Operand::Col(c) => {
                    let mut items = Vec::with_capacity(list.len());
                    for item in list {
                        let o = self.operand(item)?;
                        match self.coerce(&c, "=", o)? {
                            BExpr::Opaque(_) => return Ok(BExpr::Opaque(e.to_string())),
                            v => items.push(v),
                        }
                    }
                    BExpr::InList {
                        expr: Box::new(BExpr::Column(c)),
                        list: items,
                        negated: *negated,
                    }
                }
                _ => BExpr::Opaque(e.to_string()),
            },
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => match self.operand(expr)? {
                Operand::Col(c) => {
                    let lo = self.operand(low)?;
                    let hi = self.operand(high)?;
                    let lo = self.coerce(&c, ">=", lo)?;
                    let hi = self.coerce(&c, "<=", hi)?;
                    if matches!(lo, BExpr::Opaque(_)) || matches!(hi, BExpr::Opaque(_)) {
                        BExpr::Opaque(e.to_string())
                    } else {
                        BExpr::Between {
                            expr: Box::new(BExpr::Column(c)),
                            low: Box::new(lo),
                            high: Box::new(hi),
                            negated: *negated,
                        }
                    }
                }
                _ => BExpr::Opaque(e.to_string()),
            },
            Expr::Like {
                negated,
                expr,
                pattern,
                escape_char,
                any: false,
            }
            | Expr::ILike {
                negated,
                expr,
                pattern,
                escape_char,
                any: false,
            } => {
                let case_insensitive = matches!(e, Expr::ILike { .. });
                let escape = match escape_char {
                    None => Some('\\'),
                    Some(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) if s.is_empty() => None,
                        ast::Value::SingleQuotedString(s) if s.chars().count() == 1 => {
                            s.chars().next()
                        }
                        _ => {
                            return Err(PlanError::InvalidValue(
                                "invalid escape string: it must be empty or one character".into(),
                            ));
                        }
                    },
                };
                match (self.operand(expr)?, self.operand(pattern)?) {
                    (Operand::Col(c), p) if c.ty == SqlType::Text => {
                        let p = match p {
                            Operand::Untyped(Untyped::Str(s)) => BExpr::Lit(Value::String(s)),
                            Operand::Param(n) => {
                                self.note_param(n, SqlType::Text);
                                BExpr::Param(n, SqlType::Text)
                            }
                            Operand::Null => BExpr::Null,
                            _ => return Ok(BExpr::Opaque(e.to_string())),
                        };
                        BExpr::Like {
                            expr: Box::new(BExpr::Column(c)),
                            pattern: Box::new(p),
                            escape,
                            negated: *negated,
                            case_insensitive,
                        }
                    }
                    _ => BExpr::Opaque(e.to_string()),
                }
            }
            Expr::Value(v) => match &v.value {
                ast::Value::Boolean(b) => BExpr::Bool(*b),
                ast::Value::Null => BExpr::Null,
                _ => BExpr::Opaque(e.to_string()),
            },
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => match self.operand(e)? {
                // A boolean column used as a predicate: `WHERE flag`.
                Operand::Col(c) if c.ty == SqlType::Bool => BExpr::Cmp(
                    Box::new(BExpr::Column(c)),
                    CmpOp::Eq,
                    Box::new(BExpr::Lit(Value::Boolean(true))),
                ),
                Operand::Col(c) => {
                    return Err(PlanError::TypeMismatch {
                        left: c.ty.pg_name().into(),
                        op: "WHERE".into(),
                        right: "boolean".into(),
                        hint: format!(
                            "argument of WHERE must be type boolean, not type {}",
                            c.ty.pg_name()
                        ),
                    });
                }
                _ => BExpr::Opaque(e.to_string()),
            },
            other => BExpr::Opaque(other.to_string()),
        })
    }

    /// Binds a LIMIT / OFFSET expression: a non-negative integer or `$n`.
    pub fn count(&mut self, e: &Expr) -> Result<Count> {
        match self.operand(e)? {
            Operand::Untyped(Untyped::Num(n)) => n.parse::<u64>().map(Count::Value).map_err(|_| {
                PlanError::InvalidValue(format!(
                    "LIMIT and OFFSET take a non-negative integer, not {n}"
                ))
            }),
            Operand::Param(n) => {
                self.note_param(n, SqlType::Int8);
                Ok(Count::Param(n))
            }
            Operand::Null => Ok(Count::All),
            _ => Err(PlanError::Unsupported {
                feature: format!("LIMIT/OFFSET expression {e}"),
                hint: "use a number or a parameter".into(),
            }),
        }
    }
}

/// A LIMIT or OFFSET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// No limit.
    All,
    /// A constant.
    Value(u64),
    /// A parameter (0-based).
    Param(usize),
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => strip(inner),
        other => other,
    }
}

fn cmp_holds(op: CmpOp, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => o == Equal,
        CmpOp::Ne => o != Equal,
        CmpOp::Lt => o == Less,
        CmpOp::Le => o != Greater,
        CmpOp::Gt => o == Greater,
        CmpOp::Ge => o != Less,
    }
}

fn param_index(p: &str) -> Result<usize> {
    p.strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .map(|n| n - 1)
        .ok_or_else(|| PlanError::Syntax {
            message: format!("invalid parameter {p}: parameters are $1, $2, ..."),
            position: None,
        })
}

impl BExpr {
    /// Replaces parameters with their values.
    pub fn substitute(&self, params: &[Option<Value>]) -> Result<BExpr> {
        let sub = |e: &BExpr| e.substitute(params);
        let subs = |v: &[BExpr]| {
            v.iter()
                .map(|e| e.substitute(params))
                .collect::<Result<Vec<_>>>()
        };
        Ok(match self {
            BExpr::Param(n, ty) => match params.get(*n) {
                None => {
                    return Err(PlanError::InvalidParameter(format!(
                        "there is no parameter ${}: {} supplied",
                        n + 1,
                        params.len()
                    )));
                }
                Some(None) => BExpr::Null,
                Some(Some(v)) => {
                    if v.edm_type() != ty.edm() {
                        return Err(PlanError::InvalidParameter(format!(
                            "parameter ${} is {} but {} is expected",
                            n + 1,
                            v.edm_type().name(),
                            ty.pg_name()
                        )));
                    }
                    BExpr::Lit(v.clone())
                }
            },
            BExpr::Cmp(a, op, b) => BExpr::Cmp(Box::new(sub(a)?), *op, Box::new(sub(b)?)),
            BExpr::And(v) => BExpr::And(subs(v)?),
            BExpr::Or(v) => BExpr::Or(subs(v)?),
            BExpr::Not(x) => BExpr::Not(Box::new(sub(x)?)),
            BExpr::InList {
                expr,
                list,
                negated,
            } => BExpr::InList {
                expr: Box::new(sub(expr)?),
                list: subs(list)?,
                negated: *negated,
            },
            BExpr::Between {
                expr,
                low,
                high,
                negated,
            } => BExpr::Between {
                expr: Box::new(sub(expr)?),
                low: Box::new(sub(low)?),
                high: Box::new(sub(high)?),
                negated: *negated,
            },
            BExpr::Like {
                expr,
                pattern,
                escape,
                negated,
                case_insensitive,
            } => BExpr::Like {
                expr: Box::new(sub(expr)?),
                pattern: Box::new(sub(pattern)?),
                escape: *escape,
                negated: *negated,
                case_insensitive: *case_insensitive,
            },
            BExpr::IsNull { expr, negated } => BExpr::IsNull {
                expr: Box::new(sub(expr)?),
                negated: *negated,
            },
            BExpr::RowCmp { left, op, right } => BExpr::RowCmp {
                left: subs(left)?,
                op: *op,
                right: subs(right)?,
            },
            other => other.clone(),
        })
    }

    /// True when the expression contains something only a SQL engine runs.
    pub fn has_opaque(&self) -> bool {
        match self {
            BExpr::Opaque(_) => true,
            BExpr::And(v) | BExpr::Or(v) => v.iter().any(BExpr::has_opaque),
            BExpr::Not(x) => x.has_opaque(),
            _ => false,
        }
    }
}

/// A literal in SQL syntax.
pub fn sql_literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        Value::Int32(i) => i.to_string(),
        Value::Int64(i) => i.to_string(),
        Value::Double(d) if d.is_finite() => format!("{d}"),
        Value::Double(d) => format!(
            "'{}'",
            if d.is_nan() {
                "NaN".to_owned()
            } else if *d > 0.0 {
                "Infinity".to_owned()
            } else {
                "-Infinity".to_owned()
            }
        ),
        Value::Boolean(b) => b.to_string(),
        Value::DateTime(t) => format!("'{t}'"),
        Value::Guid(g) => format!("'{}'", tablegate_store::entity::guid_text(g)),
        Value::Binary(b) => format!(
            "'\\x{}'",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

/// A literal as SQL, in the form its column's type shows it (a date
/// without the midnight the store keeps).
pub fn sql_literal_as(v: &Value, ty: SqlType) -> String {
    match (v, ty) {
        (Value::DateTime(t), SqlType::Date) => match tablegate_catalog::types::date_text(*t) {
            Some(d) => format!("'{d}'"),
            None => sql_literal(v),
        },
        _ => sql_literal(v),
    }
}

impl fmt::Display for BExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BExpr::Column(c) => write!(f, "{}", c.name),
            BExpr::Lit(v) => write!(f, "{}", sql_literal(v)),
            BExpr::Null => write!(f, "NULL"),
            BExpr::Param(n, _) => write!(f, "${}", n + 1),
            BExpr::Bool(b) => write!(f, "{b}"),
            BExpr::Cmp(a, op, b) => match (&**a, &**b) {
                (BExpr::Column(c), BExpr::Lit(v)) => {
                    write!(f, "{a} {} {}", op_text(*op), sql_literal_as(v, c.ty))
                }
                _ => write!(f, "{a} {} {b}", op_text(*op)),
            },
            BExpr::And(v) => join(f, v, " AND "),
            BExpr::Or(v) => {
                write!(f, "(")?;
                join(f, v, " OR ")?;
                write!(f, ")")
            }
            BExpr::Not(x) => write!(f, "NOT ({x})"),
            BExpr::InList {
                expr,
                list,
                negated,
            } => {
                write!(f, "{expr} {}IN (", if *negated { "NOT " } else { "" })?;
                join(f, list, ", ")?;
                write!(f, ")")
            }
            BExpr::Between {
                expr,
                low,
                high,
                negated,
            } => write!(
                f,
                "{expr} {}BETWEEN {low} AND {high}",
                if *negated { "NOT " } else { "" }
            ),
            BExpr::Like {
                expr,
                pattern,
                escape,
                negated,
                case_insensitive,
            } => {
                write!(
                    f,
                    "{expr} {}{} {pattern}",
                    if *negated { "NOT " } else { "" },
                    if *case_insensitive { "ILIKE" } else { "LIKE" }
                )?;
                match escape {
                    Some('\\') => Ok(()),
                    Some(c) => write!(f, " ESCAPE '{c}'"),
                    None => write!(f, " ESCAPE ''"),
                }
            }
            BExpr::IsNull { expr, negated } => {
                write!(f, "{expr} IS {}NULL", if *negated { "NOT " } else { "" })
            }
            BExpr::RowCmp { left, op, right } => {
                write!(f, "(")?;
                join(f, left, ", ")?;
                write!(f, ") {} (", op_text(*op))?;
                join(f, right, ", ")?;
                write!(f, ")")
            }
            BExpr::Opaque(s) => write!(f, "{s}"),
        }
    }
}

fn join(f: &mut fmt::Formatter<'_>, v: &[BExpr], sep: &str) -> fmt::Result {
    for (i, e) in v.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}
