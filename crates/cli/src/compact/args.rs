//! The arguments and settings the command lines (`compact`, `voxlake`) share.

/// What is logged without `RUST_LOG`: warnings, but none of the Delta kernel's own events. It
/// logs each error it returns as an ERROR event at every layer (with a backtrace under
/// `RUST_BACKTRACE`), and voxlake reports that error itself, once, naming the log file; set
/// `RUST_LOG=buoyant_kernel=debug` to see them.
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn,buoyant_kernel=off,buoyant_kernel_engine=off";

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings, the Delta kernel's left out); a no-op when the
/// process already has a subscriber (a second command run from one Python process).
pub fn init_tracing() {
    let _already_set = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER)),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// Writes one line for the person at the terminal to stderr (an error, what a command did
/// besides its output); a stderr that cannot be written to is not an error of the command's.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _unwritable = writeln!(std::io::stderr().lock(), "{line}");
}

/// Parses a `--storage-option KEY=VALUE`.
pub(crate) fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| "expected KEY=VALUE".to_string())
}

/// Keys whose values are secrets: given with `--storage-option`, they show in process lists.
const SECRET_KEY_PARTS: [&str; 6] = ["key", "secret", "sas", "token", "password", "credential"];

/// Storage options: on the command line, or (for secrets) from a file.
#[derive(clap::Args, Clone)]
pub(crate) struct StorageArgs {
    /// A storage option KEY=VALUE (object_store keys, e.g. azure_storage_account_name). A
    /// secret here shows in every process list: give secrets in the environment
    /// (AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, AWS_SECRET_ACCESS_KEY, …) or in a file
    /// (--storage-option-file).
    #[arg(long = "storage-option", value_parser = parse_key_value)]
    pub(crate) storage_options: Vec<(String, String)>,
    /// A file of storage options, one KEY=VALUE a line (blank lines and `#` comments skipped):
    /// the way to give secrets, which --storage-option shows in process lists.
    #[arg(long = "storage-option-file")]
    pub(crate) storage_option_file: Option<std::path::PathBuf>,
}

impl StorageArgs {
    /// The options: the file's, then the command line's over them. A secret on the command
    /// line is used, with a warning naming its key.
    pub(crate) fn options(self) -> Result<std::collections::HashMap<String, String>, String> {
        let mut options = std::collections::HashMap::new();
        if let Some(path) = &self.storage_option_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--storage-option-file {}: {e}", path.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (k, v) = parse_key_value(line).map_err(|e| {
                    format!(
                        "--storage-option-file {}, line {}: {e}",
                        path.display(),
                        i + 1
                    )
                })?;
                options.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        for (k, v) in self.storage_options {
            let lower = k.to_ascii_lowercase();
            if SECRET_KEY_PARTS.iter().any(|p| lower.contains(p)) {
                tracing::warn!(
                    key = k.as_str(),
                    "a secret given with --storage-option shows in process lists: give it in the environment or with --storage-option-file"
                );
            }
            options.insert(k, v);
        }
        Ok(options)
    }
}

/// How samples are read from a table other tools wrote.
#[derive(clap::Args, Clone)]
pub(crate) struct SampleArgs {
    /// The column holding the tensors (default: `tensor`, else the only one that can).
    #[arg(long)]
    pub(crate) tensor_column: Option<String>,
    /// Shape of one sample (`30,30,10,10`): needed for LIST and raw BINARY columns.
    #[arg(long, value_delimiter = ',')]
    pub(crate) shape: Option<Vec<usize>>,
    /// Element type of one sample: needed only where the bytes carry no type (raw BINARY);
    /// elsewhere it is checked against the column's.
    #[arg(long)]
    pub(crate) dtype: Option<voxlake_format::DType>,
    /// The label column (default `label` if there is one).
    #[arg(long)]
    pub(crate) label_column: Option<String>,
    /// The id column (default `id` if there is one).
    #[arg(long)]
    pub(crate) id_column: Option<String>,
    /// A field of the sample (repeatable; the first a tensor): `NAME`, or `NAME=8,8,4` and
    /// `NAME=8,8,4:u8` where the column's bytes need a shape or a type. When given, the sample
    /// is these fields (with the label and id).
    #[arg(long = "field", value_parser = parse_field)]
    pub(crate) fields: Vec<voxlake_format::sample::FieldHint>,
    /// What nulls of a field become (repeatable): `FIELD=error` (the default: an error naming
    /// the column, file and row), `FIELD=fill:VALUE`, or `FIELD=mask` (zeros, and a bool field
    /// `FIELD_valid`).
    #[arg(long = "null", value_parser = parse_null)]
    pub(crate) nulls: Vec<(String, voxlake_format::sample::NullPolicy)>,
}

/// Parses a `--null FIELD=error|mask|fill:VALUE`.
pub(crate) fn parse_null(s: &str) -> Result<(String, voxlake_format::sample::NullPolicy), String> {
    let (name, policy) = s
        .split_once('=')
        .ok_or_else(|| "expected FIELD=error, FIELD=mask or FIELD=fill:VALUE".to_string())?;
    Ok((name.to_string(), policy.parse()?))
}

/// Parses a `--field NAME[=SHAPE[:DTYPE]]`.
pub(crate) fn parse_field(s: &str) -> Result<voxlake_format::sample::FieldHint, String> {
    let (name, rest) = match s.split_once('=') {
        Some((name, rest)) => (name, Some(rest)),
        None => (s, None),
    };
    if name.is_empty() {
        return Err("expected NAME, NAME=SHAPE or NAME=SHAPE:DTYPE".into());
    }
    let mut hint = voxlake_format::sample::FieldHint::new(name);
    if let Some(rest) = rest {
        let (shape, dtype) = match rest.split_once(':') {
            Some((shape, dtype)) => (shape, Some(dtype)),
            None => (rest, None),
        };
        let dims = shape
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| d.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("shape '{shape}': {e}"))?;
        hint.shape = Some(dims);
        hint.dtype = dtype
            .map(str::parse::<voxlake_format::DType>)
            .transpose()
            .map_err(|e| e.to_string())?;
    }
    Ok(hint)
}

/// Which version of a table to read.
#[derive(clap::Args)]
pub(crate) struct VersionArgs {
    /// Read this table version (default: the latest).
    #[arg(long, conflicts_with = "timestamp")]
    pub(crate) version: Option<u64>,
    /// Read the table as it was at this time (RFC 3339, e.g. 2026-11-23T10:00:00Z): the
    /// latest version committed at or before it.
    #[arg(long)]
    pub(crate) timestamp: Option<String>,
}

impl VersionArgs {
    /// The version to read.
    pub(crate) fn as_of(&self) -> Result<voxlake_delta::AsOf, String> {
        match (&self.timestamp, self.version) {
            (Some(text), _) => voxlake_delta::AsOf::parse_timestamp(text),
            (None, version) => Ok(version.into()),
        }
    }
}

impl SampleArgs {
    /// The settings as the libraries take them.
    pub(crate) fn hints(self) -> voxlake_format::sample::ColumnHints {
        voxlake_format::sample::ColumnHints {
            tensor: self.tensor_column,
            shape: self.shape,
            dtype: self.dtype,
            label: self.label_column,
            id: self.id_column,
            fields: self.fields,
            nulls: self.nulls,
        }
    }
}

/// The bar `compact convert` and `optimize` draw on stderr (only when it is a terminal), and
/// the Python package's `voxlake.convert` too.
pub fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} files  {msg}  ETA {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// `compactor` reporting its progress on `bar`: files done of all, MB/s, the table's version,
/// objects skipped.
pub fn with_progress_bar(
    compactor: voxlake_compact::Compactor,
    bar: &indicatif::ProgressBar,
) -> voxlake_compact::Compactor {
    let bar = bar.clone();
    let start = std::time::Instant::now();
    compactor.with_progress(std::sync::Arc::new(move |p| {
        bar.set_length(p.files_total as u64);
        bar.set_position(p.files_done as u64);
        let mbs = p.bytes_read as f64 / 1e6 / start.elapsed().as_secs_f64().max(1e-3);
        bar.set_message(format!(
            "{mbs:.0} MB/s  v{}  skipped {}",
            p.version, p.skipped
        ));
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use voxlake_format::DType;

    #[test]
    fn fields_parse_with_a_shape_and_a_type_where_given() {
        let f = parse_field("mask").unwrap();
        assert_eq!((f.column.as_str(), f.shape, f.dtype), ("mask", None, None));
        let f = parse_field("x=8,8,4").unwrap();
        assert_eq!((f.shape, f.dtype), (Some(vec![8, 8, 4]), None));
        let f = parse_field("x=8,8,4:u8").unwrap();
        assert_eq!((f.shape, f.dtype), (Some(vec![8, 8, 4]), Some(DType::U8)));
        assert!(parse_field("=3").is_err());
        assert!(parse_field("x=a,b").unwrap_err().contains("shape 'a,b'"));
        assert!(parse_field("x=2:q9").is_err());
    }
}
