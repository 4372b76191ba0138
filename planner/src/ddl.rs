//! DDL: CREATE TABLE, DROP TABLE, ALTER TABLE ADD COLUMN, from sqlparser
//! statements to catalog definitions.

use sqlparser::ast::{self, ColumnOption, TableConstraint};
use sqlparser::dialect::PostgreSqlDialect;
use tablegate_catalog::{Column, ColumnDefault, SqlType, TableDef};

use crate::error::{PlanError, Result};
use crate::expr::fold;

fn object_name(n: &ast::ObjectName) -> Result<String> {
    match n.0.last().and_then(|p| p.as_ident()) {
        Some(i) => Ok(fold(i)),
        None => Err(PlanError::Unsupported {
            feature: format!("object name {n}"),
            hint: "use a plain table name".into(),
        }),
    }
}

/// One column definition.
pub fn column(c: &ast::ColumnDef) -> Result<(Column, bool)> {
    // `serial` and `bigserial` are an integer with an identity default.
    let type_name = c.data_type.to_string().to_ascii_lowercase();
    let (ty, mut default) = match type_name.as_str() {
        "serial" | "serial4" => (
            SqlType::Int4,
            Some(ColumnDefault::Identity { always: false }),
        ),
        "bigserial" | "serial8" => (
            SqlType::Int8,
            Some(ColumnDefault::Identity { always: false }),
        ),
        _ => (SqlType::parse(&type_name)?, None),
    };
    let mut not_null = default.is_some();
    let mut primary = false;
    for o in &c.options {
        match &o.option {
            ColumnOption::NotNull => not_null = true,
            ColumnOption::Null => {}
            ColumnOption::PrimaryKey(_) => primary = true,
            ColumnOption::Default(e) => default = Some(column_default(e, ty)?),
            ColumnOption::Generated {
                generated_as: generated @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                generation_expr: None,
                ..
            } if matches!(ty, SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => {
                default = Some(ColumnDefault::Identity {
                    always: matches!(generated, ast::GeneratedAs::Always),
                });
                not_null = true;
            }
            other => {
                return Err(PlanError::Unsupported {
                    feature: format!("column option {other}"),
                    hint: "the store keeps NOT NULL and PRIMARY KEY; defaults, checks, uniqueness and foreign keys are the application's".into(),
                });
            }
        }
    }
    Ok((
        Column {
            name: fold(&c.name),
            ty,
            not_null,
            default,
            hidden: false,
        },
        primary,
    ))
}

/// A DEFAULT clause: a constant of the column's type, `now()` /
/// `CURRENT_TIMESTAMP` on timestamp columns, `gen_random_uuid()` on uuid
/// columns. Other expressions are refused: the store has no expression
/// engine to run them at INSERT.
fn column_default(e: &ast::Expr, ty: SqlType) -> Result<ColumnDefault> {
    let unsupported = || PlanError::Unsupported {
        feature: format!("DEFAULT {e}"),
        hint: "a DEFAULT is a constant, now() on timestamps or gen_random_uuid() on uuids".into(),
    };
    let text = match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.to_string(),
            ast::Value::Boolean(b) => b.to_string(),
            ast::Value::Null => return Err(unsupported()),
            _ => return Err(unsupported()),
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match &**expr {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => format!("-{n}"),
                _ => return Err(unsupported()),
            },
            _ => return Err(unsupported()),
        },
        ast::Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            return match (name.as_str(), ty) {
                (
                    "now" | "current_timestamp",
                    SqlType::Timestamptz | SqlType::Timestamp | SqlType::Date,
                ) => Ok(ColumnDefault::Now),
                ("gen_random_uuid", SqlType::Uuid) => Ok(ColumnDefault::RandomUuid),
                _ => Err(unsupported()),
            };
        }
        ast::Expr::Identifier(i)
            if (i.value.eq_ignore_ascii_case("current_timestamp")
                && matches!(
                    ty,
                    SqlType::Timestamptz | SqlType::Timestamp | SqlType::Date
                ))
                || (i.value.eq_ignore_ascii_case("current_date") && ty == SqlType::Date) =>
        {
            return Ok(ColumnDefault::Now);
        }
        _ => return Err(unsupported()),
    };
    // Checked now, so a bad constant fails CREATE TABLE, not every INSERT.
    ty.parse_text(&text)?;
    Ok(ColumnDefault::Constant(text))
}

/// `CREATE TABLE name (...)` → definition and IF NOT EXISTS.
pub fn create_table(ct: &ast::CreateTable) -> Result<(TableDef, bool)> {
    let name = object_name(&ct.name)?;
    let mut columns = Vec::new();
    let mut key = Vec::new();
    for c in &ct.columns {
        let (col, primary) = column(c)?;
        if primary {
            key.push(col.name.clone());
        }
        columns.push(col);
    }
    for tc in &ct.constraints {
        match tc {
            TableConstraint::PrimaryKey(pk) => {
                if !key.is_empty() {
                    return Err(PlanError::Unsupported {
                        feature: "two primary keys".into(),
                        hint: "declare PRIMARY KEY once".into(),
                    });
                }
                for ic in &pk.columns {
                    match &ic.column.expr {
                        ast::Expr::Identifier(i) => key.push(fold(i)),
                        other => {
                            return Err(PlanError::Unsupported {
                                feature: format!("primary key expression {other}"),
                                hint: "name the key columns".into(),
                            });
                        }
                    }
                }
            }
            other => {
                return Err(PlanError::Unsupported {
                    feature: format!("constraint {other}"),
                    hint: "only PRIMARY KEY (partition_key [, row_key]) is kept by the store"
                        .into(),
                });
            }
        }
    }
    Ok((TableDef::new(&name, columns, &key)?, ct.if_not_exists))
}

/// `CREATE TABLE name [(a, b)] AS query`.
pub fn create_table_as(ct: &ast::CreateTable) -> Result<crate::Plan> {
    let Some(query) = &ct.query else {
        return Err(PlanError::Unsupported {
            feature: "CREATE TABLE AS without a query".into(),
            hint: String::new(),
        });
    };
    let typed = ct
        .columns
        .iter()
        .any(|c| !matches!(c.data_type, ast::DataType::Unspecified) || !c.options.is_empty());
    if typed || !ct.constraints.is_empty() {
        return Err(PlanError::Syntax {
            message: "CREATE TABLE AS takes column names only: the query gives the types".into(),
            position: None,
        });
    }
    Ok(crate::Plan::CreateTableAs {
        name: object_name(&ct.name)?,
        columns: ct.columns.iter().map(|c| fold(&c.name)).collect(),
        query: query.to_string(),
        if_not_exists: ct.if_not_exists,
    })
}

/// `DROP TABLE [IF EXISTS] a, b`.
pub fn drop_tables(names: &[ast::ObjectName]) -> Result<Vec<String>> {
    names.iter().map(object_name).collect()
}

/// `ALTER TABLE t ADD COLUMN c type` → (table, column, IF NOT EXISTS).
pub fn alter_table(at: &ast::AlterTable) -> Result<(String, Column, bool)> {
    let table = object_name(&at.name)?;
    match at.operations.as_slice() {
        [
            ast::AlterTableOperation::AddColumn {
                if_not_exists,
                column_def,
                ..
            },
        ] => {
            let (col, primary) = column(column_def)?;
            if primary || col.not_null {
                return Err(PlanError::Unsupported {
                    feature: "ADD COLUMN ... PRIMARY KEY / NOT NULL".into(),
                    hint: "keys are fixed at CREATE TABLE; an added column is nullable because existing rows lack it".into(),
                });
            }
            Ok((table, col, *if_not_exists))
        }
        _ => Err(PlanError::Unsupported {
            feature: format!(
                "ALTER TABLE {}",
                at.operations
                    .iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            hint: "ALTER TABLE supports ADD COLUMN".into(),
        }),
    }
}

/// `CREATE INDEX … GLOBAL` as text sqlparser reads: each statement that
/// starts `CREATE [UNIQUE] INDEX` and ends with the word GLOBAL gets
/// `WITH (global = true)` in its place. `None` when no statement does.
pub fn global_index_syntax(sql: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let mut out = String::with_capacity(sql.len() + 32);
    let mut changed = false;
    for stmt in tokens.split_inclusive(|t| *t == Token::SemiColon) {
        let sig: Vec<usize> = (0..stmt.len())
            .filter(|&i| !matches!(stmt[i], Token::Whitespace(_) | Token::SemiColon))
            .collect();
        let at = |k: usize| sig.get(k).map(|&i| &stmt[i]);
        let is_index = at(0).is_some_and(|t| word(t, "create"))
            && (at(1).is_some_and(|t| word(t, "index"))
                || (at(1).is_some_and(|t| word(t, "unique"))
                    && at(2).is_some_and(|t| word(t, "index"))));
        let last = sig.last().copied();
        for (i, t) in stmt.iter().enumerate() {
            if is_index && Some(i) == last && word(t, "global") {
                out.push_str("WITH (global = true)");
                changed = true;
            } else {
                out.push_str(&t.to_string());
            }
        }
    }
    changed.then_some(out)
}

/// Whether CREATE INDEX's `WITH (…)` asks for a global index (`global =
/// true`, or `CREATE INDEX … GLOBAL`); any other option is refused.
fn global_option(with: &[ast::Expr]) -> Result<bool> {
    let mut global = false;
    for e in with {
        let on = match e {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } if matches!(&**left, ast::Expr::Identifier(i) if i.value.eq_ignore_ascii_case("global")) => {
                match &**right {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Boolean(b) => Some(*b),
                        ast::Value::SingleQuotedString(s) => {
                            match s.to_ascii_lowercase().as_str() {
                                "true" | "on" => Some(true),
                                "false" | "off" => Some(false),
                                _ => None,
                            }
                        }
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        };
        match on {
            Some(b) => global = b,
            None => {
                return Err(PlanError::Unsupported {
                    feature: format!("CREATE INDEX with the option {e}"),
                    hint:
                        "the one option is WITH (global = true), also written CREATE INDEX … GLOBAL"
                            .into(),
                });
            }
        }
    }
    Ok(global)
}

/// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] [name] ON t (c, …) [GLOBAL]`: a
/// local index (see [`crate::index`]), or a global one
/// ([`crate::global`]), with INCLUDE (…) columns a local index's entries
/// carry. Expressions, partial indexes and `USING` are refused by name.
pub fn create_index(ci: &ast::CreateIndex) -> Result<crate::Plan> {
    let refuse = |what: &str, hint: &str| PlanError::Unsupported {
        feature: format!("CREATE INDEX with {what}"),
        hint: hint.into(),
    };
    if ci.predicate.is_some() {
        return Err(refuse("WHERE (a partial index)", "index the whole table"));
    }
    if ci.using.is_some() {
        return Err(refuse(
            "USING",
            "a local index is an ordered run of index entities in each partition, a GLOBAL one a table of its own; leave USING out",
        ));
    }
    let global = global_option(&ci.with)?;
    let table = object_name(&ci.table_name)?;
    let mut columns = Vec::new();
    for c in &ci.columns {
        match &c.column.expr {
            ast::Expr::Identifier(i) => columns.push(fold(i)),
            e => {
                return Err(refuse(
                    &format!("the expression {e}"),
                    "index plain columns",
                ));
            }
        }
        if c.column.options.asc == Some(false) {
            return Err(refuse(
                "DESC",
                "entries are kept in ascending order; an equality lookup does not depend on it",
            ));
        }
    }
    let name = match &ci.name {
        Some(n) => object_name(n)?,
        // PostgreSQL's default name.
        None => format!("{table}_{}_idx", columns.join("_")),
    };
    Ok(crate::Plan::CreateIndex {
        table,
        name,
        spec: tablegate_catalog::IndexSpec {
            columns,
            include: ci.include.iter().map(fold).collect(),
            unique: ci.unique,
            global,
        },
        if_not_exists: ci.if_not_exists,
    })
}
