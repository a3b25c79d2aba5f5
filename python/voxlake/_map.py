"""``voxlake.torch.MapDataset``: a table's samples by index or id, for any torch ``Sampler``.

The version is resolved once, when the dataset is made, and every process reads that one (it
pickles with the dataset into ``DataLoader`` workers, fork or spawn). Each process opens its
own ``Lookup`` when it first reads; a fork closes the open ones first (``os.register_at_fork``),
so that a forked worker inherits no thread of its parent's, and the parent opens again when it
next reads.
"""

from __future__ import annotations

import operator
import os
import weakref
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.utils.data

from ._errors import ConfigError
from ._voxlake import Lookup, grid_origins

#: Options of ``voxlake.Loader`` that decide how a stream reads (its order, its batches, its
#: rank, its draws): a map-style dataset's sampler and ``DataLoader`` decide those.
_STREAMING = frozenset({
    "batch_size", "epochs", "start_epoch", "shuffle", "shuffle_buffer", "drop_last", "rank",
    "world_size", "job", "job_dir", "prefetch", "uneven", "keep_row_groups", "node_affinity",
    "row_group_prefetch", "balance", "class_weights", "weight_column", "epoch_size", "subsample",
    "subset_by", "metrics_port", "trace", "trace_batches", "patch", "patches_per_volume", "label_field",
    "label_probabilities", "pad", "patch_window", "sampler", "overlap",
})

#: The datasets of this process with a lookup open, closed before a fork.
_OPEN: "weakref.WeakSet[MapDataset]" = weakref.WeakSet()


def _close_before_fork() -> None:
    for dataset in list(_OPEN):
        dataset.close()


os.register_at_fork(before=_close_before_fork)


class MapDataset(torch.utils.data.Dataset[Dict[str, Any]]):
    """The samples of ``table`` by index, ``0 <= i < len(ds)`` in the order the version fixes,
    each a dict: every field as a torch tensor, ``label`` (an int; ``label_valid`` beside it
    where labels may be null) and ``id``. ``ds[i]`` reads one sample; ``ds.__getitems__(list)``
    (what ``DataLoader`` calls with a batch's indices) reads them in one batched take; ``by_id``
    reads by id. Only the row groups holding the asked samples are read.

    Takes ``voxlake.Loader``'s table options (``version``/``timestamp``, ``filter``,
    ``fields``, ``columns``, ``storage_options``, ``cache_dir``, ``memory_budget``,
    ``channels_first``, ``transforms``, ``batch_transform``…); ``seed`` seeds the transforms
    (each sample's from the seed, ``set_epoch``'s epoch and its id); ``split``, ``splits`` and
    ``split_salt`` make the dataset that split's rows alone (indexed ``0..len`` in the version's
    order; the same rows as the streaming Dataset's split). The streaming options (batch size,
    shuffling, ranks, weighted draws) are a sampler's job here and are refused.
    """

    def __init__(self, table: str, **options: Any) -> None:
        super().__init__()
        given = sorted(set(options) & _STREAMING)
        if given:
            raise ConfigError(
                f"MapDataset: {', '.join(given)} decide how a stream reads; here a sampler and "
                "the DataLoader decide (DistributedSampler, WeightedRandomSampler, batch_size)"
            )
        options = dict(options)
        if "seed" in options:
            options["shuffle"] = True  # the lookup takes only the seed of the shuffle settings
        lookup = Lookup(table, **options)
        self._version: int = lookup.version
        self._len = len(lookup)
        self._bf16: FrozenSet[str] = frozenset(n for n, d in lookup.fields() if d == "bf16")
        # Every process reads the version resolved now.
        options.pop("timestamp", None)
        options["version"] = self._version
        self._table, self._options = table, options
        self._epoch = 0
        self._ids: Optional[List[str]] = None
        self._volumes: Optional[List[Dict[str, Any]]] = None
        self._lookup: Optional[Lookup] = lookup
        self._pid = os.getpid()
        _OPEN.add(self)

    def __repr__(self) -> str:
        return f"voxlake.torch.MapDataset({self._table!r}, version={self._version})"

    @property
    def version(self) -> int:
        """The table version every process of the dataset reads."""
        return self._version

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: Any) -> Dict[str, Any]:
        """The sample at ``index``; of a sequence of indices, their batch (each field's tensors
        stacked, ``label`` a tensor, ``id`` a list), read in one take and handed out without a
        copy: ``DataLoader(ds, batch_size=None, sampler=BatchSampler(...))`` asks this way."""
        if isinstance(index, (list, tuple, range, np.ndarray, torch.Tensor)):
            positions = [self._position(i) for i in index]
            if not positions:
                raise IndexError("a batch of no index")
            return self._batch(self._open().take(positions))
        return self._samples(self._open().take([self._position(index)]))[0]

    def __getitems__(self, indices: Sequence[int]) -> List[Dict[str, Any]]:
        """The samples at ``indices`` (a batch's, as ``DataLoader`` asks), read in one take:
        a ``Samples`` list, whose batch ``collate`` hands on without stacking a copy."""
        positions = [self._position(i) for i in indices]
        if not positions:
            return []
        columns = self._batch(self._open().take(positions))
        return Samples(self._split(columns), columns)

    def by_id(self, id: str) -> Dict[str, Any]:
        """The sample of ``id``; ``NotFoundError`` naming it and the version where it has none.
        The first call reads the table's ids once."""
        return self._samples(self._open().take_ids([id]))[0]

    def index_of(self, id: str) -> int:
        """The index of the sample ``id`` (``NotFoundError`` where the version has none)."""
        return self._open().positions([id])[0]

    def ids(self) -> List[str]:
        """Every sample's id, in index order (read once)."""
        if self._ids is None:
            self._ids = self._open().ids()
        return list(self._ids)

    def volumes(self) -> List[Dict[str, Any]]:
        """A bricked table's volumes (``voxlake.write_volumes``), in their numbers' order: each
        a dict of ``id``, ``label``, ``shape`` (z, y, x), ``spacing`` where known and
        ``classes`` (per class field, each class's ``count`` and voxel ``coords``). Read once,
        from three small columns; a table that is not bricked raises ``TableError``."""
        if self._volumes is None:
            self._volumes = self._open().volumes()
        return list(self._volumes)

    def patches(self, at: Sequence[Tuple[int, Sequence[int]]], size: Sequence[int],
                pad: str = "zero") -> Dict[str, Any]:
        """Patches of ``size`` voxels (z, y, x) of a bricked table's volumes as one batch:
        ``at`` lists each patch's volume (its number in ``volumes()``) and origin (z, y, x;
        below 0 or past the edge where padded: ``pad="zero"`` or ``"edge"``; ``"none"``
        refuses a patch past the edge). Each volume field as a tensor ``[B, C?, *size]``,
        ``origin`` (int64 ``[B, 3]``), ``label`` and ``id`` (the volumes'). Only the bricks
        the patches overlap are read, each once."""
        if len(size) != 3:
            raise ConfigError(f"size={tuple(size)}: three ints (z, y, x)")
        asked = [(operator.index(v), (int(o[0]), int(o[1]), int(o[2]))) for v, o in at]
        if not asked:
            raise IndexError("no patch asked")
        z, y, x = (int(s) for s in size)
        return self._batch(self._open().patches((z, y, x), asked, pad))

    def grid(self, volume: int, size: Sequence[int],
             overlap: Sequence[int] = (0, 0, 0)) -> List[Tuple[int, Tuple[int, int, int]]]:
        """The patches of ``size`` that cover volume ``volume``, ``overlap`` voxels apart, in C
        order (along each axis from 0 in steps of ``size - overlap``, the last at the far edge;
        a patch larger than the volume at 0, padded): ``(volume, origin)`` pairs for
        ``patches``, whose outputs ``GridAggregator`` puts back together."""
        shape = self.volumes()[operator.index(volume)]["shape"]
        origins = grid_origins(tuple(shape), _three(size, "size"), _three(overlap, "overlap"))
        return [(volume, (o[0], o[1], o[2])) for o in origins]

    def set_epoch(self, epoch: int) -> None:
        """The epoch the transforms are seeded with (call it beside the sampler's)."""
        self._epoch = int(epoch)
        if self._lookup is not None and self._pid == os.getpid():
            self._lookup.set_epoch(self._epoch)

    def stats(self) -> Dict[str, Any]:
        """What this process's reads did: ``voxlake.Loader.stats()``'s counters by name (samples
        and takes as ``batches``, ``row_groups``, ``bytes_read``, ``assemble_s``…; docs/usage.md)."""
        return self._open().stats()

    def close(self) -> None:
        """Ends this process's lookup and its threads (the next read opens one again)."""
        lookup, self._lookup = self._lookup, None
        _OPEN.discard(self)
        if lookup is not None and self._pid == os.getpid():
            lookup.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_lookup"] = None  # each process opens its own
        state["_ids"] = None
        state["_volumes"] = None
        return state

    def _open(self) -> Lookup:
        if self._lookup is None or self._pid != os.getpid():
            # A forked copy's lookup is its parent's: forgotten, never used or closed here.
            self._lookup = Lookup(self._table, **self._options)
            self._pid = os.getpid()
            if self._epoch:
                self._lookup.set_epoch(self._epoch)
            _OPEN.add(self)
        return self._lookup

    def _position(self, index: Any) -> int:
        i = operator.index(index)
        if not 0 <= i < self._len:
            raise IndexError(f"index {i} is outside 0..{self._len} (version {self._version})")
        return i

    def _batch(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """A batch dict with its arrays as torch tensors (no copy)."""
        out: Dict[str, Any] = {}
        for name, value in batch.items():
            if isinstance(value, np.ndarray):
                tensor = torch.from_numpy(value)
                out[name] = tensor.view(torch.bfloat16) if name in self._bf16 else tensor
            else:
                out[name] = value
        return out

    def _samples(self, batch: Dict[str, Any]) -> List[Dict[str, Any]]:
        """A batch dict as one dict per sample (views of the batch's tensors, no copy)."""
        return self._split(self._batch(batch))

    @staticmethod
    def _split(columns: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Torch columns as one dict per sample: each tensor's row (a view), the label an int."""
        out = []
        for k, id in enumerate(columns["id"]):
            sample: Dict[str, Any] = {}
            for name, value in columns.items():
                if name in ("label", "label_valid"):
                    sample[name] = value[k].item()
                elif name != "id":
                    sample[name] = value[k]
            sample["id"] = id
            out.append(sample)
        return out


def _three(value: Sequence[int], name: str) -> Tuple[int, int, int]:
    if len(value) != 3:
        raise ConfigError(f"{name}={tuple(value)}: three ints (z, y, x)")
    return (int(value[0]), int(value[1]), int(value[2]))


class Samples(List[Dict[str, Any]]):
    """The samples of one take (``MapDataset.__getitems__``), each a dict of views of the take's
    batch, which ``collate`` hands on whole."""

    def __init__(self, samples: List[Dict[str, Any]], batch: Dict[str, Any]) -> None:
        super().__init__(samples)
        self.batch = batch
        self._made = [self._shape(sample) for sample in samples]

    @staticmethod
    def _shape(sample: Dict[str, Any]) -> Tuple[int, Tuple[str, ...], Tuple[int, ...]]:
        return id(sample), tuple(sample), tuple(map(id, sample.values()))

    def whole(self) -> bool:
        """Whether the list is still the take's samples, in order, each dict holding the values
        it was made with (none replaced, moved, added or removed; a tensor changed in place is
        the batch's own memory, changed there too)."""
        return len(self) == len(self._made) and all(
            self._shape(sample) == made for sample, made in zip(self, self._made))


def collate(samples: Any) -> Any:
    """A ``collate_fn`` for ``DataLoader(MapDataset(...), batch_size=B, collate_fn=collate)``:
    the batch one ``__getitems__`` read, as it was read (each field's rows already one tensor,
    ``label`` a tensor, ``id`` a list: what ``default_collate`` makes of the samples, without
    stacking a copy of them); anything else, or a list of samples changed since, by
    ``default_collate``."""
    if isinstance(samples, Samples) and samples.whole():
        return dict(samples.batch)
    return torch.utils.data.default_collate(samples)
