//! The sampler a loader draws its epochs with ([`voxlake_plan::sampler`]): the spec checked
//! before the table opens, and the columns it weighs or splits rows by (label, weight column,
//! id) read once at `build()`, only those columns' chunks fetched.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use voxlake_plan::sample::{Sampling, SamplingError, SubsetBy};
use voxlake_plan::sampler::{RowsOf, Sampler};
use voxlake_stream::{StreamError, TableStream};
use voxlake_table::Scan;

use crate::LoaderError;

/// A spec that cannot be used, as the error the builder's caller gets.
pub(crate) fn config_error(e: SamplingError) -> LoaderError {
    LoaderError::Config(format!("sampling option {e}"))
}

/// The sampler for `spec` over the rows `stream` reads (of every source of a mixture, their
/// files one after the other), seeded by `seed`.
pub(crate) async fn sampler(
    stream: &TableStream,
    spec: &Sampling,
    seed: u64,
) -> Result<Sampler, LoaderError> {
    let rows_per_file = stream.rows_per_file();
    let mut all = Values::default();
    // Each source's columns read at once (a mixture's sources are tables of their own).
    let read = futures::future::try_join_all(
        stream
            .sources()
            .scans()
            .iter()
            .map(|scan| values_of(scan, spec)),
    )
    .await?;
    for values in read {
        if let Some(from) = values.labels {
            all.labels.get_or_insert_with(Vec::new).extend(from);
        }
        if let Some(from) = values.weights {
            all.weights.get_or_insert_with(Vec::new).extend(from);
        }
        if let Some(from) = values.in_split {
            all.in_split.get_or_insert_with(Vec::new).extend(from);
        }
    }
    // Subsets by row group need every file's row groups (their footers, which the first
    // epoch reads anyway).
    let row_groups: Option<Vec<Vec<u64>>> = match spec.subset_by() {
        SubsetBy::Row => None,
        _ => {
            let mut footers = stream.footers(0..rows_per_file.len()).await?;
            Some(
                (0..rows_per_file.len())
                    .map(|f| footers.remove(&f).unwrap_or_default())
                    .collect(),
            )
        }
    };
    let files = stream.sources().files_per_source();
    let rows = RowsOf {
        labels: all.labels.as_deref(),
        weights: all.weights.as_deref(),
        in_split: all.in_split.as_deref(),
        row_groups: row_groups.as_deref(),
        sources: Some(&files),
    };
    Sampler::new(spec, seed, rows_per_file, rows).map_err(config_error)
}

/// What the sampler needs of each row of one table, in table order.
#[derive(Default)]
struct Values {
    labels: Option<Vec<Option<i64>>>,
    weights: Option<Vec<f64>>,
    in_split: Option<Vec<bool>>,
}

/// The columns `spec` weighs or splits `scan`'s rows by, read.
async fn values_of(scan: &Scan, spec: &Sampling) -> Result<Values, LoaderError> {
    let snapshot = scan.snapshot();
    let resolved = snapshot.columns();
    let mut columns: Vec<&str> = Vec::new();
    if spec.needs_ids() {
        // Ids made from file and row would move as files are rewritten: a split needs stored ones.
        columns.push(resolved.id.as_deref().ok_or_else(|| {
            config_error(SamplingError::new(
                "split",
                format!("{} has no id column: a split needs a stable id per row (name it with the id column option)", snapshot.location()),
            ))
        })?);
    }
    if spec.needs_labels() {
        columns.push(resolved.label.as_deref().ok_or_else(|| {
            let option = match spec.weights() {
                voxlake_plan::sample::Weights::BalanceLabels => "balance",
                _ => "class_weights",
            };
            config_error(SamplingError::new(
                option,
                format!(
                    "{} has no label column (name it with the label column option)",
                    snapshot.location()
                ),
            ))
        })?);
    }
    if let Some(c) = spec.weight_column() {
        columns.push(c);
    }
    if let Some(c) = spec.weight_column() {
        let partition = snapshot.files().partition_columns().any(|p| p == c);
        if !partition && snapshot.schema().field_with_name(c).is_err() {
            let names: Vec<&String> = snapshot
                .schema()
                .fields()
                .iter()
                .map(|f| f.name())
                .collect();
            return Err(config_error(SamplingError::new(
                "weight_column",
                format!(
                    "no column '{c}' in {} (it has {names:?})",
                    snapshot.location()
                ),
            )));
        }
    }
    let read = match columns.is_empty() {
        true => Vec::new(),
        false => scan
            .column_values(&columns)
            .await
            .map_err(StreamError::from)?,
    };
    let mut read = read.into_iter();
    let location = snapshot.location();
    let in_split: Option<Vec<bool>> = match spec.split() {
        Some(split) => {
            let ids = read.next().unwrap_or_default();
            let mut mask = Vec::new();
            for array in ids {
                let text = cast(&array, &DataType::Utf8, columns[0], location)?;
                let text = text.as_string::<i32>();
                mask.extend(
                    (0..text.len()).map(|i| text.is_valid(i) && split.contains(text.value(i))),
                );
            }
            Some(mask)
        }
        None => None,
    };
    let label_column = columns
        .get(usize::from(spec.needs_ids()))
        .copied()
        .unwrap_or_default();
    let labels: Option<Vec<Option<i64>>> = match spec.needs_labels() {
        true => {
            let mut labels = Vec::new();
            for array in read.next().unwrap_or_default() {
                let ints = cast(&array, &DataType::Int64, label_column, location)?;
                labels.extend(ints.as_primitive::<Int64Type>().iter());
            }
            Some(labels)
        }
        false => None,
    };
    let weights: Option<Vec<f64>> = match spec.weight_column() {
        Some(column) => {
            let mut weights = Vec::new();
            for array in read.next().unwrap_or_default() {
                if !array.data_type().is_numeric() {
                    return Err(config_error(SamplingError::new(
                        "weight_column",
                        format!("column '{column}' holds {}, not numbers", array.data_type()),
                    )));
                }
                let values = cast(&array, &DataType::Float64, column, location)?;
                let values = values.as_primitive::<Float64Type>();
                if values.null_count() > 0 {
                    let row =
                        weights.len() + (0..values.len()).find(|&i| values.is_null(i)).unwrap_or(0);
                    return Err(config_error(SamplingError::new(
                        "weight_column",
                        format!("row {row} of column '{column}' is null"),
                    )));
                }
                weights.extend(values.values().iter().copied());
            }
            Some(weights)
        }
        None => None,
    };
    Ok(Values {
        labels,
        weights,
        in_split,
    })
}

fn cast(
    array: &ArrayRef,
    to: &DataType,
    column: &str,
    location: &str,
) -> Result<ArrayRef, LoaderError> {
    arrow_cast::cast(array.as_ref(), to).map_err(|e| {
        LoaderError::Config(format!(
            "column '{column}' of {location} ({}) cannot be read as {to}: {e}",
            array.data_type()
        ))
    })
}
