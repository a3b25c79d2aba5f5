//! `compact`: numpy blobs → one Delta table of streaming-friendly Parquet files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use voxlake_compact::cli;
use voxlake_compact::{Compactor, ConvertSummary, OnError, TableInfo, synth};
use voxlake_format::{Codec, DType, Layout};

#[derive(Parser)]
#[command(
    name = "compact",
    version,
    about = "Convert .npy blobs into one Delta table laid out for streaming"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert the .npy objects under SRC that are not in TABLE yet (with --fields, a folder of
    /// .npy objects per field; or .npz archives, an array per field); or, when SRC is a table
    /// (a Delta table or a folder of Parquet files another tool wrote), its rows that are not.
    Convert {
        /// Source prefix: a local folder or a URL (az://, abfss://, gs://, s3://, file://).
        src: String,
        /// Table: a local path or a URL.
        table: String,
        /// CSV with columns `file,label` (file = key relative to SRC).
        #[arg(long)]
        labels: Option<String>,
        /// Element type of the table (f16, bf16, f32, f64, i8..i64, u8..u64, bool); converts.
        #[arg(long)]
        dtype: Option<DType>,
        /// Shape of a new table's tensors, e.g. 30,30,10,10 (default: what the first source
        /// objects agree on).
        #[arg(long, value_delimiter = ',')]
        shape: Option<Vec<usize>>,
        /// The fields of each sample, in order: `SRC/FIELD/NAME.npy` of every field is the
        /// sample NAME; for .npz sources, the arrays to take (default: the first archive's);
        /// for a table source, its columns.
        #[arg(long, value_delimiter = ',')]
        fields: Option<Vec<String>>,
        /// A table source's field whose column needs a shape or type (repeatable, in order, the
        /// first a tensor): `NAME`, `NAME=8,8,4` or `NAME=8,8,4:u8`.
        #[arg(long = "field", value_parser = cli::parse_field, conflicts_with = "fields")]
        field: Vec<voxlake_format::sample::FieldHint>,
        /// Convert only this share of the keys, as I/N (0-based).
        #[arg(long, value_parser = parse_shard)]
        shard: Option<(u32, u32)>,
        /// A table source's tensor column (default `tensor`, else the only one that can).
        #[arg(long)]
        tensor_column: Option<String>,
        /// A table source's label column (default `label` if there is one).
        #[arg(long)]
        label_column: Option<String>,
        /// A table source's id column (default `id` if there is one, else file#row).
        #[arg(long)]
        id_column: Option<String>,
        /// `fail` stops at the first bad object; `skip` lists it and goes on.
        #[arg(long, default_value = "fail", value_parser = parse_on_error)]
        on_error: OnError,
        /// Source objects read at once (default: sized to the store as it runs).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Commit after about this many full files.
        #[arg(long, default_value_t = 8)]
        files_per_commit: usize,
        #[command(flatten)]
        layout: LayoutArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Bin-pack small files of TABLE into files of the target size (Delta OPTIMIZE).
    Optimize {
        /// Table: a local path or a URL.
        table: String,
        /// Commit after this many rewritten bins.
        #[arg(long, default_value_t = 8)]
        files_per_commit: usize,
        #[command(flatten)]
        layout: LayoutArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Show version, files, rows, bytes, row groups, tensor shape/dtype, how the tensor column
    /// is read, and label counts: of any Delta table or folder of Parquet files voxlake reads.
    Inspect {
        /// Table: a local path or a URL.
        table: String,
        #[command(flatten)]
        sample: cli::SampleArgs,
        #[command(flatten)]
        version: cli::VersionArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Write a deterministic synthetic dataset of reference cubes (30×30×10×10 f32) + labels.
    Generate {
        /// Output folder (cubes/ and labels.csv are written inside).
        dir: PathBuf,
        /// Number of cubes.
        #[arg(long, default_value_t = 4000)]
        count: usize,
        /// Seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Each cube's voxel mask too: fields/x/ and fields/mask/ instead of cubes/ (convert
        /// with --fields x,mask).
        #[arg(long)]
        with_mask: bool,
    },
    /// The embedded default job: generate synthetic cubes locally and convert them.
    Demo {
        /// Working folder.
        #[arg(long, default_value = "demo-data")]
        dir: PathBuf,
        /// Number of cubes.
        #[arg(long, default_value_t = 4000)]
        count: usize,
        /// Seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Print the summaries as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct LayoutArgs {
    /// Rows per row group.
    #[arg(long, default_value_t = Layout::default().row_group_rows)]
    row_group_rows: usize,
    /// Target file size in MB (10^6 bytes).
    #[arg(long, default_value_t = Layout::default().target_file_bytes as f64 / 1e6)]
    target_file_mb: f64,
    /// Page compression: none, snappy, lz4, zstd.
    #[arg(long, default_value = "none")]
    compression: Codec,
}

impl LayoutArgs {
    fn layout(&self) -> Layout {
        Layout {
            row_group_rows: self.row_group_rows,
            target_file_bytes: (self.target_file_mb * 1e6).max(1.0) as u64,
            compression: self.compression,
        }
    }
}

#[derive(Args)]
struct CommonArgs {
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    storage: cli::StorageArgs,
}

fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let (i, n): (u32, u32) = (
        i.parse().map_err(|_| format!("bad shard index '{i}'"))?,
        n.parse().map_err(|_| format!("bad shard count '{n}'"))?,
    );
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: the index must be below the count"));
    }
    Ok((i, n))
}

fn parse_on_error(s: &str) -> Result<OnError, String> {
    match s {
        "fail" => Ok(OnError::Fail),
        "skip" => Ok(OnError::Skip),
        _ => Err(format!("'{s}': expected fail or skip")),
    }
}

fn print_convert(summary: &ConvertSummary, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(summary).expect("summary serializes")
        );
        return;
    }
    println!(
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
    );
    let t = &summary.timings;
    println!(
        "time: {:.2} s listing and opening; reads {:.2} s and decodes {:.2} s (summed over those in flight), the writer waited {:.2} s for them; row groups {:.2} s, Parquet and uploads {:.2} s, commits {:.2} s",
        t.list_s, t.read_s, t.decode_s, t.wait_s, t.encode_s, t.write_s, t.commit_s
    );
    if summary.already_present > 0 {
        println!(
            "{} files were already in the table",
            summary.already_present
        );
    }
    if summary.labels_unmatched > 0 {
        println!(
            "{} labels name objects the source does not hold",
            summary.labels_unmatched
        );
    }
    for s in &summary.skipped {
        println!("skipped {}: {}", s.key, s.reason);
    }
}

fn print_inspect(info: &TableInfo, json: bool) {
    if json {
        println!("{}", serde_json::to_string(info).expect("info serializes"));
        return;
    }
    println!("table     {}", info.location);
    println!("version   {}", info.version);
    let native = if info.native {
        ", voxlake's layout"
    } else {
        ""
    };
    if let [only] = info.fields.as_slice()
        && only.name == voxlake_format::TENSOR_COLUMN
    {
        println!("tensor    {:?} {}", info.shape, info.dtype);
        println!(
            "column    '{}': {}{native}",
            info.tensor_column, info.encoding
        );
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
            println!(
                "field     {}: {kind}, column '{}': {}{native}",
                field.name, field.column, field.encoding
            );
        }
    }
    println!(
        "label/id  {} / {}",
        info.label_column.as_deref().unwrap_or("none"),
        info.id_column.as_deref().unwrap_or("none (file#row)")
    );
    println!(
        "files     {} ({:.1} MB, {} row groups of {}..{} rows)",
        info.files,
        info.bytes as f64 / 1e6,
        info.row_groups,
        info.row_group_rows.0,
        info.row_group_rows.1
    );
    match &info.protocol {
        Some(p) => println!(
            "protocol  reader {} [{}], writer {} [{}]{}",
            p.min_reader_version,
            p.reader_features.join(", "),
            p.min_writer_version,
            p.writer_features.join(", "),
            match info.column_mapping.as_str() {
                "none" => String::new(),
                mode => format!("; column mapping by {mode}"),
            }
        ),
        None => println!("protocol  none (Parquet files without a Delta log)"),
    }
    if info.deletion_vectors > 0 {
        println!(
            "rows      {} live ({} deleted by {} deletion vectors)",
            info.rows, info.rows_deleted, info.deletion_vectors
        );
    } else {
        println!("rows      {}", info.rows);
    }
    let labels: Vec<String> = info
        .labels
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!("labels    {}", labels.join(", "));
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Convert {
            src,
            table,
            labels,
            dtype,
            shape,
            fields,
            field,
            shard,
            tensor_column,
            label_column,
            id_column,
            on_error,
            concurrency,
            files_per_commit,
            layout,
            common,
        } => {
            let hints = voxlake_format::sample::ColumnHints {
                tensor: tensor_column,
                label: label_column,
                id: id_column,
                fields: field,
                ..Default::default()
            };
            let mut compactor = Compactor::new(table)
                .with_sample_columns(hints)
                .with_storage_options(common.storage.options()?)
                .with_layout(layout.layout())
                .with_on_error(on_error)
                .with_files_per_commit(files_per_commit);
            if let Some(labels) = labels {
                compactor = compactor.with_labels(labels);
            }
            if let Some(dtype) = dtype {
                compactor = compactor.with_dtype(dtype);
            }
            if let Some(n) = concurrency {
                compactor = compactor.with_concurrency(n);
            }
            if let Some(shape) = shape {
                compactor = compactor.with_shape(shape);
            }
            if let Some(fields) = fields {
                compactor = compactor.with_fields(fields);
            }
            if let Some((i, n)) = shard {
                compactor = compactor.with_shard(i, n);
            }
            let bar = cli::progress_bar();
            let summary = cli::with_progress_bar(compactor, &bar).convert(&src).await;
            bar.finish_and_clear();
            print_convert(&summary?, common.json);
        }
        Command::Optimize {
            table,
            files_per_commit,
            layout,
            common,
        } => {
            let summary = Compactor::new(table)
                .with_storage_options(common.storage.options()?)
                .with_layout(layout.layout())
                .with_files_per_commit(files_per_commit)
                .optimize()
                .await?;
            if common.json {
                println!("{}", serde_json::to_string(&summary)?);
            } else {
                println!(
                    "rewrote {} files ({} rows, {:.1} MB) into {} files in {} commits, table version {}",
                    summary.files_removed,
                    summary.rows,
                    summary.bytes_removed as f64 / 1e6,
                    summary.files_added,
                    summary.commits,
                    summary.version
                );
            }
        }
        Command::Inspect {
            table,
            sample,
            version,
            common,
        } => {
            let info = Compactor::new(table)
                .with_storage_options(common.storage.options()?)
                .with_sample_columns(sample.hints())
                .with_as_of(version.as_of()?)
                .inspect()
                .await?;
            print_inspect(&info, common.json);
        }
        Command::Generate {
            dir,
            count,
            seed,
            with_mask,
        } => {
            let data = synth::generate_with(&dir, count, seed, with_mask)?;
            println!(
                "wrote {} cubes ({} labelled 1) to {} and labels to {}",
                data.count,
                data.positives,
                data.cubes.display(),
                data.labels.display()
            );
        }
        Command::Demo {
            dir,
            count,
            seed,
            json,
        } => {
            let start = std::time::Instant::now();
            let data = synth::generate(&dir, count, seed)?;
            eprintln!(
                "generated {} synthetic cubes ({} positive) in {:.1} s under {}",
                data.count,
                data.positives,
                start.elapsed().as_secs_f64(),
                dir.display()
            );
            let table = dir.join("table");
            let compactor =
                Compactor::new(table.to_string_lossy()).with_labels(data.labels.to_string_lossy());
            let bar = cli::progress_bar();
            let summary = cli::with_progress_bar(compactor.clone(), &bar)
                .convert(&data.cubes.to_string_lossy())
                .await;
            bar.finish_and_clear();
            print_convert(&summary?, json);
            print_inspect(&compactor.inspect().await?, json);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::init_tracing();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
