//! What `compact` prints: a summary as lines for a person or one JSON object.

use std::io::Write;

use voxlake_compact::{ConvertSummary, RowInfo, TableInfo};

/// Printing failed: stdout closed (`compact … | head`) or a value that does not serialize.
pub(super) type Error = Box<dyn std::error::Error>;

/// A conversion's summary: one JSON object, or lines for a person.
pub(super) fn convert(
    out: &mut impl Write,
    summary: &ConvertSummary,
    json: bool,
) -> Result<(), Error> {
    if json {
        writeln!(out, "{}", serde_json::to_string(summary)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "converted {} files ({} rows, tensors {}) in {:.1} s: {:.0} files/s, {:.0} MB/s read, {:.1} MB written in {} Parquet files, table version {}",
        summary.files,
        summary.rows,
        summary.tensor,
        summary.seconds,
        summary.files as f64 / summary.seconds.max(1e-9),
        summary.bytes_read as f64 / 1e6 / summary.seconds.max(1e-9),
        summary.bytes_written as f64 / 1e6,
        summary.parquet_files,
        summary.version
    )?;
    let t = &summary.timings;
    writeln!(
        out,
        "time: {:.2} s listing and opening; reads {:.2} s and decodes {:.2} s (summed over those in flight), the writer waited {:.2} s for them; row groups {:.2} s, Parquet and uploads {:.2} s, commits {:.2} s",
        t.list_s, t.read_s, t.decode_s, t.wait_s, t.encode_s, t.write_s, t.commit_s
    )?;
    if summary.already_present > 0 {
        writeln!(
            out,
            "{} files were already in the table",
            summary.already_present
        )?;
    }
    if summary.labels_unmatched > 0 {
        writeln!(
            out,
            "{} labels name objects the source does not hold",
            summary.labels_unmatched
        )?;
    }
    for s in &summary.skipped {
        writeln!(out, "skipped {}: {}", s.key, s.reason)?;
    }
    Ok(())
}

/// A table's description: one JSON object, or lines for a person.
pub(super) fn inspect(out: &mut impl Write, info: &TableInfo, json: bool) -> Result<(), Error> {
    if json {
        writeln!(out, "{}", serde_json::to_string(info)?)?;
        return Ok(());
    }
    writeln!(out, "table     {}", info.location)?;
    writeln!(out, "version   {}", info.version)?;
    let native = if info.native {
        ", voxlake's layout"
    } else {
        ""
    };
    if let [only] = info.fields.as_slice()
        && only.name == voxlake_format::TENSOR_COLUMN
    {
        writeln!(out, "tensor    {:?} {}", info.shape, info.dtype)?;
        writeln!(
            out,
            "column    '{}': {}{native}",
            info.tensor_column, info.encoding
        )?;
    } else {
        for field in &info.fields {
            let kind = match (&field.shape, &field.dtype) {
                (Some(shape), Some(dtype)) => format!("{shape:?} {dtype}"),
                _ => "text".to_string(),
            };
            let kind = match &field.unit {
                Some(unit) => format!("{kind} ({unit})"),
                None => kind,
            };
            writeln!(
                out,
                "field     {}: {kind}, column '{}': {}{native}",
                field.name, field.column, field.encoding
            )?;
        }
    }
    writeln!(
        out,
        "label/id  {} / {}",
        info.label_column.as_deref().unwrap_or("none"),
        info.id_column.as_deref().unwrap_or("none (file#row)")
    )?;
    writeln!(
        out,
        "files     {} ({:.1} MB, {} row groups of {}..{} rows)",
        info.files,
        info.bytes as f64 / 1e6,
        info.row_groups,
        info.row_group_rows.0,
        info.row_group_rows.1
    )?;
    match &info.protocol {
        Some(p) => writeln!(
            out,
            "protocol  reader {} [{}], writer {} [{}]{}",
            p.min_reader_version,
            p.reader_features.join(", "),
            p.min_writer_version,
            p.writer_features.join(", "),
            match info.column_mapping.as_str() {
                "none" => String::new(),
                mode => format!("; column mapping by {mode}"),
            }
        )?,
        None => writeln!(out, "protocol  none (Parquet files without a Delta log)")?,
    }
    if info.deletion_vectors > 0 {
        writeln!(
            out,
            "rows      {} live ({} deleted by {} deletion vectors)",
            info.rows, info.rows_deleted, info.deletion_vectors
        )?;
    } else {
        writeln!(out, "rows      {}", info.rows)?;
    }
    let labels: Vec<String> = info
        .labels
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    writeln!(out, "labels    {}", labels.join(", "))?;
    if let Some(volumes) = &info.volumes {
        print_volumes(out, volumes)?;
    }
    Ok(())
}

/// A bricked table's volumes: how many, their shapes, each class field's voxels by class.
fn print_volumes(out: &mut impl Write, v: &voxlake_compact::VolumesInfo) -> Result<(), Error> {
    let (low, high) = v.list.iter().fold(([u64::MAX; 3], [0; 3]), |(lo, hi), s| {
        (
            std::array::from_fn(|a| lo[a].min(s.shape[a])),
            std::array::from_fn(|a| hi[a].max(s.shape[a])),
        )
    });
    let shapes = match v.list.is_empty() {
        true => String::new(),
        false if low == high => format!(", each {low:?}"),
        false => format!(", from {low:?} to {high:?}"),
    };
    writeln!(
        out,
        "volumes   {} in bricks of {:?}{shapes}",
        v.list.len(),
        v.brick
    )?;
    for (field, classes) in &v.class_voxels {
        let total: u64 = classes.values().sum::<u64>().max(1);
        let said: Vec<String> = classes
            .iter()
            .map(|(c, n)| format!("{c}: {n} ({:.2} %)", *n as f64 * 100.0 / total as f64))
            .collect();
        writeln!(out, "classes   {field}: {}", said.join(", "))?;
    }
    if !v.unfinished.is_empty() {
        writeln!(
            out,
            "unfinished {} volumes without their info (left out): {}",
            v.unfinished.len(),
            v.unfinished[..v.unfinished.len().min(5)].join(", ")
        )?;
    }
    Ok(())
}

/// One row (`inspect --row`): one JSON object, or lines for a person.
pub(super) fn row(out: &mut impl Write, info: &RowInfo, json: bool) -> Result<(), Error> {
    if json {
        writeln!(out, "{}", serde_json::to_string(info)?)?;
        return Ok(());
    }
    writeln!(out, "table     {}", info.location)?;
    writeln!(out, "version   {}", info.version)?;
    writeln!(
        out,
        "row       {} (position {} of {})",
        info.id, info.position, info.rows
    )?;
    match info.label {
        Some(label) => writeln!(out, "label     {label}")?,
        None => writeln!(out, "label     none")?,
    }
    for field in &info.fields {
        match &field.text {
            Some(text) => writeln!(out, "{:<9} {text:?}", field.name)?,
            None if field.dtype == "text" => writeln!(out, "{:<9} null", field.name)?,
            None => {
                let show =
                    |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.6}"));
                writeln!(
                    out,
                    "{:<9} {:?} {}: min {}, max {}, mean {}{}",
                    field.name,
                    field.shape,
                    field.dtype,
                    show(field.min),
                    show(field.max),
                    show(field.mean),
                    match field.nans {
                        0 => String::new(),
                        n => format!(", {n} NaN"),
                    }
                )?;
            }
        }
    }
    writeln!(
        out,
        "index     {} ids, {:.1} MB, built in {:.2} s",
        info.rows,
        info.index_bytes as f64 / 1e6,
        info.index_seconds
    )?;
    Ok(())
}
