//! Text literals cast to timestamps, read as PostgreSQL reads them. Arrow's
//! parser refuses forms PostgreSQL accepts, such as a time without seconds
//! (`ts >= '2026-03-01 12:00+00'`), which the native path takes. An
//! analyzer rule, run after type coercion has put the casts in, replaces a
//! cast Arrow cannot make with the instant the store's own parser reads
//! ([`tablegate_catalog::types::parse_timestamp`]); a cast Arrow can make
//! is left as it is.

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct TimestampLiterals;

impl AnalyzerRule for TimestampLiterals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(timestamp_literal)?
                    .update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tablegate_timestamp_literals"
    }
}

fn timestamp_literal(e: Expr) -> Result<Transformed<Expr>> {
    let (inner, to) = match &e {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            (expr, field.data_type())
        }
        _ => return Ok(Transformed::no(e)),
    };
    let DataType::Timestamp(unit, tz) = to else {
        return Ok(Transformed::no(e));
    };
    let Expr::Literal(
        ScalarValue::Utf8(Some(text))
        | ScalarValue::Utf8View(Some(text))
        | ScalarValue::LargeUtf8(Some(text)),
        _,
    ) = &**inner
    else {
        return Ok(Transformed::no(e));
    };
    let arrow_reads: ArrayRef = Arc::new(StringArray::from(vec![text.as_str()]));
    if datafusion::arrow::compute::cast(&arrow_reads, to).is_ok_and(|a| a.null_count() == 0) {
        return Ok(Transformed::no(e));
    }
    let Some(t) = tablegate_catalog::types::parse_timestamp(text.trim(), tz.is_some()) else {
        return Ok(Transformed::no(e));
    };
    let micros = t.micros();
    let value = match unit {
        TimeUnit::Second => ScalarValue::TimestampSecond(Some(micros / 1_000_000), tz.clone()),
        TimeUnit::Millisecond => {
            ScalarValue::TimestampMillisecond(Some(micros / 1_000), tz.clone())
        }
        TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(micros), tz.clone()),
        TimeUnit::Nanosecond => match micros.checked_mul(1_000) {
            Some(n) => ScalarValue::TimestampNanosecond(Some(n), tz.clone()),
            None => return Ok(Transformed::no(e)),
        },
    };
    Ok(Transformed::yes(Expr::Literal(value, None)))
}
