"""``voxlake.torch.Dataset``: the loader as a ``torch.utils.data.IterableDataset``.

Use it with ``DataLoader(ds, batch_size=None)`` (the loader makes the batches). With
``num_workers > 0`` each worker reads its own disjoint share: rank ``r`` of ``w`` with ``n``
workers reads as rank ``r * n + worker_id`` of ``w * n``, so every worker gets as many batches
and the workers of all ranks together read every row once an epoch.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch
import torch.utils.data

from . import ConfigError, Loader, default_job, default_rank

__all__ = ["Dataset"]


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
