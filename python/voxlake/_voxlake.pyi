"""Types of the extension module (crates/python); the options' one list is loader_options()."""

from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._source import Source

__version__: str
DEFAULT_MEMORY_BUDGET: int
STAGING_BUFFERS: int
COUNTERS: List[str]

Batch = Dict[str, Union[np.ndarray, List[str]]]

class WaitMeter:
    def __init__(self) -> None: ...
    def record(self, seconds: float) -> None: ...
    def waits(self) -> Dict[str, Union[int, float]]: ...

class TensorOwner:
    """The Rust buffer a batch's first array looks at (that array's ``base``)."""

class Loader:
    """Batches of a voxlake (Delta) table as dicts of numpy arrays (see the module)."""

    def __init__(
        self,
        table: Union[str, Sequence[Source]],
        *,
        batch_size: int = ...,
        epochs: Optional[int] = ...,
        start_epoch: int = ...,
        shuffle: bool = ...,
        seed: int = ...,
        shuffle_buffer: int = ...,
        drop_last: bool = ...,
        fields: Union[List[str], Dict[str, Optional[Tuple[List[int], str]]]] = ...,
        transforms: List[Tuple[str, Dict[str, Any]]] = ...,
        batch_transform: Callable[[Batch, np.random.Generator], Optional[Batch]] = ...,
        filter: str = ...,
        version: int = ...,
        timestamp: Union[datetime, str] = ...,
        rank: int = ...,
        world_size: int = ...,
        job: str = ...,
        job_dir: str = ...,
        cache_dir: str = ...,
        cache_max_bytes: Union[int, str] = ...,
        memory_budget: Union[int, str] = ...,
        prefetch: int = ...,
        metrics_port: int = ...,
        trace: str = ...,
        trace_batches: int = ...,
        storage_options: Dict[str, str] = ...,
        channels_first: bool = ...,
        label_column: str = ...,
        id_column: str = ...,
        tensor_column: str = ...,
        tensor_shape: List[int] = ...,
        tensor_dtype: str = ...,
        nulls: Dict[str, str] = ...,
        columns: List[str] = ...,
        uneven: str = ...,
        verify_checksums: bool = ...,
        keep_row_groups: bool = ...,
        node_affinity: Union[Tuple[int, int], str] = ...,
        row_group_prefetch: int = ...,
        assembly_threads: int = ...,
        runtime_threads: int = ...,
        balance: str = ...,
        class_weights: Dict[int, float] = ...,
        weight_column: str = ...,
        epoch_size: int = ...,
        subsample: float = ...,
        subset_by: str = ...,
        split: str = ...,
        splits: Dict[str, float] = ...,
        split_salt: str = ...,
        patch: Tuple[int, int, int] = ...,
        patches_per_volume: int = ...,
        label_field: str = ...,
        label_probabilities: Dict[int, float] = ...,
        pad: str = ...,
        patch_window: int = ...,
        sampler: str = ...,
        overlap: Tuple[int, int, int] = ...,
    ) -> None: ...
    def __iter__(self) -> Loader: ...
    def __next__(self) -> Batch: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Union[Dict[str, Any], str]) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def rank(self) -> Tuple[int, int]: ...
    def fields(self) -> List[Tuple[str, str]]: ...
    @property
    def version(self) -> int: ...
    @property
    def versions(self) -> List[int]: ...
    @property
    def metrics_address(self) -> Optional[Tuple[str, int]]: ...
    def batches_per_epoch(self, world_size: Optional[int] = None) -> int: ...
    def stats(self) -> Dict[str, Union[int, float]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Loader: ...
    def __exit__(self, *exc: Any) -> bool: ...

class Lookup:
    """A table's rows by position (``0..len``) or id, as batch dicts (``voxlake.torch.MapDataset``
    reads it). Takes ``voxlake.Loader``'s options; opens the table at construction."""

    def __init__(self, table: str, **options: Any) -> None: ...
    def __len__(self) -> int: ...
    @property
    def version(self) -> int: ...
    def take(self, positions: List[int]) -> Batch: ...
    def take_ids(self, ids: List[str]) -> Batch: ...
    def positions(self, ids: List[str]) -> List[int]: ...
    def ids(self) -> List[str]: ...
    def volumes(self) -> List[Dict[str, Any]]: ...
    def patches(self, size: Tuple[int, int, int], at: List[Tuple[int, Tuple[int, int, int]]],
                pad: str = "zero") -> Batch: ...
    def set_epoch(self, epoch: int) -> None: ...
    def fields(self) -> List[Tuple[str, str]]: ...
    def stats(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...

def loader_options() -> List[Tuple[str, str, str]]: ...
def _setters() -> List[Tuple[str, str]]: ...
def convert(
    src: str,
    table: str,
    *,
    labels: Optional[str] = None,
    shape: Optional[List[int]] = None,
    dtype: Optional[str] = None,
    shard: Optional[Tuple[int, int]] = None,
    storage_options: Optional[Dict[str, str]] = None,
    progress: bool = True,
) -> Dict[str, Any]:
    """Convert the .npy objects under src not in table yet (compact convert); the summary."""

def picture(table: str, id: str, *, storage_options: Optional[Dict[str, str]] = None) -> Tuple[int, int, bytes, bytes]:
    """The picture of row ``id`` (``compact inspect --row ID --png``): width, height, RGB and PNG bytes."""
def inspect(table: str, *, row: Optional[str] = None, storage_options: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Describe a table as compact inspect --json does; with row, that row (inspect --row)."""
def write_rows(
    table: str,
    fields: List[Tuple[str, List[int], str]],
    rows: Iterable[Tuple[str, Optional[int], List[bytes]]],
    *,
    storage_options: Optional[Dict[str, str]] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> Dict[str, Any]:
    """Write rows (id, label, field bytes) of fields (name, shape, dtype) into table."""
def write_arrow(
    table: str,
    data: Any,
    *,
    shapes: Optional[Dict[str, List[int]]] = None,
    storage_options: Optional[Dict[str, str]] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> Dict[str, Any]:
    """Write Arrow data (an object with __arrow_c_stream__) into table: id, label, a field a column."""
def write_volumes(
    table: str,
    fields: List[Tuple[str, str, Optional[int]]],
    brick: List[int],
    volumes: Iterable[Tuple[str, Optional[int], List[int], Optional[List[float]], List[bytes]]],
    *,
    class_fields: Optional[List[str]] = None,
    class_coords: Optional[int] = None,
    storage_options: Optional[Dict[str, str]] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> Dict[str, Any]:
    """Write volumes (id, label, shape, spacing, field bytes) of fields (name, dtype, channels) as bricks."""
def grid_origins(shape: Tuple[int, int, int], size: Tuple[int, int, int],
                 overlap: Tuple[int, int, int]) -> List[Tuple[int, int, int]]:
    """The origins of the patches of size, overlap apart, that cover a volume of shape."""
def default_rank() -> Tuple[int, int]: ...
def default_job() -> Optional[str]: ...
def live_threads() -> int: ...
def run_command(name: str, argv: List[str]) -> int:
    """Run the compact or voxlake command line with argv (program first); its exit status."""
def _copy_into(dst: int, dst_bytes: int, src: np.ndarray, threads: Optional[int] = None) -> int:
    """Copy C-contiguous src into the dst_bytes bytes at address dst (voxlake.torch's)."""
def _compare_exchange(address: int, expected: int, new: int) -> int: ...
def _worker_rank(rank: int, world_size: int, slot: int, workers: int) -> Tuple[int, int]: ...
def _state_fit(state: Dict[str, Any], world_size: int, workers: int) -> Tuple[Dict[str, Any], int]: ...
def _state_compose(before: Dict[str, Any], after: Dict[str, Any], rank: int, world_size: int,
                   workers: int) -> Dict[str, Any]: ...
def _state_at_boundary(state: Dict[str, Any]) -> bool: ...
def _state_versions(state: Dict[str, Any]) -> List[int]: ...
