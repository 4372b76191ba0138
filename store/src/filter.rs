//! The residual filter: predicates the store evaluates on every scanned
//! entity after the key spans have bounded the scan.
//!
//! Evaluation follows SQL three-valued logic: a comparison with a NULL or
//! missing property is *unknown*, `NOT unknown` is unknown, and only *true*
//! selects an entity. So `x <> 5` never matches an entity without `x`.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use crate::entity::{EdmType, Entity, Value};

/// What a predicate reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Field {
    /// The PartitionKey (a String).
    PartitionKey,
    /// The RowKey (a String).
    RowKey,
    /// The store-assigned Timestamp (a DateTime).
    Timestamp,
    /// The entity's ETag as the store gives it out (a String): compared
    /// as text, so a remote service's tags (finer than the Timestamp) match
    /// exactly.
    ETag,
    /// A named property.
    Property(String),
}

impl Field {
    /// A property field.
    pub fn prop(name: impl Into<String>) -> Field {
        Field::Property(name.into())
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Every operator (for generators and tables of cases).
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
}

/// A residual predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Always true.
    True,
    /// Always false.
    False,
    /// All must be true.
    And(Vec<Filter>),
    /// At least one must be true.
    Or(Vec<Filter>),
    /// Negation (unknown stays unknown).
    Not(Box<Filter>),
    /// `field op value`.
    Compare {
        /// Left side.
        field: Field,
        /// Operator.
        op: CmpOp,
        /// Right side, a constant.
        value: Value,
    },
    /// `field IN (values)`.
    In {
        /// Left side.
        field: Field,
        /// The list.
        values: Vec<Value>,
    },
    /// `field IS NULL` (missing property).
    IsNull(Field),
    /// `column IS NULL` for a column of EDM type `ty`: the property is
    /// missing or stored with another type (which reads as NULL; other
    /// writers of a shared table may use other types).
    IsNullAs(Field, EdmType),
    /// `field LIKE pattern` with `%`, `_` and an optional escape character.
    Like {
        /// Left side; must be a String to match.
        field: Field,
        /// The pattern.
        pattern: String,
        /// Escape character (PostgreSQL's default is `\`).
        escape: Option<char>,
        /// ILIKE.
        case_insensitive: bool,
    },
}

impl Filter {
    /// `field op value`.
    pub fn cmp(field: Field, op: CmpOp, value: Value) -> Filter {
        Filter::Compare { field, op, value }
    }

    /// True when the entity is selected.
    pub fn matches(&self, e: &Entity) -> bool {
        self.eval(e) == Some(true)
    }

    /// Three-valued evaluation: `None` is SQL's unknown.
    pub fn eval(&self, e: &Entity) -> Option<bool> {
        match self {
            Filter::True => Some(true),
            Filter::False => Some(false),
            Filter::And(fs) => {
                let mut result = Some(true);
                for f in fs {
                    match f.eval(e) {
                        Some(false) => return Some(false),
                        None => result = None,
                        Some(true) => {}
                    }
                }
                result
            }
            Filter::Or(fs) => {
                let mut result = Some(false);
                for f in fs {
                    match f.eval(e) {
                        Some(true) => return Some(true),
                        None => result = None,
                        Some(false) => {}
                    }
                }
                result
            }
            Filter::Not(f) => f.eval(e).map(|b| !b),
            Filter::Compare { field, op, value } => {
                let v = read(e, field)?;
                v.sql_cmp(value).map(|o| op.holds(o))
            }
            Filter::In { field, values } => {
                let v = read(e, field)?;
                let mut result = Some(false);
                for c in values {
                    match v.sql_cmp(c) {
                        Some(Ordering::Equal) => return Some(true),
                        None => result = None,
                        Some(_) => {}
                    }
                }
                result
            }
            Filter::IsNull(field) => Some(read(e, field).is_none()),
            Filter::IsNullAs(field, ty) => Some(match read(e, field) {
                None => true,
                Some(FieldValue::Value(v)) => v.edm_type() != *ty,
                Some(FieldValue::Owned(v)) => v.edm_type() != *ty,
                Some(FieldValue::Str(_)) => *ty != EdmType::String,
            }),
            Filter::Like {
                field,
                pattern,
                escape,
                case_insensitive,
            } => match read(e, field)? {
                FieldValue::Str(s) => Some(like(s, pattern, *escape, *case_insensitive)),
                FieldValue::Owned(Value::String(s)) => {
                    Some(like(&s, pattern, *escape, *case_insensitive))
                }
                FieldValue::Value(Value::String(s)) => {
                    Some(like(s, pattern, *escape, *case_insensitive))
                }
                _ => None,
            },
        }
    }

    /// Whether any field this filter reads satisfies `pred`.
    pub fn reads_any(&self, pred: &dyn Fn(&Field) -> bool) -> bool {
        match self {
            Filter::True | Filter::False => false,
            Filter::And(fs) | Filter::Or(fs) => fs.iter().any(|f| f.reads_any(pred)),
            Filter::Not(f) => f.reads_any(pred),
            Filter::Compare { field, .. }
            | Filter::In { field, .. }
            | Filter::IsNull(field)
            | Filter::IsNullAs(field, _)
            | Filter::Like { field, .. } => pred(field),
        }
    }

    /// The property names this filter reads (for projection pushdown: the
    /// store must decode them even if the caller does not return them).
    pub fn properties(&self, out: &mut Vec<String>) {
        match self {
            Filter::True | Filter::False => {}
            Filter::And(fs) | Filter::Or(fs) => fs.iter().for_each(|f| f.properties(out)),
            Filter::Not(f) => f.properties(out),
            Filter::Compare { field, .. }
            | Filter::In { field, .. }
            | Filter::IsNull(field)
            | Filter::IsNullAs(field, _)
            | Filter::Like { field, .. } => {
                if let Field::Property(p) = field
                    && !out.contains(p)
                {
                    out.push(p.clone());
                }
            }
        }
    }
}

/// A field's value, borrowed where possible.
enum FieldValue<'a> {
    Str(&'a str),
    Value(&'a Value),
    Owned(Value),
}

impl FieldValue<'_> {
    fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        match self {
            FieldValue::Str(s) => match other {
                Value::String(o) => Some((*s).cmp(o.as_str())),
                _ => None,
            },
            FieldValue::Value(v) => v.sql_cmp(other),
            FieldValue::Owned(v) => v.sql_cmp(other),
        }
    }
}

fn read<'a>(e: &'a Entity, field: &Field) -> Option<FieldValue<'a>> {
    match field {
        Field::PartitionKey => Some(FieldValue::Str(&e.partition_key)),
        Field::RowKey => Some(FieldValue::Str(&e.row_key)),
        Field::Timestamp => Some(FieldValue::Owned(Value::DateTime(e.timestamp))),
        Field::ETag => Some(FieldValue::Owned(Value::String(e.etag().0))),
        Field::Property(p) => e.properties.get(p).map(FieldValue::Value),
    }
}

/// SQL LIKE: `%` any run, `_` one character, `escape` makes the next
/// character literal. Iterative with backtracking to the last `%`, so it is
/// linear-ish and never recurses on hostile patterns.
pub fn like(text: &str, pattern: &str, escape: Option<char>, case_insensitive: bool) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Any,
        One,
        Lit(char),
    }
    let fold = |c: char| {
        if case_insensitive {
            c.to_lowercase().next().unwrap_or(c)
        } else {
            c
        }
    };
    let mut toks = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            // A trailing escape matches itself, as in PostgreSQL's lenient mode.
            toks.push(Tok::Lit(fold(chars.next().unwrap_or(c))));
        } else if c == '%' {
            if toks.last() != Some(&Tok::Any) {
                toks.push(Tok::Any);
            }
        } else if c == '_' {
            toks.push(Tok::One);
        } else {
            toks.push(Tok::Lit(fold(c)));
        }
    }
    let text: Vec<char> = text.chars().map(fold).collect();
    let (mut t, mut p) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match toks.get(p) {
            Some(Tok::One) => {
                t += 1;
                p += 1;
            }
            Some(Tok::Lit(c)) if *c == text[t] => {
                t += 1;
                p += 1;
            }
            Some(Tok::Any) => {
                star = Some((p, t));
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    toks[p..].iter().all(|t| *t == Tok::Any)
}

// Filters are part of a query's fingerprint (continuation tokens are bound to
// their query); doubles hash by bit pattern.
impl Hash for Filter {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Filter::True | Filter::False => {}
            Filter::And(fs) | Filter::Or(fs) => fs.hash(h),
            Filter::Not(f) => f.hash(h),
            Filter::Compare { field, op, value } => {
                field.hash(h);
                op.hash(h);
                value.hash(h);
            }
            Filter::In { field, values } => {
                field.hash(h);
                values.hash(h);
            }
            Filter::IsNull(f) => f.hash(h),
            Filter::IsNullAs(f, ty) => {
                f.hash(h);
                ty.hash(h);
            }
            Filter::Like {
                field,
                pattern,
                escape,
                case_insensitive,
            } => {
                field.hash(h);
                pattern.hash(h);
                escape.hash(h);
                case_insensitive.hash(h);
            }
        }
    }
}

impl Hash for Value {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Value::String(s) => s.hash(h),
            Value::Int32(i) => i.hash(h),
            Value::Int64(i) => i.hash(h),
            Value::Double(d) => d.to_bits().hash(h),
            Value::Boolean(b) => b.hash(h),
            Value::DateTime(t) => t.hash(h),
            Value::Guid(g) => g.hash(h),
            Value::Binary(b) => b.hash(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::DateTime;

    fn entity() -> Entity {
        let mut e = Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            timestamp: DateTime(5),
            etag: None,
            properties: Default::default(),
        };
        e.properties.insert("n".into(), Value::Int32(5));
        e.properties
            .insert("s".into(), Value::String("hello".into()));
        e
    }

    #[test]
    fn missing_property_never_matches_even_with_not_equal() {
        let e = entity();
        let ne = Filter::cmp(Field::prop("missing"), CmpOp::Ne, Value::Int32(1));
        assert!(!ne.matches(&e));
        assert!(!Filter::Not(Box::new(ne.clone())).matches(&e));
        // unknown OR true is true; unknown AND false is false.
        assert!(Filter::Or(vec![ne.clone(), Filter::True]).matches(&e));
        assert_eq!(Filter::And(vec![ne, Filter::False]).eval(&e), Some(false));
        assert!(Filter::IsNull(Field::prop("missing")).matches(&e));
        assert!(Filter::IsNullAs(Field::prop("missing"), EdmType::Int32).matches(&e));
        assert!(!Filter::IsNullAs(Field::prop("n"), EdmType::Int32).matches(&e));
        assert!(Filter::IsNullAs(Field::prop("n"), EdmType::String).matches(&e));
    }

    #[test]
    fn type_mismatch_is_unknown() {
        let e = entity();
        let f = Filter::cmp(Field::prop("s"), CmpOp::Eq, Value::Int32(5));
        assert_eq!(f.eval(&e), None);
        let f = Filter::cmp(Field::prop("n"), CmpOp::Lt, Value::Double(5.5));
        assert!(f.matches(&e));
    }

    #[test]
    fn like_patterns() {
        assert!(like("hello", "h%o", None, false));
        assert!(like("hello", "h_llo", None, false));
        assert!(!like("hello", "h_lo", None, false));
        assert!(like("50%", "50\\%", Some('\\'), false));
        assert!(!like("500", "50\\%", Some('\\'), false));
        assert!(like("HeLLo", "hel%", None, true));
        assert!(like("", "%", None, false));
        assert!(like("a_b", "a\\_b", Some('\\'), false));
        assert!(!like("axb", "a\\_b", Some('\\'), false));
        assert!(like("mississippi", "%iss%ppi", None, false));
        assert!(!like(
            &"a".repeat(5000),
            &"%a".repeat(50).replace("a", "b"),
            None,
            false
        ));
    }
}
