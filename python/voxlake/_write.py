"""``voxlake.write`` and ``voxlake.write_volumes``: samples or volumes a program holds (dicts
of numpy arrays) written into a voxlake table by the same Rust writers as ``compact convert``."""

from itertools import chain
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._errors import ConfigError
from ._voxlake import write_arrow, write_rows, write_volumes as _write_volumes

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

    ``samples`` may also be Arrow data, any object with ``__arrow_c_stream__`` (a pyarrow
    ``Table`` or ``RecordBatchReader`` from pyarrow 14, a polars ``DataFrame``), taken
    through the Arrow C stream interface and cut into rows in Rust: an ``id`` column
    (string), an optional ``label`` (integer) and one column per field, either
    ``fixed_shape_tensor`` (its shape from the type), a list of numbers per row, reshaped to
    ``shapes[column]`` where given (else one axis), or a string column (a text field).
    """
    # Arrow data goes to Rust; pyarrow too old to export a C stream is told so there.
    if hasattr(samples, "__arrow_c_stream__") or type(samples).__module__.startswith("pyarrow"):
        report, done = _progress(progress)
        try:
            return dict(write_arrow(table, samples, shapes={k: list(v) for k, v in (shapes or {}).items()},
                                    storage_options=storage_options, progress=report))
        finally:
            done()
    if shapes:
        raise ConfigError("write: shapes= is for Arrow data (numpy arrays carry theirs)")
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


def write_volumes(
    table: str,
    volumes: Iterable[Mapping[str, Any]],
    *,
    brick: Tuple[int, int, int] = (32, 32, 32),
    class_fields: Optional[List[str]] = None,
    class_coords: int = 1024,
    storage_options: Optional[Dict[str, str]] = None,
    progress: Progress = True,
) -> Dict[str, Any]:
    """Write ``volumes`` into ``table`` (created where missing) as bricks of ``brick`` voxels;
    returns the summary (its ``rows`` are bricks).

    Each volume is a dict: ``"id"`` (a str, unique; a volume the table holds is skipped, so a
    run that failed can simply be run again), ``"label"`` (an int or None; optional),
    ``"spacing"`` (three floats, z, y, x; optional) and one numpy array per field, in the
    order of the first volume: 3-D (z, y, x) or 4-D with channels first, every field of a
    volume over the same voxels (e.g. ``"image"`` float32 and ``"mask"`` uint8). Volumes may
    differ in shape; their fields' types and channels are the first volume's. Each field is
    cut on one grid of bricks (zeros past the volume's edge); each volume's info (shape,
    spacing, and of each field in ``class_fields`` its classes' voxel counts and up to
    ``class_coords`` voxel coordinates a class) is kept with its last brick, written last.
    ``class_fields`` defaults to the fields after the first whose values are one byte (uint8,
    int8, bool: a label map). The layout is docs/format.md's "Bricked volumes".
    """
    it = iter(volumes)
    try:
        first = next(it)
    except StopIteration:
        raise ConfigError("write_volumes: no volumes") from None
    fields = _volume_fields(first)
    report, done = _progress(progress)
    try:
        return dict(_write_volumes(
            table, [(n, d, c) for n, d, c in fields], _brick(brick), _volumes(chain([first], it), fields),
            class_fields=None if class_fields is None else list(class_fields),
            class_coords=class_coords, storage_options=storage_options, progress=report))
    finally:
        done()


def _brick(brick: Tuple[int, int, int]) -> List[int]:
    if len(brick) != 3 or not all(isinstance(b, int) and b > 0 for b in brick):
        raise ConfigError(f"write_volumes: brick={brick!r}: three positive ints (z, y, x)")
    return list(brick)


def _volume_fields(volume: Mapping[str, Any]) -> List[Tuple[str, str, Optional[int]]]:
    fields: List[Tuple[str, str, Optional[int]]] = []
    for name, value in volume.items():
        if name in _RESERVED or name == "spacing":
            continue
        if not isinstance(value, np.ndarray):
            raise ConfigError(f"write_volumes: field '{name}' is a {type(value).__name__}, not a numpy array")
        dtype = _DTYPES.get(value.dtype.name)
        if dtype is None:
            raise ConfigError(f"write_volumes: field '{name}' is {value.dtype}: voxlake stores {', '.join(_DTYPES)}")
        if value.ndim not in (3, 4):
            raise ConfigError(f"write_volumes: field '{name}' has shape {value.shape}: a volume is (z, y, x) "
                              "or (channels, z, y, x)")
        fields.append((name, dtype, value.shape[0] if value.ndim == 4 else None))
    if not fields:
        raise ConfigError("write_volumes: a volume has no numpy array besides its id, label and spacing")
    return fields


_VolumeRow = Tuple[str, Optional[int], List[int], Optional[List[float]], List[bytes]]


def _volumes(volumes: Iterator[Mapping[str, Any]],
             fields: List[Tuple[str, str, Optional[int]]]) -> Iterator[_VolumeRow]:
    names = [name for name, _, _ in fields]
    for volume in volumes:
        volume_id = volume.get("id")
        if not isinstance(volume_id, str):
            raise ConfigError(f"write_volumes: a volume's 'id' must be a str, got {volume_id!r}")
        extra = set(volume) - set(names) - set(_RESERVED) - {"spacing"}
        if extra:
            raise ConfigError(f"write_volumes: volume '{volume_id}' has fields {sorted(extra)} the first had not")
        spacing = volume.get("spacing")
        if spacing is not None:
            spacing = [float(s) for s in spacing]
            if len(spacing) != 3:
                raise ConfigError(f"write_volumes: volume '{volume_id}': spacing {spacing} is not three numbers")
        shape: Optional[Tuple[int, ...]] = None
        parts = []
        for name, dtype, channels in fields:
            value = volume.get(name)
            want = 3 if channels is None else 4
            if not isinstance(value, np.ndarray) or value.ndim != want or _DTYPES.get(value.dtype.name) != dtype \
                    or (channels is not None and value.shape[0] != channels):
                got = f"{value.dtype} {list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
                kind = f"{dtype} (z, y, x)" if channels is None else f"{dtype} ({channels}, z, y, x)"
                raise ConfigError(f"write_volumes: volume '{volume_id}' field '{name}' is {got}, the first volume's {kind}")
            if shape is not None and value.shape[-3:] != shape:
                raise ConfigError(f"write_volumes: volume '{volume_id}' field '{name}' covers {value.shape[-3:]} voxels, "
                                  f"field '{names[0]}' {shape}")
            shape = value.shape[-3:]
            parts.append(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
        label = volume.get("label")
        assert shape is not None
        yield volume_id, None if label is None else int(label), list(shape), spacing, parts


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
