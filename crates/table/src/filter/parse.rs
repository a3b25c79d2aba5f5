//! A filter's SQL expression (parsed by `sqlparser`) turned into a [`Filter`]: `NOT` and
//! `BETWEEN` pushed down while converting, literals into [`Value`]s, anything else refused by
//! name.

use sqlparser::ast::{BinaryOperator, Expr, UnaryOperator, Value as SqlValue};

use super::{Filter, Op, Value};

fn column_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(i) => Some(i.value.clone()),
        Expr::CompoundIdentifier(parts) => Some(
            parts
                .iter()
                .map(|p| p.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
        ),
        Expr::Nested(e) => column_of(e),
        _ => None,
    }
}

fn literal_of(expr: &Expr) -> Result<Value, String> {
    match expr {
        Expr::Value(v) => match &v.value {
            SqlValue::Number(n, _) => n
                .parse::<i64>()
                .map(Value::Int)
                .or_else(|_| n.parse::<f64>().map(Value::Float))
                .map_err(|_| format!("'{n}' is not a number")),
            SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => {
                Ok(Value::Str(s.clone()))
            }
            SqlValue::Boolean(b) => Ok(Value::Bool(*b)),
            other => Err(format!("literal {other} is not supported")),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal_of(expr)? {
            Value::Int(v) => Ok(Value::Int(-v)),
            Value::Float(v) => Ok(Value::Float(-v)),
            other => Err(format!("-{other:?} is not a number")),
        },
        Expr::Nested(e) => literal_of(e),
        // DATE '2024-01-05', TIMESTAMP '…': compared as ISO text, like the columns.
        Expr::TypedString(t) => match &t.value.value {
            SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => {
                Ok(Value::Str(s.clone()))
            }
            other => Err(format!("literal {other} is not supported")),
        },
        other => Err(format!("expected a literal, found '{other}'")),
    }
}

/// The filter of `expr`, negated when `negate` (negations pushed down to the comparisons).
pub(super) fn convert(expr: &Expr, negate: bool) -> Result<Filter, String> {
    let both = |a: &Expr, b: &Expr, and: bool| -> Result<Filter, String> {
        let (a, b) = (Box::new(convert(a, negate)?), Box::new(convert(b, negate)?));
        // De Morgan: NOT (a AND b) = NOT a OR NOT b.
        Ok(if and != negate {
            Filter::And(a, b)
        } else {
            Filter::Or(a, b)
        })
    };
    match expr {
        Expr::Nested(e) => convert(e, negate),
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => convert(expr, !negate),
        Expr::BinaryOp { left, op, right } => {
            let op = match op {
                BinaryOperator::And => return both(left, right, true),
                BinaryOperator::Or => return both(left, right, false),
                BinaryOperator::Eq => Op::Eq,
                BinaryOperator::NotEq => Op::NotEq,
                BinaryOperator::Lt => Op::Lt,
                BinaryOperator::LtEq => Op::LtEq,
                BinaryOperator::Gt => Op::Gt,
                BinaryOperator::GtEq => Op::GtEq,
                other => return Err(format!("operator {other} is not supported")),
            };
            let (column, op, value) = match (column_of(left), column_of(right)) {
                (Some(c), None) => (c, op, literal_of(right)?),
                (None, Some(c)) => (c, op.flip(), literal_of(left)?),
                _ => {
                    return Err(format!("'{expr}' must compare a column with a literal"));
                }
            };
            let op = if negate { op.negate() } else { op };
            Ok(Filter::Cmp { column, op, value })
        }
        Expr::InList {
            expr: e,
            list,
            negated,
        } => Ok(Filter::In {
            column: column_of(e).ok_or_else(|| format!("'{e}' is not a column"))?,
            values: list.iter().map(literal_of).collect::<Result<_, _>>()?,
            negated: *negated != negate,
        }),
        Expr::Between {
            expr: e,
            negated,
            low,
            high,
        } => {
            let column = column_of(e).ok_or_else(|| format!("'{e}' is not a column"))?;
            let (low, high) = (literal_of(low)?, literal_of(high)?);
            let cmp = |op: Op, value: Value| {
                Box::new(Filter::Cmp {
                    column: column.clone(),
                    op,
                    value,
                })
            };
            // x BETWEEN a AND b = x >= a AND x <= b; its negation x < a OR x > b.
            Ok(if *negated != negate {
                Filter::Or(cmp(Op::Lt, low), cmp(Op::Gt, high))
            } else {
                Filter::And(cmp(Op::GtEq, low), cmp(Op::LtEq, high))
            })
        }
        Expr::IsNull(e) | Expr::IsNotNull(e) => Ok(Filter::IsNull {
            column: column_of(e).ok_or_else(|| format!("'{e}' is not a column"))?,
            negated: matches!(expr, Expr::IsNotNull(_)) != negate,
        }),
        other => Err(format!(
            "'{other}' is not supported (comparisons, IN, BETWEEN, IS NULL, AND, OR, NOT)"
        )),
    }
}
