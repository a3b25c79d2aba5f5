"""``voxlake.torch.Dataset``: the loader as a ``torch.utils.data.IterableDataset``; and
``to_device``: its batches on a CUDA device.

Use the dataset with ``DataLoader(ds, batch_size=None)`` (the loader makes the batches). With
``num_workers > 0`` each worker reads its own disjoint share: rank ``r`` of ``w`` with ``n``
workers reads as rank ``r * n + worker_id`` of ``w * n``, so every worker gets as many batches
and the workers of all ranks together read every row once an epoch.

``to_device(batches, "cuda")`` moves each batch as the Rust loader's ``tch`` feed does: its
arrays copied (by a few threads, without the GIL) into page-locked buffers allocated once, a
ring of them, then to the device with ``non_blocking=True`` on a stream of its own; a buffer is
written again only once its last copy has finished (a CUDA event). ``tensor.pin_memory()`` in
the training loop instead costs an allocation and a single-threaded copy on the loop's thread
for every batch: measured on an H100 host, that fed 0.16-0.23 of the Rust feed's rate, this
0.92-1.06 (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

import numpy as np
import torch
import torch.utils.data

from . import ConfigError, Loader, default_job, default_rank
from ._voxlake import _copy_into

__all__ = ["Dataset", "to_device"]

#: Staging buffers in ``to_device``'s ring (as the Rust feed's ``STAGING_BUFFERS``): a batch's
#: copy finishes long before the ring comes round, so the next batches are staged meanwhile.
STAGING_BUFFERS = 3


class Dataset(torch.utils.data.IterableDataset[Dict[str, Any]]):
    """Batches of ``table`` as dicts of torch tensors (``torch.from_numpy``: no copy).

    Takes the options of ``voxlake.Loader``. ``set_epoch(e)`` before iterating gives epoch
    ``e`` (one epoch a pass unless ``epochs`` says otherwise); ``state_dict()`` /
    ``load_state_dict()`` resume exactly where the loader iterated in this process stopped
    (with ``num_workers=0``: a worker's state stays in its process).
    """

    def __init__(self, table: str, **options: Any) -> None:
        super().__init__()
        self._table = table
        self._options = dict(options)
        self._epoch = int(self._options.pop("start_epoch", 0))
        self._state: Optional[Dict[str, Any]] = None
        self._loader: Optional[Loader] = None
        # The rank of this process, resolved here: a worker started by `spawn` does not see
        # torch.distributed's state.
        if "rank" not in self._options and "world_size" not in self._options:
            self._options["rank"], self._options["world_size"] = default_rank()
            # Its ranks (and their workers) agree on one version through the launcher's job.
            job = default_job()
            if job is not None and "job" not in self._options:
                self._options["job"] = job
        Loader(table, **self._options)  # a bad option fails here, not in a worker

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (as ``DistributedSampler.set_epoch``)."""
        self._epoch = int(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """Where the pass iterated in this process stands (see ``Loader.state_dict``).

        Raises ``ConfigError`` where no pass was iterated here: with ``num_workers > 0`` the
        workers' loaders, and their states, live in the worker processes, and a state of this
        process would start the epoch over (rows read twice)."""
        if self._loader is not None:
            return self._loader.state_dict()
        if self._state is not None:
            return self._state
        raise ConfigError(
            "state_dict(): no pass of this dataset was iterated in this process (with "
            "num_workers > 0 each worker's loader and state stay in its own process)"
        )

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume the next pass from ``state``."""
        self._state = state

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        options = dict(self._options)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            options["rank"] = options["rank"] * info.num_workers + info.id
            options["world_size"] = options["world_size"] * info.num_workers
        loader = Loader(self._table, **options, start_epoch=self._epoch)
        if self._state is not None:
            loader.load_state_dict(self._state)
            self._state = None
        self._loader = loader
        for batch in loader:
            yield {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


def to_device(
    batches: Iterable[Dict[str, Any]],
    device: Union[str, torch.device],
    buffers: int = STAGING_BUFFERS,
) -> Iterator[Dict[str, Any]]:
    """Each batch of ``batches`` (dicts of numpy arrays or CPU tensors: a ``Loader``, a
    ``Dataset``) with its arrays on ``device``; other values (``id``) as they are.

    On CUDA each array goes through a ring of ``buffers`` page-locked staging buffers and
    arrives with ``non_blocking=True`` on a copy stream the current stream then waits for (see
    the module). On another device (``cpu``) the same staging runs in pageable buffers and each
    array is copied out of them."""
    device = torch.device(device)
    if buffers < 1:
        raise ConfigError(f"to_device: buffers must be at least 1, not {buffers}")
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]
    # One dict of staging buffers per slot of the ring, by field, grown when a batch needs more.
    ring: List[Dict[str, torch.Tensor]] = [{} for _ in range(buffers)]
    fences: List[Optional[torch.cuda.Event]] = [None] * buffers
    slot = 0
    for batch in batches:
        fence = fences[slot]
        if fence is not None:
            fence.synchronize()  # the slot's last copy has finished: its buffers may be written
        out = _stage(batch, ring[slot], device, stream)
        # The host batch goes back to the loader now, to be filled again while the caller
        # works, not when the next batch is asked for.
        del batch
        if stream is not None:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(stream)
            fences[slot] = event
            current = torch.cuda.current_stream(device)
            current.wait_stream(stream)
            for tensor in out.values():
                if isinstance(tensor, torch.Tensor):
                    tensor.record_stream(current)  # allocated on the copy stream, used on this
        slot = (slot + 1) % buffers
        yield out


def _stage(
    batch: Dict[str, Any],
    staged: Dict[str, torch.Tensor],
    device: torch.device,
    stream: Optional[torch.cuda.Stream],
) -> Dict[str, Any]:
    """``batch``'s arrays copied into ``staged`` (a ring slot's buffers, by field, grown where
    too small) and from there to ``device``: on ``stream`` without blocking where it is CUDA."""
    out: Dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            value = value.numpy()
        if not isinstance(value, np.ndarray):
            out[name] = value
            continue
        array = np.ascontiguousarray(value)
        host = staged.get(name)
        if host is None or host.numel() < array.nbytes:
            host = torch.empty(max(array.nbytes, 1), dtype=torch.uint8, pin_memory=stream is not None)
            staged[name] = host
        _copy_into(host.data_ptr(), host.numel(), array)
        view = host[: array.nbytes].view(torch.from_numpy(array).dtype).view(array.shape)
        if stream is None:
            out[name] = view.to(device, copy=True)
        else:
            with torch.cuda.stream(stream):
                out[name] = view.to(device, non_blocking=True)
    return out
