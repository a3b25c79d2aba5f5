"""``voxlake.torch.to_device``: batches on a CUDA device through a ring of page-locked buffers.

Each batch's arrays are copied (by a few threads, without the GIL) into page-locked buffers
allocated once, a ring of them, then to the device with ``non_blocking=True`` on a stream of
its own; a buffer is written again only once its last copy has finished (a CUDA event).
``tensor.pin_memory()`` in the training loop instead costs an allocation and a single-threaded
copy on the loop's thread for every batch: measured on an H100 host, that fed 0.16-0.23 of the
Rust feed's rate, this 0.92-1.06 (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

import numpy as np
import torch

from . import ConfigError
from ._voxlake import STAGING_BUFFERS, _copy_into

# STAGING_BUFFERS: the buffers in ``to_device``'s ring, the Rust feed's number: a batch's copy
# finishes long before the ring comes round, so the next batches are staged meanwhile.


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
        dtype = None
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            dtype = value.dtype
            # numpy has no bfloat16: its bits go as uint16.
            value = (value.view(torch.uint16) if dtype == torch.bfloat16 else value).numpy()
        if not isinstance(value, np.ndarray):
            out[name] = value
            continue
        array = np.ascontiguousarray(value)
        if dtype is None:
            dtype = torch.from_numpy(array).dtype
        host = staged.get(name)
        if host is None or host.numel() < array.nbytes:
            host = torch.empty(max(array.nbytes, 1), dtype=torch.uint8, pin_memory=stream is not None)
            staged[name] = host
        _copy_into(host.data_ptr(), host.numel(), array)
        view = host[: array.nbytes].view(dtype).view(array.shape)
        if stream is None:
            out[name] = view.to(device, copy=True)
        else:
            with torch.cuda.stream(stream):
                out[name] = view.to(device, non_blocking=True)
    return out
