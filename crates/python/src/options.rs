//! The keyword arguments of `voxlake.Loader` (and of `voxlake.torch.Dataset`, which passes
//! them on): the one list of them ([`OPTIONS`]), each applied to the Rust
//! [`LoaderBuilder`] by its setter, so that defaults and checks are the builder's. An option
//! left out keeps the builder's default; an unknown or ill-typed one is a `ConfigError` naming
//! it. `voxlake._voxlake.loader_options()` lists them (the stub and `help()` are checked
//! against it by the Python tests).

use std::collections::HashMap;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voxlake_loader::{DEFAULT_SHUFFLE_BUFFER, LoaderBuilder};

use crate::errors::{config, option};
use crate::extract::{dtype, timestamp, value};
use crate::sampling;

/// Options gathered before they reach the builder: the shuffle's three and the rank's two
/// make one setter call each.
#[derive(Default)]
pub(crate) struct Gathered {
    /// The sampling spec the options make.
    pub(crate) spec: voxlake::plan::sample::Sampling,
    shuffle: bool,
    seed: Option<u64>,
    shuffle_buffer: Option<usize>,
    pub(crate) rank: Option<usize>,
    pub(crate) world_size: Option<usize>,
    cache_dir: Option<String>,
    cache_max_bytes: Option<u64>,
    pub(crate) start_epoch: Option<u64>,
    /// Whether `job` was given.
    pub(crate) job: bool,
    tensor_shape: Option<Vec<usize>>,
    tensor_dtype: Option<voxlake_format::DType>,
    /// What the build shares with a `batch_transform` callable.
    pub(crate) batch_transform: crate::batch_transform::Shared,
    /// The sampling keywords, made one spec once all are read.
    pub(crate) sampling: sampling::SamplingOptions,
}

/// One keyword argument: its name, its Python type (for the stub), what it does, and how it
/// is applied.
pub(crate) struct LoaderOption {
    pub name: &'static str,
    pub kind: &'static str,
    pub doc: &'static str,
    apply: fn(LoaderBuilder, &mut Gathered, &Bound<'_, PyAny>) -> PyResult<LoaderBuilder>,
}

/// A size in bytes: an int, or text with a unit (`B`, `KB`/`MB`/`GB`/`TB` in powers of 1000,
/// `KiB`/`MiB`/`GiB`/`TiB` in powers of 1024).
fn size(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(bytes) = v.extract::<u64>() {
        return Ok(bytes);
    }
    let text: String = value(name, v, "an int or a size such as \"512MB\"")?;
    parse_size(&text).ok_or_else(|| {
        option(format!(
            "option {name}: {text:?} is not a size (an int, or a number and B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"
        ))
    })
}

/// `512MB`, `2 GiB`, `100B`: the bytes, `None` for anything else (or an overflow).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    let bytes = number * scale as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// `fields`: names in order, or a dict of names to `(shape, dtype)` (or None).
fn apply_fields(b: LoaderBuilder, v: &Bound<'_, PyAny>) -> PyResult<LoaderBuilder> {
    let Ok(specs) = v.cast::<PyDict>() else {
        let names: Vec<String> = value("fields", v, "a list of str or a dict")?;
        return Ok(names.into_iter().fold(b, |b, n| b.with_field(n)));
    };
    specs.iter().try_fold(b, |b, (name, spec)| {
        let name: String = value("fields", &name, "a dict with str keys")?;
        if spec.is_none() {
            return Ok(b.with_field(name));
        }
        let (shape, kind): (Vec<usize>, String) =
            value("fields", &spec, "(shape, dtype) or None for each field")?;
        Ok(b.with_field_spec(name, shape, dtype("fields", &kind)?))
    })
}

/// Every keyword argument of `voxlake.Loader`, in the order `help()` shows them.
pub(crate) const OPTIONS: &[LoaderOption] = &[
    LoaderOption {
        name: "batch_size",
        kind: "int",
        doc: "Samples per batch (default 32).",
        apply: |b, _, v| Ok(b.with_batch_size(value("batch_size", v, "an int")?)),
    },
    LoaderOption {
        name: "epochs",
        kind: "int | None",
        doc: "Epochs to run (default 1); None repeats until the loader is dropped.",
        apply: |b, _, v| match v.is_none() {
            true => Ok(b.with_infinite_epochs()),
            false => Ok(b.with_epochs(value("epochs", v, "an int or None")?)),
        },
    },
    LoaderOption {
        name: "start_epoch",
        kind: "int",
        doc: "The first epoch's number (default 0); set_epoch() sets it.",
        apply: |b, g, v| {
            g.start_epoch = Some(value("start_epoch", v, "an int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "shuffle",
        kind: "bool",
        doc: "Shuffle files, row groups and rows per epoch (default False: table order).",
        apply: |b, g, v| {
            g.shuffle = value("shuffle", v, "a bool")?;
            Ok(b)
        },
    },
    LoaderOption {
        name: "seed",
        kind: "int",
        doc: "The shuffle's seed (default 0); the same seed gives the same order on every rank.",
        apply: |b, g, v| {
            g.seed = Some(value("seed", v, "an int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "shuffle_buffer",
        kind: "int",
        doc: "Rows in the shuffle buffer (default 1024).",
        apply: |b, g, v| {
            g.shuffle_buffer = Some(value("shuffle_buffer", v, "an int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "drop_last",
        kind: "bool",
        doc: "Drop each epoch's short last batch (default False).",
        apply: |b, _, v| Ok(b.with_drop_last(value("drop_last", v, "a bool")?)),
    },
    LoaderOption {
        name: "fields",
        kind: "list[str] | dict[str, tuple[list[int], str] | None]",
        doc: "The sample's fields, in order (default: the table's tensor column); a dict gives a field's shape and element type where its bytes need them (raw BINARY, LIST): {\"mask\": ((64, 64, 64), \"u8\")}.",
        apply: |b, _, v| apply_fields(b, v),
    },
    LoaderOption {
        name: "transforms",
        kind: "list[tuple[str, dict[str, Any]]]",
        doc: "Transforms by name, run in order on every sample on the loader's threads, seeded by (seed, epoch, row id) so a resume repeats them: (\"flip\", {\"axes\": [0, 1], \"p\": 0.5}), (\"crop\", {\"shape\": [...]}) (a random window, zero-padded where the sample is smaller), (\"normalize\", {\"mean\": m, \"std\": s}), (\"cast\", {\"dtype\": \"f16\" | \"bf16\" | \"f32\"}). Flips and crops move every field of the first field's shape with it.",
        apply: |b, _, v| crate::transforms::apply(b, v),
    },
    LoaderOption {
        name: "batch_transform",
        kind: "Callable[[Batch, np.random.Generator], Optional[Batch]]",
        doc: "f(batch, rng), run on every batch on the loader's thread ahead of the training loop: the batch's dict (writable arrays looking at its buffers) and a numpy Generator seeded by (seed, epoch, batch index), so a resume repeats it. It changes the arrays in place and returns None, or returns a dict whose arrays replace the fields (and label) it names, any shape with the batch's first axis. Its time is stats()'s batch_transform_s; what it raises ends the run, as the cause of the error next() raises.",
        apply: |b, g, v| crate::batch_transform::apply(b, &g.batch_transform, v),
    },
    LoaderOption {
        name: "filter",
        kind: "str",
        doc: "Rows to read, as a SQL predicate on the table's columns (e.g. \"label = 1\").",
        apply: |b, _, v| Ok(b.with_filter(value::<String>("filter", v, "a str")?)),
    },
    LoaderOption {
        name: "version",
        kind: "int",
        doc: "The table's version to read (default: the latest, resolved once for a job).",
        apply: |b, _, v| Ok(b.with_version(value("version", v, "an int")?)),
    },
    LoaderOption {
        name: "timestamp",
        kind: "datetime | str",
        doc: "Read the version current at this time: a timezone-aware datetime, or RFC 3339 text (e.g. \"2026-11-23T10:00:00Z\").",
        apply: |b, _, v| Ok(b.with_as_of(timestamp(v)?)),
    },
    LoaderOption {
        name: "rank",
        kind: "int",
        doc: "This process's rank (default: torch.distributed's, else the launcher's RANK, else 0).",
        apply: |b, g, v| {
            g.rank = Some(value("rank", v, "an int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "world_size",
        kind: "int",
        doc: "The number of ranks (default: torch.distributed's, else WORLD_SIZE, else 1).",
        apply: |b, g, v| {
            g.world_size = Some(value("world_size", v, "an int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "job",
        kind: "str",
        doc: "The job these ranks belong to: the latest version is resolved once for it (default, with the rank left to the environment: VOXLAKE_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID).",
        apply: |b, g, v| {
            g.job = true;
            Ok(b.with_job(value::<String>("job", v, "a str")?))
        },
    },
    LoaderOption {
        name: "job_dir",
        kind: "str",
        doc: "A folder (local path or store URL) every rank of the job may write, where they agree on its version without torch.distributed (default: VOXLAKE_JOB_DIR; else the node's folder when every rank runs on it, else beside the table).",
        apply: |b, _, v| Ok(b.with_job_dir(value::<String>("job_dir", v, "a str")?)),
    },
    LoaderOption {
        name: "cache_dir",
        kind: "str",
        doc: "A node-local folder caching a remote table's reads, shared by the node's ranks.",
        apply: |b, g, v| {
            g.cache_dir = Some(value("cache_dir", v, "a str")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "cache_max_bytes",
        kind: "int | str",
        doc: "The cache's cap, in bytes or as \"300GB\", \"256GiB\" (default: half the free space of its filesystem).",
        apply: |b, g, v| {
            g.cache_max_bytes = Some(size("cache_max_bytes", v)?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "memory_budget",
        kind: "int | str",
        doc: "Bytes for everything the loader holds, or \"512MB\", \"2GiB\" (default 1 GiB).",
        apply: |b, _, v| Ok(b.with_memory_budget(size("memory_budget", v)?)),
    },
    LoaderOption {
        name: "metrics_port",
        kind: "int",
        doc: "Serve the loader's metrics (stats()) on http://127.0.0.1:PORT/metrics in Prometheus' text format while it lives (off by default; 0: a free port, Loader.metrics_address). A port taken fails naming it: give each process its own.",
        apply: |b, _, v| {
            Ok(b.with_metrics_port(value("metrics_port", v, "an int from 0 to 65535")?))
        },
    },
    LoaderOption {
        name: "trace",
        kind: "str",
        doc: "Write a Chrome trace-event file of the first batches (trace_batches, default 200) to this path, for Perfetto or chrome://tracing: each wait in next(), each batch's assembly, each row group's fetch and decode, each store request. `{rank}` is replaced by the rank; with several ranks or DataLoader workers and no `{rank}`, the rank goes before the extension.",
        apply: |b, _, v| Ok(b.with_trace(value::<String>("trace", v, "a str")?)),
    },
    LoaderOption {
        name: "trace_batches",
        kind: "int",
        doc: "The batches the option trace covers (default 200).",
        apply: |b, _, v| Ok(b.with_trace_batches(value("trace_batches", v, "an int")?)),
    },
    LoaderOption {
        name: "prefetch",
        kind: "int",
        doc: "Batches assembled ahead of the training loop (default 2).",
        apply: |b, _, v| Ok(b.with_prefetch(value("prefetch", v, "an int")?)),
    },
    LoaderOption {
        name: "storage_options",
        kind: "dict[str, str]",
        doc: "The store's settings, as deltalake names them (e.g. AWS_ENDPOINT_URL).",
        apply: |b, _, v| {
            let map: HashMap<String, String> = value("storage_options", v, "a dict of str to str")?;
            Ok(b.with_storage_options(map))
        },
    },
    LoaderOption {
        name: "channels_first",
        kind: "bool",
        doc: "Move the tensor's last axis (channels) after the batch axis (default False).",
        apply: |b, _, v| Ok(b.with_channels_first(value("channels_first", v, "a bool")?)),
    },
    LoaderOption {
        name: "label_column",
        kind: "str",
        doc: "The label's column (default: `label` where the table has one).",
        apply: |b, _, v| Ok(b.with_label_column(value::<String>("label_column", v, "a str")?)),
    },
    LoaderOption {
        name: "id_column",
        kind: "str",
        doc: "The id's column (default: `id` where the table has one).",
        apply: |b, _, v| Ok(b.with_id_column(value::<String>("id_column", v, "a str")?)),
    },
    LoaderOption {
        name: "tensor_column",
        kind: "str",
        doc: "The column holding the tensors, for tables other tools wrote (default: `tensor`, else the only BINARY, LIST or FIXED_SIZE_LIST column of numbers).",
        apply: |b, _, v| Ok(b.with_tensor_column(value::<String>("tensor_column", v, "a str")?)),
    },
    LoaderOption {
        name: "tensor_shape",
        kind: "list[int]",
        doc: "One sample's shape (C order): needed for LIST and raw BINARY columns, checked against the table otherwise.",
        apply: |b, g, v| {
            g.tensor_shape = Some(value("tensor_shape", v, "a list of int")?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "tensor_dtype",
        kind: "str",
        doc: "One sample's element type (\"f32\", \"float32\", \"<f4\"): needed for raw BINARY columns, with tensor_shape.",
        apply: |b, g, v| {
            let name: String = value("tensor_dtype", v, "a str")?;
            g.tensor_dtype = Some(dtype("tensor_dtype", &name)?);
            Ok(b)
        },
    },
    LoaderOption {
        name: "nulls",
        kind: "dict[str, str]",
        doc: "What nulls of a field become: \"error\" (default: an error naming the column, file and row), \"mask\" (zeros and a `<field>_valid` field) or \"fill:VALUE\".",
        apply: |b, _, v| {
            let policies: Vec<(String, String)> = match v.cast::<PyDict>() {
                Ok(d) => d
                    .iter()
                    .map(|(k, p)| Ok((k.extract()?, p.extract()?)))
                    .collect::<PyResult<_>>(),
                Err(_) => Err(option("option nulls: expected a dict of str to str")),
            }
            .map_err(|e| option(format!("option nulls: expected a dict of str to str: {e}")))?;
            policies.into_iter().try_fold(b, |b, (field, policy)| {
                let policy = policy
                    .parse()
                    .map_err(|e| option(format!("option nulls, field {field}: {e}")))?;
                Ok(b.with_null(field, policy))
            })
        },
    },
    LoaderOption {
        name: "columns",
        kind: "list[str]",
        doc: "The columns read of each row group (default: id, label and every field of the sample).",
        apply: |b, _, v| Ok(b.with_columns(value("columns", v, "a list of str")?)),
    },
    LoaderOption {
        name: "uneven",
        kind: "str",
        doc: "Rows that do not divide evenly over the ranks: \"pad\" (default: every rank the same rows, repeating a few) or \"drop\".",
        apply: |b, _, v| {
            let name: String = value("uneven", v, "a str")?;
            let uneven = name
                .parse()
                .map_err(|e| option(format!("option uneven: {e}")))?;
            Ok(b.with_uneven(uneven))
        },
    },
    LoaderOption {
        name: "verify_checksums",
        kind: "bool",
        doc: "Check each row's CRC-32 where the table has them (default True).",
        apply: |b, _, v| Ok(b.with_verify_checksums(value("verify_checksums", v, "a bool")?)),
    },
    LoaderOption {
        name: "keep_row_groups",
        kind: "bool",
        doc: "Keep row groups from one epoch to the next in the memory budget's free room, so a later epoch takes them back without reading them (default True; a table that fits the budget is read once a job).",
        apply: |b, _, v| Ok(b.with_keep_row_groups(value("keep_row_groups", v, "a bool")?)),
    },
    LoaderOption {
        name: "node_affinity",
        kind: "tuple[int, int] | str",
        doc: "Keep each node's ranks on the same files every epoch (a node's cache then holds its next epoch): (node, nodes), or \"env\" for the launcher's.",
        apply: |b, _, v| match v.extract::<String>() {
            Ok(env) if env == "env" => Ok(b.with_node_affinity_from_env()),
            Ok(other) => Err(option(format!(
                "option node_affinity: expected (node, nodes) or \"env\", got {other:?}"
            ))),
            Err(_) => {
                let (node, nodes): (usize, usize) =
                    value("node_affinity", v, "a (node, nodes) tuple or \"env\"")?;
                Ok(b.with_node_affinity(node, nodes))
            }
        },
    },
    LoaderOption {
        name: "row_group_prefetch",
        kind: "int",
        doc: "Row groups read ahead, fixed (default: sized to the store as it answers).",
        apply: |b, _, v| Ok(b.with_row_group_prefetch(value("row_group_prefetch", v, "an int")?)),
    },
    LoaderOption {
        name: "assembly_threads",
        kind: "int",
        doc: "Threads copying rows into batches (default a quarter of the cores, 1 to 4).",
        apply: |b, _, v| Ok(b.with_assembly_threads(value("assembly_threads", v, "an int")?)),
    },
    LoaderOption {
        name: "runtime_threads",
        kind: "int",
        doc: "Threads of the loader's I/O runtime (default 2).",
        apply: |b, _, v| Ok(b.with_runtime_threads(value("runtime_threads", v, "an int")?)),
    },
];

/// `builder` with `options` applied (unknown names and bad values are errors naming them),
/// and what is applied later: the rank (at build) and the start epoch.
pub(crate) fn apply(
    mut builder: LoaderBuilder,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(LoaderBuilder, Gathered)> {
    let mut g = Gathered::default();
    if let Some(options) = options {
        for (k, v) in options.iter() {
            let name: String = k.extract()?;
            if let Some(sampling) = sampling::OPTIONS.iter().find(|o| o.name == name) {
                (sampling.apply)(&mut g.sampling, &v)?;
                continue;
            }
            let Some(option) = OPTIONS.iter().find(|o| o.name == name) else {
                let known: Vec<&str> = names().map(|n| n.0).collect();
                return Err(option(format!(
                    "unknown option {name}: the options are {}",
                    known.join(", ")
                )));
            };
            builder = (option.apply)(builder, &mut g, &v)?;
        }
    }
    g.spec = sampling::spec(std::mem::take(&mut g.sampling))?;
    builder = builder.with_sampling(g.spec.clone());
    if g.shuffle {
        builder = builder.with_shuffle(
            g.seed.unwrap_or(0),
            g.shuffle_buffer.unwrap_or(DEFAULT_SHUFFLE_BUFFER),
        );
    } else if g.seed.is_some() || g.shuffle_buffer.is_some() {
        return Err(config("options seed and shuffle_buffer need shuffle=True"));
    }
    if let Some(dir) = &g.cache_dir {
        let max = match g.cache_max_bytes {
            Some(max) => max,
            None => voxlake::io::cache::DiskCache::default_max_bytes(std::path::Path::new(dir))
                .map_err(|e| config(format!("option cache_dir: {e}")))?,
        };
        builder = builder.with_cache(dir, max);
    } else if g.cache_max_bytes.is_some() {
        return Err(config("option cache_max_bytes needs cache_dir"));
    }
    builder = match (g.tensor_shape.take(), g.tensor_dtype) {
        (Some(shape), Some(dtype)) => builder.with_tensor_shape(shape, dtype),
        (Some(shape), None) => builder.with_tensor_dims(shape),
        (None, Some(_)) => return Err(config("option tensor_dtype needs tensor_shape")),
        (None, None) => builder,
    };
    if g.rank.is_some() != g.world_size.is_some() {
        return Err(config(
            "options rank and world_size go together: give both or neither",
        ));
    }
    Ok((builder, g))
}

/// How often a wait for a batch looks for Ctrl-C.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Every keyword argument as `(name, type, doc)`: [`OPTIONS`], then the sampling ones.
fn names() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    let sampling = sampling::OPTIONS.iter().map(|o| (o.name, o.kind, o.doc));
    OPTIONS
        .iter()
        .map(|o| (o.name, o.kind, o.doc))
        .chain(sampling)
}

/// The options of `voxlake.Loader`: `(name, type, doc)` for each, in order.
#[pyfunction]
pub(crate) fn loader_options() -> Vec<(&'static str, &'static str, &'static str)> {
    names().collect()
}
