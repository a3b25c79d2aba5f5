"""``GridAggregator``: a model's outputs on the overlapping grid of patches of a volume
(``MapDataset.grid``) put back together as one volume, each voxel the mean of the patches that
cover it."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]


class GridAggregator:
    """Averages patch outputs into a volume of ``shape`` (z, y, x).

    ``add(outputs, origins)`` takes a batch of outputs, ``[B, C, pz, py, px]`` or
    ``[B, pz, py, px]`` (numpy arrays or torch tensors, on any device), and each patch's origin
    (``[B, 3]``, as ``MapDataset.patches`` gives them in ``batch["origin"]``); voxels of a
    patch past the volume's edge are dropped. ``result()`` is the volume, ``[C, z, y, x]`` or
    ``[z, y, x]``, of the first outputs' kind (numpy or torch, its device), in float32 unless
    ``dtype`` says otherwise; a voxel no patch covered is an error, never a silent zero.
    """

    def __init__(self, shape: Sequence[int], *, dtype: torch.dtype = torch.float32) -> None:
        if len(shape) != 3 or not all(int(s) > 0 for s in shape):
            raise ValueError(f"GridAggregator: shape={tuple(shape)}: three positive sizes (z, y, x)")
        self._shape: Tuple[int, int, int] = (int(shape[0]), int(shape[1]), int(shape[2]))
        self._dtype = dtype
        self._sum: Optional[torch.Tensor] = None
        self._count: Optional[torch.Tensor] = None
        self._numpy = False
        self._channels: Optional[int] = None

    def add(self, outputs: Array, origins: Any) -> None:
        out = torch.from_numpy(np.ascontiguousarray(outputs)) if isinstance(outputs, np.ndarray) else outputs.detach()
        at = torch.as_tensor(np.asarray(origins.cpu() if isinstance(origins, torch.Tensor) else origins), dtype=torch.int64)
        if out.ndim not in (4, 5) or at.shape != (out.shape[0], 3):
            raise ValueError(f"GridAggregator.add: outputs of {tuple(out.shape)} and origins of {tuple(at.shape)}: "
                             "expected [B, C, pz, py, px] or [B, pz, py, px] and [B, 3]")
        channels = out.shape[1] if out.ndim == 5 else None
        if self._sum is None:
            self._numpy = isinstance(outputs, np.ndarray)
            self._channels = channels
            self._sum = torch.zeros((channels or 1, *self._shape), dtype=self._dtype, device=out.device)
            self._count = torch.zeros(self._shape, dtype=torch.int32, device=out.device)
        elif channels != self._channels:
            raise ValueError(f"GridAggregator.add: outputs of {channels} channels, the first had {self._channels}")
        assert self._count is not None
        if out.ndim == 4:
            out = out.unsqueeze(1)
        size = out.shape[2:]
        for b in range(out.shape[0]):
            o = [int(v) for v in at[b]]
            lo = [max(0, -o[a]) for a in range(3)]
            hi = [min(size[a], self._shape[a] - o[a]) for a in range(3)]
            if any(h <= l for l, h in zip(lo, hi)):
                raise ValueError(f"GridAggregator.add: a patch of {tuple(size)} at {tuple(o)} is outside {self._shape}")
            src = out[b, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
            dst = tuple(slice(o[a] + lo[a], o[a] + hi[a]) for a in range(3))
            self._sum[(slice(None), *dst)] += src.to(device=self._sum.device, dtype=self._dtype)
            self._count[dst] += 1

    def result(self) -> Array:
        if self._sum is None or self._count is None:
            raise ValueError("GridAggregator.result: no patch was added")
        uncovered = int((self._count == 0).sum())
        if uncovered:
            raise ValueError(f"GridAggregator.result: {uncovered} voxels of {self._shape} are in no patch added")
        volume = self._sum / self._count.to(self._dtype)
        if self._channels is None:
            volume = volume[0]
        return volume.cpu().numpy() if self._numpy else volume
