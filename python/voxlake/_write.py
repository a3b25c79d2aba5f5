"""``voxlake.write``: samples a program holds (dicts of numpy arrays) written into a voxlake
table by the same Rust writer as ``compact convert``."""

from itertools import chain
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._errors import ConfigError
from ._voxlake import write_rows

# numpy's dtypes by voxlake's names (little-endian, as the table stores them).
_DTYPES = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "float32": "f32", "float64": "f64",
}
_RESERVED = ("id", "label")
# The dtype write_rows takes for a text field.
_TEXT = "text"

Progress = Union[bool, Callable[[int], None]]


def write(
    table: str,
    samples: Any,
    *,
    shapes: Optional[Dict[str, Tuple[int, ...]]] = None,
    storage_options: Optional[Dict[str, str]] = None,
    progress: Progress = True,
) -> Dict[str, Any]:
    """Write ``samples`` into ``table`` (created where missing); returns the summary.

    Each sample is a dict: ``"id"`` (a str, unique; a sample whose id the table holds already
    is skipped, so a run that failed can simply be run again), ``"label"`` (an int or None;
    optional) and one numpy array (a tensor field) or str (a text field) per field, in the
    order of the first sample, the first a numpy array (one field: name it ``"tensor"``).
    Every sample's fields have the first sample's shapes and types.
    Row groups are sized for streaming and rows committed in windows: nothing of a window is
    visible before its commit. ``progress``: True draws a tqdm bar where tqdm is installed
    (Jupyter too), or a callable gets the count of samples taken so far.

    ``samples`` may also be a pyarrow ``Table`` or ``RecordBatchReader``: an ``id`` column
    (string), an optional ``label`` (integer) and one column per field, either
    ``fixed_shape_tensor`` (its shape from the type), a list of numbers per row, reshaped to
    ``shapes[column]`` where given (else one axis), or a string column (a text field).
    """
    if _is_arrow(samples):
        samples = _arrow_samples(samples, shapes or {})
    elif shapes:
        raise ConfigError("write: shapes= is for a pyarrow source (numpy arrays carry theirs)")
    it = iter(samples)
    try:
        first = next(it)
    except StopIteration:
        raise ConfigError("write: no samples") from None
    fields = _fields(first)
    report, done = _progress(progress)
    try:
        return dict(write_rows(table, fields, _rows(chain([first], it), fields),
                               storage_options=storage_options, progress=report))
    finally:
        done()


def _is_arrow(samples: Any) -> bool:
    module = type(samples).__module__
    return module.startswith("pyarrow") and hasattr(samples, "schema")


def _arrow_samples(source: Any, shapes: Dict[str, Tuple[int, ...]]) -> Iterator[Dict[str, Any]]:
    """The rows of a pyarrow Table or RecordBatchReader as write's dicts of numpy arrays."""
    import pyarrow as pa  # type: ignore[import-untyped]

    names = source.schema.names
    if "id" not in names:
        raise ConfigError(f"write: the pyarrow source has no 'id' column (it has {names})")
    fields = [n for n in names if n not in _RESERVED]
    batches = source.to_batches() if isinstance(source, pa.Table) else source
    for batch in batches:
        columns = {name: _arrow_column(name, batch.column(name), shapes.get(name)) for name in fields}
        ids = batch.column("id").to_pylist()
        labels = batch.column("label").to_pylist() if "label" in names else [None] * len(ids)
        for i, sample_id in enumerate(ids):
            row: Dict[str, Any] = {"id": sample_id, "label": labels[i]}
            row.update((name, values[i]) for name, values in columns.items())
            yield row


def _arrow_column(name: str, column: Any, shape: Optional[Tuple[int, ...]]) -> Any:
    """A tensor column as one numpy array of its rows: (rows, *shape); a text column as a list
    of str."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) \
            or pa.types.is_string_view(column.type):
        if column.null_count:
            raise ConfigError(f"write: column '{name}' has null rows")
        return column.to_pylist()
    if isinstance(column.type, pa.FixedShapeTensorType):
        return np.asarray(column.to_numpy_ndarray())
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) \
            or pa.types.is_fixed_size_list(column.type):
        if column.null_count:
            raise ConfigError(f"write: column '{name}' has null rows")
        values = column.flatten().to_numpy(zero_copy_only=False)
        rows = len(column)
        per_row = (len(values) // rows) if rows else 0
        if rows and per_row * rows != len(values):
            raise ConfigError(f"write: column '{name}': its rows are of different lengths")
        wanted = tuple(shape) if shape is not None else (per_row,)
        if int(np.prod(wanted)) != per_row:
            raise ConfigError(f"write: column '{name}' has {per_row} values a row, shape {list(wanted)} takes {int(np.prod(wanted))}")
        return np.asarray(values).reshape((rows, *wanted))
    raise ConfigError(f"write: column '{name}' is {column.type}: a tensor column is a fixed_shape_tensor or a list of numbers")


def _fields(sample: Mapping[str, Any]) -> List[Tuple[str, List[int], str]]:
    fields: List[Tuple[str, List[int], str]] = []
    for name, value in sample.items():
        if name in _RESERVED:
            continue
        if isinstance(value, str):
            fields.append((name, [], _TEXT))
            continue
        if not isinstance(value, np.ndarray):
            raise ConfigError(f"write: field '{name}' is a {type(value).__name__}, not a numpy array or a str")
        dtype = _DTYPES.get(value.dtype.name)
        if dtype is None:
            raise ConfigError(f"write: field '{name}' is {value.dtype}: voxlake stores {', '.join(_DTYPES)}")
        fields.append((name, list(value.shape), dtype))
    if not fields:
        raise ConfigError("write: a sample has no numpy array besides its id and label")
    return fields


def _rows(samples: Iterator[Mapping[str, Any]],
          fields: List[Tuple[str, List[int], str]]) -> Iterator[Tuple[str, Optional[int], List[bytes]]]:
    names = [name for name, _, _ in fields]
    for sample in samples:
        sample_id = sample.get("id")
        if not isinstance(sample_id, str):
            raise ConfigError(f"write: a sample's 'id' must be a str, got {sample_id!r}")
        label = sample.get("label")
        extra = set(sample) - set(names) - set(_RESERVED)
        if extra:
            raise ConfigError(f"write: sample '{sample_id}' has fields {sorted(extra)} the first had not")
        parts = []
        for name, shape, dtype in fields:
            value = sample.get(name)
            if dtype == _TEXT:
                if not isinstance(value, str):
                    raise ConfigError(f"write: sample '{sample_id}' field '{name}' is {type(value).__name__}, the first sample's text")
                try:
                    parts.append(value.encode("utf-8"))
                except UnicodeEncodeError as e:
                    raise ConfigError(f"write: sample '{sample_id}' field '{name}' is not UTF-8 text: {e}") from e
                continue
            if not isinstance(value, np.ndarray) or list(value.shape) != shape \
                    or _DTYPES.get(value.dtype.name) != dtype:
                got = f"{value.dtype} {list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
                raise ConfigError(f"write: sample '{sample_id}' field '{name}' is {got}, the first sample's {dtype} {shape}")
            parts.append(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
        yield sample_id, None if label is None else int(label), parts


def _progress(progress: Progress) -> Tuple[Optional[Callable[[int], None]], Callable[[], None]]:
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return None, lambda: None
    bar = tqdm(unit=" samples", desc="voxlake.write")

    def report(taken: int) -> None:
        bar.update(taken - bar.n)

    return report, bar.close
