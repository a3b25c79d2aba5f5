//! `compact`'s commands: numpy blobs → one Delta table of streaming-friendly Parquet files.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use voxlake_format::{Codec, DType, Layout};

use super::args as cli;
use super::print;
use voxlake_compact::{Compactor, OnError, synth};

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
        /// Volumes larger than a sample (3-D, or 4-D with channels first; shapes may differ):
        /// each cut into bricks of Z,Y,X voxels, a row a brick (docs/format.md, "Bricked
        /// volumes").
        #[arg(long, value_delimiter = ',', value_name = "Z,Y,X", conflicts_with_all = ["shape", "field"])]
        brick: Option<Vec<u64>>,
        /// With --brick: a label map whose classes each volume's info counts (repeatable;
        /// default: the fields after the first whose values are one byte).
        #[arg(long = "class-field", value_name = "FIELD", requires = "brick")]
        class_field: Vec<String>,
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
        /// One row instead, by its id: where it lies, its label, its fields' shapes, types and
        /// values summed up.
        #[arg(long, value_name = "ID")]
        row: Option<String>,
        /// With --row: a picture of the row written to FILE (PNG): its first field's middle
        /// slices of each channel on one colour scale, a mask field of its grid overlaid, the
        /// id, label and version.
        #[arg(long, value_name = "FILE", requires = "row")]
        png: Option<PathBuf>,
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

/// `compact inspect`: the table, or one row (and its picture, written to `png`).
async fn inspect(
    out: &mut impl Write,
    compactor: &Compactor,
    row: Option<String>,
    png: Option<PathBuf>,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    match (row, png) {
        (Some(id), Some(file)) => {
            let (info, picture) = compactor.inspect_row_with_picture(&id).await?;
            std::fs::write(&file, picture.png()?)
                .map_err(|e| format!("writing the picture to {}: {e}", file.display()))?;
            print::row(out, &info, json)?;
        }
        (Some(id), None) => print::row(out, &compactor.inspect_row(&id).await?, json)?,
        _ => print::inspect(out, &compactor.inspect().await?, json)?,
    }
    Ok(())
}

/// `compactor` converting volumes into bricks of `brick` (`--brick Z,Y,X`), counting the
/// classes of `class_fields` where given.
fn bricked(
    compactor: Compactor,
    brick: &[u64],
    class_fields: Vec<String>,
) -> Result<Compactor, String> {
    let [z, y, x] = brick[..] else {
        return Err(format!("--brick {brick:?}: three sizes, Z,Y,X"));
    };
    let compactor = compactor.with_bricks([z, y, x]);
    Ok(match class_fields.is_empty() {
        true => compactor,
        false => compactor.with_class_fields(class_fields),
    })
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::stdout().lock();
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
            brick,
            class_field,
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
            if let Some(brick) = brick {
                compactor = bricked(compactor, &brick, class_field)?;
            }
            let bar = cli::progress_bar();
            let summary = cli::with_progress_bar(compactor, &bar).convert(&src).await;
            bar.finish_and_clear();
            print::convert(&mut out, &summary?, common.json)?;
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
                writeln!(out, "{}", serde_json::to_string(&summary)?)?;
            } else {
                writeln!(
                    out,
                    "rewrote {} files ({} rows, {:.1} MB) into {} files in {} commits, table version {}",
                    summary.files_removed,
                    summary.rows,
                    summary.bytes_removed as f64 / 1e6,
                    summary.files_added,
                    summary.commits,
                    summary.version
                )?;
            }
        }
        Command::Inspect {
            table,
            row,
            png,
            sample,
            version,
            common,
        } => {
            let compactor = Compactor::new(table)
                .with_storage_options(common.storage.options()?)
                .with_sample_columns(sample.hints())
                .with_as_of(version.as_of()?);
            inspect(&mut out, &compactor, row, png, common.json).await?;
        }
        Command::Generate {
            dir,
            count,
            seed,
            with_mask,
        } => {
            let data = synth::generate_with(&dir, count, seed, with_mask)?;
            writeln!(
                out,
                "wrote {} cubes ({} labelled 1) to {} and labels to {}",
                data.count,
                data.positives,
                data.cubes.display(),
                data.labels.display()
            )?;
        }
        Command::Demo {
            dir,
            count,
            seed,
            json,
        } => {
            let start = std::time::Instant::now();
            let data = synth::generate(&dir, count, seed)?;
            cli::say(format_args!(
                "generated {} synthetic cubes ({} positive) in {:.1} s under {}",
                data.count,
                data.positives,
                start.elapsed().as_secs_f64(),
                dir.display()
            ));
            let table = dir.join("table");
            let compactor =
                Compactor::new(table.to_string_lossy()).with_labels(data.labels.to_string_lossy());
            let bar = cli::progress_bar();
            let summary = cli::with_progress_bar(compactor.clone(), &bar)
                .convert(&data.cubes.to_string_lossy())
                .await;
            bar.finish_and_clear();
            print::convert(&mut out, &summary?, json)?;
            print::inspect(&mut out, &compactor.inspect().await?, json)?;
        }
    }
    Ok(())
}

/// Runs `compact` with these arguments (the first is the program's name, as in
/// [`std::env::args_os`]) and returns the process's exit status: 0, 1 on an error (printed to
/// stderr as `error: …`), 2 on bad arguments (clap's message). `--help` and `--version` print
/// and return 0.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    cli::init_tracing();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are "errors" that print to stdout and exit 0.
            let _printed = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            cli::say(format_args!("error: starting the async runtime: {e}"));
            return 1;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => 0,
        Err(e) => {
            cli::say(format_args!("error: {e}"));
            1
        }
    }
}
