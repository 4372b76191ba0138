//! Integers typed and checked as PostgreSQL does. Integer `+`, `-` and `*`
//! fail on overflow with 22003 where DataFusion would wrap around: its
//! physical binary expressions use the wrapping kernels unless told
//! otherwise (`fail_on_overflow`), and its simplifier folds constants with
//! them.
//!
//! - [`CheckedArithmetic`], a physical optimizer rule run last, sets the
//!   flag on every `+`, `-` and `*` in projections, filters and aggregate
//!   arguments (Arrow's checked kernels: an error for integers and
//!   decimals, the same answer for floats and times).
//! - [`CheckedConstants`], an analyzer rule run before the simplifier,
//!   folds integer constant arithmetic itself with checked operations.
//! - [`BigintSums`], an analyzer rule run before type coercion, makes
//!   `sum` of `bigint` `numeric`, as PostgreSQL's is: DataFusion sums
//!   `bigint` into `bigint` with wrapping adds.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr as LogicalBinary, Expr, ExprSchemable, LogicalPlan, Operator,
    WindowFunctionDefinition,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;

fn arithmetic(op: &Operator) -> bool {
    matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
}

/// The physical rule.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl PhysicalOptimizerRule for CheckedArithmetic {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(checked_node).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tablegate_checked_arithmetic"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `e` with every arithmetic binary expression in it checked.
fn checked(e: &Arc<dyn PhysicalExpr>) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    Arc::clone(e).transform_up(|e| {
        let Some(b) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        if !arithmetic(b.op()) {
            return Ok(Transformed::no(e));
        }
        let checked = BinaryExpr::new(Arc::clone(b.left()), *b.op(), Arc::clone(b.right()))
            .with_fail_on_overflow(true);
        Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>))
    })
}

fn checked_node(plan: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let mut changed = false;
        let exprs = p
            .expr()
            .iter()
            .map(|pe| {
                let e = checked(&pe.expr)?;
                changed |= e.transformed;
                Ok(ProjectionExpr {
                    expr: e.data,
                    alias: pe.alias.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if changed {
            let p = ProjectionExec::try_new(exprs, Arc::clone(p.input()))?;
            return Ok(Transformed::yes(Arc::new(p)));
        }
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let predicate = checked(f.predicate())?;
        if predicate.transformed {
            let f = FilterExecBuilder::from(f)
                .with_predicate(predicate.data)
                .build()?;
            return Ok(Transformed::yes(Arc::new(f)));
        }
    } else if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        let mut changed = false;
        let mut aggregates = Vec::with_capacity(a.aggr_expr().len());
        for agg in a.aggr_expr() {
            let args = agg
                .expressions()
                .iter()
                .map(|e| {
                    let e = checked(e)?;
                    changed |= e.transformed;
                    Ok(e.data)
                })
                .collect::<Result<Vec<_>>>()?;
            let order_by = agg
                .order_bys()
                .iter()
                .map(|s| Arc::clone(&s.expr))
                .collect();
            match agg.with_new_expressions(args, order_by) {
                Some(new) => aggregates.push(Arc::new(new)),
                None => aggregates.push(Arc::clone(agg)),
            }
        }
        if changed {
            return Ok(Transformed::yes(Arc::new(
                a.with_new_aggr_exprs(aggregates),
            )));
        }
    }
    Ok(Transformed::no(plan))
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct CheckedConstants;

impl AnalyzerRule for CheckedConstants {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(fold)?.update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tablegate_checked_constants"
    }
}

/// Integer constant arithmetic, folded with checked operations; an integer
/// literal cast to another integer type that holds it (the dialect's
/// `CAST(1 AS integer)`) is folded first, so its arithmetic is too.
fn fold(e: Expr) -> Result<Transformed<Expr>> {
    if let Expr::Cast(Cast { expr, field }) = &e
        && let Expr::Literal(v, None) = &**expr
        && v.data_type().is_integer()
        && field.data_type().is_integer()
        && let Ok(narrow) = v.cast_to(field.data_type())
        && !narrow.is_null()
    {
        return Ok(Transformed::yes(Expr::Literal(narrow, None)));
    }
    let Expr::BinaryExpr(LogicalBinary { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let (Expr::Literal(l, None), Expr::Literal(r, None)) = (&**left, &**right) else {
        return Ok(Transformed::no(e));
    };
    let integers = l.data_type() == r.data_type() && l.data_type().is_integer();
    if !arithmetic(op) || !integers || l.is_null() || r.is_null() {
        return Ok(Transformed::no(e));
    }
    let v: ScalarValue = match op {
        Operator::Plus => l.add_checked(r)?,
        Operator::Minus => l.sub_checked(r)?,
        _ => l.mul_checked(r)?,
    };
    Ok(Transformed::yes(Expr::Literal(v, None)))
}

/// The analyzer rule: `sum(x)` for a `bigint` `x` sums `CAST(x AS
/// numeric(38,0))`, so a total past 2^63 is exact. Run before type
/// coercion, which recomputes the types above it; `sum` of `integer`
/// stays `bigint`, as in PostgreSQL.
#[derive(Debug, Default)]
pub struct BigintSums;

impl AnalyzerRule for BigintSums {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            if !matches!(plan, LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)) {
                return Ok(Transformed::no(plan));
            }
            let schema = merge_schema(&plan.inputs());
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(|e| numeric_sum(e, &schema))?
                    .update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tablegate_bigint_sums"
    }
}

fn numeric_sum(mut e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let args = match &mut e {
        Expr::AggregateFunction(f) if f.func.name() == "sum" => &mut f.params.args,
        Expr::WindowFunction(w) => match &w.fun {
            WindowFunctionDefinition::AggregateUDF(f) if f.name() == "sum" => &mut w.params.args,
            _ => return Ok(Transformed::no(e)),
        },
        _ => return Ok(Transformed::no(e)),
    };
    let [arg] = args.as_mut_slice() else {
        return Ok(Transformed::no(e));
    };
    if !matches!(arg.get_type(schema), Ok(DataType::Int64 | DataType::UInt64)) {
        return Ok(Transformed::no(e));
    }
    let x = std::mem::replace(arg, Expr::Literal(ScalarValue::Null, None));
    *arg = x.cast_to(&DataType::Decimal128(38, 0), schema)?;
    Ok(Transformed::yes(e))
}
