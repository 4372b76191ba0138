//! Integer `+`, `-` and `*` that fail on overflow, as PostgreSQL's do
//! (22003, "integer out of range"). DataFusion 55 plans them with Arrow's
//! wrapping kernels, so `SELECT b + b` over a bigint near its maximum
//! answered -2 where PostgreSQL refuses. An analyzer rule, run after type
//! coercion (both sides then have one type), replaces each integer
//! operation with a function over Arrow's checked kernels; column names
//! stay as written.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Datum};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::sqlstate::PgError;

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let mut schema = merge_schema(&plan.inputs());
            if let LogicalPlan::TableScan(ts) = &plan {
                schema.merge(&DFSchema::try_from_qualified_schema(
                    ts.table_name.clone(),
                    &ts.source.schema(),
                )?);
            }
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(|e| checked(e, &schema))?
                    .update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tablegate_checked_arithmetic"
    }
}

/// `a op b` over one integer type as the checked function; anything else
/// as it is.
fn checked(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let op = match op {
        Operator::Plus => Op::Add,
        Operator::Minus => Op::Sub,
        Operator::Multiply => Op::Mul,
        _ => return Ok(Transformed::no(e)),
    };
    let (Ok(lt), Ok(rt)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    if lt != rt || !matches!(lt, DataType::Int16 | DataType::Int32 | DataType::Int64) {
        return Ok(Transformed::no(e));
    }
    let udf = Arc::new(ScalarUDF::from(Checked::new(op)));
    let args = vec![(**left).clone(), (**right).clone()];
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(udf, args),
    )))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
}

/// `int_add`, `int_sub`, `int_mul`: two integers of one type, checked.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: Op,
    signature: Signature,
}

impl Checked {
    fn new(op: Op) -> Self {
        let same = |t: DataType| TypeSignature::Exact(vec![t.clone(), t]);
        Checked {
            op,
            signature: Signature::one_of(
                vec![
                    same(DataType::Int16),
                    same(DataType::Int32),
                    same(DataType::Int64),
                ],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "int_add",
            Op::Sub => "int_sub",
            Op::Mul => "int_mul",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Int64))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes two arguments",
                self.name()
            )));
        };
        let datum = |c: &ColumnarValue| -> Result<Box<dyn Datum>> {
            Ok(match c {
                ColumnarValue::Array(a) => Box::new(a.clone()),
                ColumnarValue::Scalar(s) => Box::new(s.to_scalar()?),
            })
        };
        let (x, y) = (datum(a)?, datum(b)?);
        let out: ArrayRef = match self.op {
            Op::Add => numeric::add(&*x, &*y),
            Op::Sub => numeric::sub(&*x, &*y),
            Op::Mul => numeric::mul(&*x, &*y),
        }
        .map_err(|e| match e {
            datafusion::arrow::error::ArrowError::ArithmeticOverflow(_) => {
                let ty = match a.data_type() {
                    DataType::Int16 => "smallint",
                    DataType::Int32 => "integer",
                    _ => "bigint",
                };
                DataFusionError::External(Box::new(PgError::new(
                    "22003",
                    format!("{ty} out of range"),
                )))
            }
            other => DataFusionError::ArrowError(Box::new(other), None),
        })?;
        Ok(
            if matches!((a, b), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))) {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            },
        )
    }
}
