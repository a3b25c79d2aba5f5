//! Pieces the command-line tools (`compact`, `voxlake`) share.

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Parses a `--storage-option KEY=VALUE`.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| "expected KEY=VALUE".to_string())
}

/// How samples are read from a table other tools wrote.
#[derive(clap::Args)]
pub struct SampleArgs {
    /// The column holding the tensors (default: `tensor`, else the only one that can).
    #[arg(long)]
    pub tensor_column: Option<String>,
    /// Shape of one sample (`30,30,10,10`): needed for LIST and raw BINARY columns.
    #[arg(long, value_delimiter = ',', requires = "dtype")]
    pub shape: Option<Vec<usize>>,
    /// Element type of one sample; give --shape with it.
    #[arg(long, requires = "shape")]
    pub dtype: Option<voxlake_format::DType>,
    /// The label column (default `label` if there is one).
    #[arg(long)]
    pub label_column: Option<String>,
    /// The id column (default `id` if there is one).
    #[arg(long)]
    pub id_column: Option<String>,
}

impl SampleArgs {
    /// The settings as the libraries take them.
    pub fn hints(self) -> voxlake_format::sample::ColumnHints {
        voxlake_format::sample::ColumnHints {
            tensor: self.tensor_column,
            shape: self.shape,
            dtype: self.dtype,
            label: self.label_column,
            id: self.id_column,
        }
    }
}
