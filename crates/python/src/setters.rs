//! How Python reaches each `with_*` setter of the Rust `LoaderBuilder` (its own, the table's
//! and the stream's): through the options that call it, or elsewhere, or not, and why. The
//! Python tests walk the Rust sources' setters and check that each is here, and that every
//! option named here is one ([`crate::options`]).

use pyo3::prelude::*;

/// `(setter, how Python reaches it)`: `option NAME[, NAME]` where options call it.
pub(crate) const SETTERS: &[(&str, &str)] = &[
    ("with_batch_size", "option batch_size"),
    ("with_epochs", "option epochs"),
    ("with_infinite_epochs", "option epochs"),
    ("with_start_epoch", "option start_epoch"),
    ("with_shuffle", "option shuffle, seed, shuffle_buffer"),
    ("with_drop_last", "option drop_last"),
    ("with_field", "option fields"),
    ("with_field_spec", "option fields"),
    ("with_null", "option nulls"),
    ("with_filter", "option filter"),
    ("with_version", "option version"),
    ("with_timestamp", "option timestamp"),
    ("with_as_of", "option version, timestamp"),
    ("with_rank", "option rank, world_size"),
    ("with_job", "option job"),
    ("with_job_dir", "option job_dir"),
    ("with_cache", "option cache_dir, cache_max_bytes"),
    ("with_memory_budget", "option memory_budget"),
    ("with_prefetch", "option prefetch"),
    ("with_metrics_port", "option metrics_port"),
    ("with_trace", "option trace"),
    ("with_trace_batches", "option trace_batches"),
    ("with_row_group_prefetch", "option row_group_prefetch"),
    ("with_storage_options", "option storage_options"),
    ("with_channels_first", "option channels_first"),
    ("with_label_column", "option label_column"),
    ("with_id_column", "option id_column"),
    ("with_tensor_column", "option tensor_column"),
    ("with_tensor_shape", "option tensor_shape, tensor_dtype"),
    ("with_tensor_dims", "option tensor_shape"),
    ("with_columns", "option columns"),
    ("with_uneven", "option uneven"),
    ("with_verify_checksums", "option verify_checksums"),
    ("with_keep_row_groups", "option keep_row_groups"),
    ("with_node_affinity", "option node_affinity"),
    ("with_node_affinity_from_env", "option node_affinity"),
    ("with_assembly_threads", "option assembly_threads"),
    ("with_runtime_threads", "option runtime_threads"),
    (
        "with_sampling",
        "option balance, class_weights, weight_column, epoch_size, subsample, subset_by, split, splits, split_salt, patch, patches_per_volume, label_field, label_probabilities, pad, patch_window, sampler, overlap",
    ),
    (
        "with_sample_columns",
        "the settings of tensor_column, tensor_shape, fields, nulls, label_column and id_column, all at once",
    ),
    (
        "with_rank_from_env",
        "the default: without rank and world_size, torch.distributed's rank, else the launcher's",
    ),
    ("with_state", "Loader.load_state_dict"),
    (
        "with_device",
        "voxlake.torch.to_device (the Rust `tch` feature's libtorch is not Python's torch)",
    ),
    (
        "with_cache_choice",
        "cache_dir (a cache opened once and shared by a process's loaders is the Rust API's)",
    ),
    (
        "with_object_store",
        "not reachable: a Rust ObjectStore; storage_options configure the store",
    ),
    ("with_augment", "option transforms"),
    (
        "with_transform",
        "not reachable: a Rust closure (option transforms runs the transforms by name)",
    ),
    (
        "with_transform_to",
        "not reachable: a Rust closure (option transforms runs the transforms by name)",
    ),
    ("with_batch_transform", "option batch_transform"),
    (
        "with_fault_hook",
        "not reachable: the tests' fault hooks (feature fault-hooks)",
    ),
];

/// [`SETTERS`], for the Python tests.
#[pyfunction]
pub(crate) fn _setters() -> Vec<(&'static str, &'static str)> {
    SETTERS.to_vec()
}
