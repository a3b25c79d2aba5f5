//! Filters: one SQL boolean expression over a table's columns, e.g.
//! `label = 1 AND region IN ('a', 'b') AND depth >= 100`, parsed with `sqlparser`.
//!
//! Pure and I/O-free: [`Filter::may_match`] says whether any row whose columns lie within given
//! ranges (partition values, Delta file statistics, Parquet row-group statistics) can match, so
//! files and row groups that cannot are skipped unread; [`Filter::matches`] decides one row,
//! with SQL's three-valued logic (a comparison with a null is unknown; a row is kept only when
//! the filter is true).
//!
//! ```
//! use voxlake_table::filter::{Filter, Stats, Value};
//!
//! let f = Filter::parse("label = 1 AND region IN ('a', 'b') AND depth >= 100")?;
//! let row = |c: &str| match c {
//!     "label" => Some(Value::Int(1)),
//!     "region" => Some(Value::Str("b".into())),
//!     _ => Some(Value::Int(250)),
//! };
//! assert!(f.matches(&row));
//! // A file whose depths are all below 100 cannot match.
//! let shallow = |c: &str| (c == "depth").then(|| Stats::range(Value::Int(0), Value::Int(99)));
//! assert!(!f.may_match(&shallow));
//! # Ok::<(), String>(())
//! ```

mod parse;
pub(crate) mod stats;

use std::cmp::Ordering;
use std::collections::BTreeSet;

use parse::convert;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

/// A literal of a filter, or a column's value or statistic.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// Any integer.
    Int(i64),
    /// Any float.
    Float(f64),
    /// A string.
    Str(String),
    /// A bool.
    Bool(bool),
}

impl Value {
    /// Orders two values of comparable kinds (numbers with numbers); `None` across kinds.
    fn compare(&self, other: &Value) -> Option<Ordering> {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
            (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (a, b) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            _ => None,
        }
    }

    /// The kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) | Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Bool(_) => "bool",
        }
    }

    /// A value of `like`'s kind from its text (a hive folder's `key=value`, a Delta partition
    /// value); `None` when the text is not one.
    pub fn parse_like(text: &str, like: &Value) -> Option<Value> {
        match like {
            Value::Int(_) | Value::Float(_) => text
                .parse::<i64>()
                .map(Value::Int)
                .ok()
                .or_else(|| text.parse::<f64>().ok().map(Value::Float)),
            Value::Str(_) => Some(Value::Str(text.to_string())),
            Value::Bool(_) => text.parse::<bool>().ok().map(Value::Bool),
        }
    }
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `=`
    Eq,
    /// `<>` or `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl Op {
    fn negate(self) -> Op {
        match self {
            Op::Eq => Op::NotEq,
            Op::NotEq => Op::Eq,
            Op::Lt => Op::GtEq,
            Op::LtEq => Op::Gt,
            Op::Gt => Op::LtEq,
            Op::GtEq => Op::Lt,
        }
    }

    /// `a op b` as `b op' a`.
    fn flip(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::LtEq => Op::GtEq,
            Op::Gt => Op::Lt,
            Op::GtEq => Op::LtEq,
            other => other,
        }
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            Op::Eq => o == Ordering::Equal,
            Op::NotEq => o != Ordering::Equal,
            Op::Lt => o == Ordering::Less,
            Op::LtEq => o != Ordering::Greater,
            Op::Gt => o == Ordering::Greater,
            Op::GtEq => o != Ordering::Less,
        }
    }
}

/// What statistics say about a column over some rows (a file, a row group, a partition).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    /// The smallest non-null value, if known.
    pub min: Option<Value>,
    /// The largest non-null value, if known.
    pub max: Option<Value>,
    /// Nulls among the rows, if known.
    pub nulls: Option<u64>,
    /// The rows, if known.
    pub rows: Option<u64>,
}

impl Stats {
    /// Values between `min` and `max`, nulls unknown.
    pub fn range(min: Value, max: Value) -> Stats {
        Stats {
            min: Some(min),
            max: Some(max),
            ..Stats::default()
        }
    }

    /// Every row holds `value` (a partition column): exact.
    pub fn exactly(value: Option<Value>, rows: Option<u64>) -> Stats {
        let nulls = if value.is_some() {
            0
        } else {
            rows.unwrap_or(1)
        };
        Stats {
            min: value.clone(),
            max: value,
            nulls: Some(nulls),
            rows,
        }
    }
}

/// A parsed filter, negations pushed down to the comparisons.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Filter {
    /// Both.
    And(Box<Filter>, Box<Filter>),
    /// Either.
    Or(Box<Filter>, Box<Filter>),
    /// `column op value`.
    Cmp {
        /// The column.
        column: String,
        /// The comparison.
        op: Op,
        /// The literal.
        value: Value,
    },
    /// `column [NOT] IN (values)`.
    In {
        /// The column.
        column: String,
        /// The literals.
        values: Vec<Value>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `column IS [NOT] NULL`.
    IsNull {
        /// The column.
        column: String,
        /// `IS NOT NULL`.
        negated: bool,
    },
}

impl Filter {
    /// Parses one boolean SQL expression: comparisons of a column with a literal (`=`, `<>`,
    /// `!=`, `<`, `<=`, `>`, `>=`, either way round), `[NOT] IN (…)`, `[NOT] BETWEEN … AND …`,
    /// `IS [NOT] NULL`, `AND`, `OR`, `NOT` and parentheses.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let expr = Parser::new(&GenericDialect {})
            .try_with_sql(text)
            .and_then(|mut p| {
                let e = p.parse_expr()?;
                p.expect_token(&sqlparser::tokenizer::Token::EOF)?;
                Ok(e)
            })
            .map_err(|e| format!("filter '{text}' does not parse: {e}"))?;
        convert(&expr, false).map_err(|e| format!("filter '{text}': {e}"))
    }

    /// The columns it reads.
    pub fn columns(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.visit(&mut |c| {
            out.insert(c);
        });
        out
    }

    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Filter::And(a, b) | Filter::Or(a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Filter::Cmp { column, .. }
            | Filter::In { column, .. }
            | Filter::IsNull { column, .. } => f(column),
        }
    }

    /// The filter with each literal of `column` replaced by `f` of it.
    pub(crate) fn map_literals(
        &self,
        name: &str,
        f: &impl Fn(&Value) -> Result<Value, String>,
    ) -> Result<Filter, String> {
        Ok(match self {
            Filter::And(a, b) => Filter::And(
                Box::new(a.map_literals(name, f)?),
                Box::new(b.map_literals(name, f)?),
            ),
            Filter::Or(a, b) => Filter::Or(
                Box::new(a.map_literals(name, f)?),
                Box::new(b.map_literals(name, f)?),
            ),
            Filter::Cmp { column, op, value } if column == name => Filter::Cmp {
                column: column.clone(),
                op: *op,
                value: f(value)?,
            },
            Filter::In {
                column,
                values,
                negated,
            } if column == name => Filter::In {
                column: column.clone(),
                values: values.iter().map(f).collect::<Result<_, _>>()?,
                negated: *negated,
            },
            other => other.clone(),
        })
    }

    /// The literals compared with `column`, for checking their kind against its type.
    pub fn literals_of<'a>(&'a self, column: &str) -> Vec<&'a Value> {
        let mut out = Vec::new();
        self.literals(column, &mut out);
        out
    }

    fn literals<'a>(&'a self, name: &str, out: &mut Vec<&'a Value>) {
        match self {
            Filter::And(a, b) | Filter::Or(a, b) => {
                a.literals(name, out);
                b.literals(name, out);
            }
            Filter::Cmp { column, value, .. } if column == name => out.push(value),
            Filter::In { column, values, .. } if column == name => out.extend(values),
            _ => {}
        }
    }

    /// Whether some row whose columns are described by `stats` (`None`: nothing known) may
    /// match; `false` only when none can.
    pub fn may_match(&self, stats: &dyn Fn(&str) -> Option<Stats>) -> bool {
        match self {
            Filter::And(a, b) => a.may_match(stats) && b.may_match(stats),
            Filter::Or(a, b) => a.may_match(stats) || b.may_match(stats),
            Filter::Cmp { column, op, value } => {
                let Some(s) = stats(column) else { return true };
                if s.rows.is_some() && s.nulls == s.rows {
                    return false; // only nulls: every comparison is unknown
                }
                may_compare(&s, *op, value)
            }
            Filter::In {
                column,
                values,
                negated,
            } => {
                let Some(s) = stats(column) else { return true };
                if s.rows.is_some() && s.nulls == s.rows {
                    return false;
                }
                if *negated {
                    values.iter().all(|v| may_compare(&s, Op::NotEq, v))
                } else {
                    values.iter().any(|v| may_compare(&s, Op::Eq, v))
                }
            }
            Filter::IsNull { column, negated } => {
                let Some(s) = stats(column) else { return true };
                match (negated, s.nulls, s.rows) {
                    (false, Some(0), _) => false,
                    (true, Some(n), Some(r)) => n < r,
                    _ => true,
                }
            }
        }
    }

    /// Whether a row matches: `value(column)` is the row's value (`None`: null).
    pub fn matches(&self, value: &dyn Fn(&str) -> Option<Value>) -> bool {
        self.eval(value) == Some(true)
    }

    /// Three-valued: `None` is unknown.
    fn eval(&self, value: &dyn Fn(&str) -> Option<Value>) -> Option<bool> {
        match self {
            Filter::And(a, b) => match (a.eval(value), b.eval(value)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Filter::Or(a, b) => match (a.eval(value), b.eval(value)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            Filter::Cmp {
                column,
                op,
                value: v,
            } => {
                let x = value(column)?;
                Some(op.holds(x.compare(v)?))
            }
            Filter::In {
                column,
                values,
                negated,
            } => {
                let x = value(column)?;
                let found = values.iter().any(|v| x.compare(v) == Some(Ordering::Equal));
                Some(found != *negated)
            }
            Filter::IsNull { column, negated } => Some(value(column).is_none() != *negated),
        }
    }
}

/// Whether some value in `s`'s range may stand in `op` to `v`.
fn may_compare(s: &Stats, op: Op, v: &Value) -> bool {
    let lo = s.min.as_ref().and_then(|m| m.compare(v));
    let hi = s.max.as_ref().and_then(|m| m.compare(v));
    match op {
        // Some value in [min, max] equals v: min <= v <= max.
        Op::Eq => lo != Some(Ordering::Greater) && hi != Some(Ordering::Less),
        // Only min == max == v rules it out.
        Op::NotEq => !(lo == Some(Ordering::Equal) && hi == Some(Ordering::Equal)),
        Op::Lt => lo.is_none_or(|o| o == Ordering::Less),
        Op::LtEq => lo.is_none_or(|o| o != Ordering::Greater),
        Op::Gt => hi.is_none_or(|o| o == Ordering::Greater),
        Op::GtEq => hi.is_none_or(|o| o != Ordering::Less),
    }
}

/// What a filter left out, counted when the snapshot was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Files skipped by partition values or Delta statistics, unread.
    pub files_skipped: u64,
    /// Row groups skipped by their footer statistics, unread.
    pub row_groups_skipped: u64,
    /// Rows whose filter columns were read and decided one by one.
    pub rows_decided: u64,
    /// Rows the filter keeps.
    pub rows_selected: u64,
    /// Rows of the table before the filter, where known.
    pub rows_before: u64,
}

impl std::ops::AddAssign<&FilterStats> for FilterStats {
    /// Another snapshot's counts added (a mixture's sources, each with its own filter).
    fn add_assign(&mut self, other: &FilterStats) {
        self.files_skipped += other.files_skipped;
        self.row_groups_skipped += other.row_groups_skipped;
        self.rows_decided += other.rows_decided;
        self.rows_selected += other.rows_selected;
        self.rows_before += other.rows_before;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row<'a>(pairs: &'a [(&'a str, Option<Value>)]) -> impl Fn(&str) -> Option<Value> + 'a {
        move |c| {
            pairs
                .iter()
                .find(|(n, _)| *n == c)
                .and_then(|(_, v)| v.clone())
        }
    }

    #[test]
    fn parses_and_decides_rows() {
        let f =
            Filter::parse("NOT (depth < 100 OR region NOT IN ('a', 'b')) AND label = 1").unwrap();
        assert_eq!(
            f.columns().into_iter().collect::<Vec<_>>(),
            ["depth", "label", "region"]
        );
        let r = [
            ("depth", Some(Value::Int(100))),
            ("region", Some(Value::Str("a".into()))),
            ("label", Some(Value::Int(1))),
        ];
        assert!(f.matches(&row(&r)));
        let nulls = [
            ("depth", None),
            ("region", Some(Value::Str("a".into()))),
            ("label", Some(Value::Int(1))),
        ];
        assert!(
            !f.matches(&row(&nulls)),
            "a null compares unknown: not kept"
        );
        let f = Filter::parse("5 <= depth AND depth BETWEEN 1 AND 9.5 AND x IS NOT NULL").unwrap();
        assert!(f.matches(&row(&[
            ("depth", Some(Value::Float(9.5))),
            ("x", Some(Value::Bool(true)))
        ])));
        assert!(!f.matches(&row(&[
            ("depth", Some(Value::Int(4))),
            ("x", Some(Value::Bool(true)))
        ])));
        assert!(!f.matches(&row(&[("depth", Some(Value::Int(6))), ("x", None)])));
        assert!(
            Filter::parse("NOT depth BETWEEN 1 AND 9")
                .unwrap()
                .matches(&row(&[("depth", Some(Value::Int(-3)))]))
        );
        assert!(
            Filter::parse("depth = -3")
                .unwrap()
                .matches(&row(&[("depth", Some(Value::Int(-3)))]))
        );
        // Another kind never matches.
        assert!(
            !Filter::parse("region = 1")
                .unwrap()
                .matches(&row(&[("region", Some(Value::Str("1".into())))]))
        );
    }

    #[test]
    fn bad_filters_are_named() {
        for (text, says) in [
            ("label = ", "does not parse"),
            ("label = 1 label", "does not parse"),
            ("label + 1 = 2", "column with a literal"),
            ("label = other", "column with a literal"),
            ("label LIKE 'a%'", "not supported"),
            ("f(label)", "not supported"),
        ] {
            let e = Filter::parse(text).unwrap_err();
            assert!(e.contains(says) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn statistics_rule_out_only_what_cannot_match() {
        let f = Filter::parse("depth >= 100 AND region IN ('a', 'b')").unwrap();
        let stats = |lo: i64, hi: i64, region: &'static str| {
            move |c: &str| match c {
                "depth" => Some(Stats::range(Value::Int(lo), Value::Int(hi))),
                "region" => Some(Stats::exactly(Some(Value::Str(region.into())), Some(10))),
                _ => None,
            }
        };
        assert!(f.may_match(&stats(0, 100, "a")));
        assert!(!f.may_match(&stats(0, 99, "a")));
        assert!(!f.may_match(&stats(100, 200, "c")));
        assert!(f.may_match(&|_: &str| None), "nothing known: maybe");
        let nulls = Filter::parse("x IS NULL").unwrap();
        assert!(!nulls.may_match(&|_: &str| Some(Stats {
            nulls: Some(0),
            ..Stats::default()
        })));
        let all_null = |_: &str| Some(Stats::exactly(None, Some(4)));
        assert!(!Filter::parse("x <> 3").unwrap().may_match(&all_null));
        assert!(Filter::parse("x IS NULL").unwrap().may_match(&all_null));
        assert!(!Filter::parse("x IS NOT NULL").unwrap().may_match(&all_null));
    }

    /// One row's `a` and `b`.
    type Row = (Option<i64>, Option<i64>);

    // Few distinct values, so statistics often sit exactly on a literal (the edge cases).
    fn value() -> impl Strategy<Value = Option<i64>> {
        prop_oneof![1 => Just(None), 6 => (-3i64..3).prop_map(Some)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the rows, a row-group whose statistics say "cannot match" holds no row that
        /// matches (the skipping never loses a row).
        #[test]
        fn skipping_never_drops_a_matching_row(
            rows in proptest::collection::vec((value(), value()), 1..6),
            ops in proptest::collection::vec((0usize..6, -3i64..3), 1..3),
            shape in 0usize..5,
        ) {
            let ops_text = ["=", "<>", "<", "<=", ">", ">="];
            let parts: Vec<String> = ops.iter().enumerate().map(|(i, (o, v))| {
                format!("{} {} {v}", if i % 2 == 0 { "a" } else { "b" }, ops_text[*o])
            }).collect();
            let text = match shape {
                0 => parts.join(" AND "),
                1 => parts.join(" OR "),
                2 => format!("NOT ({})", parts.join(" AND ")),
                3 => format!("a IN (1, 2, {}) OR b IS NULL", ops[0].1),
                _ => format!("b IS NOT NULL AND NOT a NOT IN (0, {})", ops[0].1),
            };
            let f = Filter::parse(&text).unwrap();
            let column = |pick: fn(&Row) -> Option<i64>| {
                let values: Vec<i64> = rows.iter().filter_map(pick).collect();
                Stats {
                    min: values.iter().min().map(|&v| Value::Int(v)),
                    max: values.iter().max().map(|&v| Value::Int(v)),
                    nulls: Some((rows.len() - values.len()) as u64),
                    rows: Some(rows.len() as u64),
                }
            };
            let (a, b) = (column(|r| r.0), column(|r| r.1));
            let stats = |c: &str| Some(if c == "a" { a.clone() } else { b.clone() });
            let any = rows.iter().any(|r| f.matches(&|c: &str| {
                (if c == "a" { r.0 } else { r.1 }).map(Value::Int)
            }));
            prop_assert!(!any || f.may_match(&stats), "{text}: a matching row in a skipped group");
        }
    }
}
