"""voxlake for PyTorch: ``Dataset`` (a ``torch.utils.data.IterableDataset``), ``MapDataset``
(samples by index or id, for any ``Sampler``), ``DataLoader`` (a ``torch.utils.data.DataLoader``
that checkpoints), and ``to_device`` (batches into CUDA).

Each pass over a ``Dataset`` reads the next epoch, in the main process and in ``DataLoader``
workers alike (persistent or not): the copies agree on each pass's epoch through a few words
of shared memory, so no call from the training loop is needed (``set_epoch`` still sets it).
With ``num_workers > 0`` each worker reads its own disjoint share: worker slot ``s`` of ``n``
on rank ``r`` of ``w`` reads as rank ``s * w + r`` of ``w * n``, so every worker gets as many
batches and the workers of all ranks together read every row once an epoch.

``DataLoader(table_or_dataset, batch_size=..., num_workers=..., ...)`` resolves the rank, the
world size and the table version once in the main process before its workers start, has a
``len()``, and ``state_dict()`` / ``load_state_dict()`` composed from the batches its workers
handed out: a checkpoint mid-epoch resumes exactly, with as many workers or another number of
them, on as many ranks or another number. torchdata's ``StatefulDataLoader`` works with the
plain ``Dataset`` too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
# torch's DataLoader worker loop seeds numpy.random, which numpy imports lazily: imported here,
# before any fork, so that a forked worker never imports it while the parent's import lock was
# held by another of its threads at the fork (seen: the worker died of a KeyError in
# importlib's module locks, and the error it was to report was lost).
import numpy.random  # noqa: F401
import torch
import torch.utils.data

from . import ConfigError, Loader, Source, loader_options
from ._voxlake import DEFAULT_MEMORY_BUDGET, STAGING_BUFFERS, live_threads
from ._device import to_device
from ._grid import GridAggregator
from ._map import MapDataset, Samples, collate
from ._monitor import TensorBoardLogger
from ._passes import Passes, pass_token, random_token
from ._placement import Placement, at_boundary, compose, fit, resolve, state_versions, worker_rank
from ._stats import LoopStats

__all__ = ["DataLoader", "Dataset", "GridAggregator", "MapDataset", "STAGING_BUFFERS", "Samples", "TensorBoardLogger", "collate",
           "to_device"]

#: The key under which a worker of ``voxlake.torch.DataLoader`` sends the states around each
#: batch (taken out before the batch reaches the training loop).
_STATE_KEY = "_voxlake_states"
#: The key under which each batch of ``voxlake.torch.DataLoader`` carries its loader's
#: ``stats()``, with the worker and its pass (taken out as the state is).
_STATS_KEY = "_voxlake_stats"
_OPTION_NAMES = frozenset(name for name, _, _ in loader_options())


class Dataset(torch.utils.data.IterableDataset[Dict[str, Any]]):
    """Batches of ``table`` as dicts of torch tensors (``torch.from_numpy``: no copy).

    Takes the options of ``voxlake.Loader``; opens nothing until iterated. Each pass reads
    the next epoch (``epochs`` of them where given) unless ``set_epoch(e)`` says which.
    ``state_dict()`` / ``load_state_dict()`` resume exactly where a pass stood: the pass run
    in this process, a worker's own (torchdata's ``StatefulDataLoader`` asks each worker), or
    the next pass anywhere for a state loaded in the main process.
    """

    def __init__(self, table: Union[str, Sequence[Source]], **options: Any) -> None:
        super().__init__()
        self._table: Union[str, List[Source]] = table if isinstance(table, str) else list(table)
        self._options = dict(options)
        start = int(self._options.pop("start_epoch", 0))
        Loader(self._table, **self._options)  # a bad option fails here (this opens nothing)
        epochs = self._options.get("epochs", 1)
        self._per_pass = 1 if epochs is None else int(epochs)
        self._passes = Passes(start)
        self._placement: Optional[Placement] = None
        self._loader: Optional[Loader] = None
        self._loader_pid = 0
        self._pass_epoch = start
        self._worker_state: Optional[Dict[str, Any]] = None
        self._finished_state: Optional[Dict[str, Any]] = None
        self._worker_passes = 0
        self._report_states = False
        self._report_stats = False
        # The version of each table this job reads (one, or each source's of a mixture), where
        # it was resolved for it (a DataLoader's probe, a broadcast from rank 0); a state fixes
        # its own.
        self._job_versions: Optional[List[int]] = None

    def __repr__(self) -> str:
        return f"voxlake.torch.Dataset({self._table!r})"

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (as ``DistributedSampler.set_epoch``), in every
        worker too."""
        self._passes.set(int(epoch))

    def placement(self) -> Placement:
        """This process's rank, world size and job: resolved once, at the first pass (or
        when a ``DataLoader`` starts its workers), from the options, ``torch.distributed``
        or the launcher's variables."""
        if self._placement is None:
            self._placement = resolve(self._options)
        return self._placement

    def state_dict(self) -> Dict[str, Any]:
        """Where this process's pass stands (the state of ``voxlake.Loader`` and the epoch of
        the pass it is in, ``pass_epoch``); a state loaded and not yet read from, as it is.

        Raises ``ConfigError`` where no pass ran in this process: with plain ``DataLoader``
        workers each worker's state stays in its process (``voxlake.torch.DataLoader`` and
        ``StatefulDataLoader`` gather them)."""
        pending = self._passes.pending()
        if pending is not None:
            return dict(pending[1], pass_epoch=pending[0])
        if self._loader_pid == os.getpid():
            if self._finished_state is not None:
                return dict(self._finished_state, pass_epoch=self._pass_epoch)
            if self._loader is not None:
                return dict(self._loader.state_dict(), pass_epoch=self._pass_epoch)
        raise ConfigError(
            "state_dict(): no pass of this dataset ran in this process (with num_workers > 0 "
            "use voxlake.torch.DataLoader or torchdata's StatefulDataLoader, which gather "
            "the workers' states)"
        )

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume from ``state``: in the main process the next pass (in whichever process it
        runs), in a worker that worker's next pass."""
        state = dict(state)
        pass_epoch = int(state.pop("pass_epoch", state["epoch"]))
        if torch.utils.data.get_worker_info() is not None:
            self._worker_state = dict(state, pass_epoch=pass_epoch)
            return
        if at_boundary(state):
            pass_epoch = int(state["epoch"])  # a finished pass: the next one is the state's
        if not _fixed(self._table, self._options):
            self._job_versions = state_versions(state)  # the run goes on at the state's versions
        self._passes.set(pass_epoch, state)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        place = self.placement()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        self._worker_passes += 1
        own, self._worker_state = self._worker_state, None
        if info is None:
            token = random_token()
        else:
            token = pass_token(info.seed - info.id, self._worker_passes)
        epoch, state = self._passes.claim(token, self._per_pass, None if own is None else own["pass_epoch"])
        shift = 0
        if own is not None:
            state = {k: v for k, v in own.items() if k != "pass_epoch"}
        elif state is not None:
            state, shift = fit(state, place, workers)
        rank, world = worker_rank(place, (worker + shift) % workers, workers)
        options = dict(self._options, rank=rank, world_size=world, start_epoch=epoch)
        if "memory_budget" not in options and workers > 1:
            # A rank's workers share the budget one loader would have.
            options["memory_budget"] = DEFAULT_MEMORY_BUDGET // workers
        fixed = _fixed(self._table, options)
        if info is None and state is None and not fixed and self._job_versions is None:
            self._job_versions = _agree_versions(self._table, options, place)
        elif info is not None and state is None and not fixed and self._job_versions is None and place.world_size == 1 and place.job is None:
            # A one-rank run's workers (a plain DataLoader's; a named job agrees through its
            # marker): the first to start resolves the latest versions for all of them, as one
            # rank; the run's later passes read them too.
            table_, probe = self._table, dict(options)
            self._job_versions = self._passes.versions(lambda: _latest_versions(table_, probe))
        table = self._table
        if self._job_versions is not None and state is None and not fixed:
            table = _at_versions(table, options, self._job_versions)
        elif place.job is not None and not fixed and _process_group(place) is None:
            options["job"] = place.job
        self._pass_epoch = epoch
        # A loader inherited from the parent (a forked worker) is forgotten by the extension,
        # never stopped here: its threads are the parent's.
        self._loader, self._loader_pid, self._finished_state = None, os.getpid(), None
        if state is not None and self._per_pass > 0 and int(state["epoch"]) >= epoch + self._per_pass:
            # This worker had finished the pass when the state was taken.
            self._finished_state = state
            return iter(())
        loader = Loader(table, **options)
        if state is not None:
            loader.load_state_dict(state)
        before = loader.state_dict()  # opens the table: the state is valid from iter() on
        if info is None and not fixed and self._job_versions is None:
            self._job_versions = loader.versions  # the run's later passes read them too
        self._loader = loader
        bf16 = frozenset(name for name, dtype in loader.fields() if dtype == "bf16")
        # What voxlake.torch.DataLoader's stats() adds up: this worker's pass's counters.
        source = (0 if info is None else info.id, token) if self._report_stats else None
        return _Batches(loader, bf16, before if self._report_states else None, self._left, source)

    def _left(self, loader: Loader) -> None:
        """A pass left before its end (its batches freed, as a loop's ``break`` frees them): its
        state kept for ``state_dict()``, its threads ended, so that workers forked next (a
        validation DataLoader's) inherit none."""
        if self._loader is loader and self._loader_pid == os.getpid():
            self._finished_state = loader.state_dict()
            self._loader = None
            loader.close()

    def __getstate__(self) -> Dict[str, Any]:
        from multiprocessing import context

        if context.get_spawning_popen() is not None:
            self.placement()  # a spawned worker does not see torch.distributed: resolved here
        state = self.__dict__.copy()
        state["_loader"] = None  # a pickled dataset starts its own passes
        return state


class _Batches:
    """A pass's batches as torch tensors; with ``before``, each carries the states around it
    for ``voxlake.torch.DataLoader``."""

    def __init__(self, loader: Loader, bf16: FrozenSet[str], before: Optional[Dict[str, Any]],
                 left: Callable[[Loader], None], source: Optional[Tuple[int, int]]) -> None:
        self._left: Optional[Callable[[Loader], None]] = None  # until the pass is under way
        self._loader = iter(loader)
        self._bf16 = bf16
        self._before = None if before is None else json.dumps(before)
        self._source = source
        self._left = left

    def __del__(self) -> None:
        if self._left is not None:
            self._left(self._loader)

    def __iter__(self) -> "_Batches":
        return self

    def __next__(self) -> Dict[str, Any]:
        try:
            batch = next(self._loader)
        except Exception:  # the pass ended or failed, its threads with it (not an interrupt)
            self._left = None
            raise
        out: Dict[str, Any] = {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()
        }
        for name in self._bf16:  # the bits numpy holds as uint16
            out[name] = out[name].view(torch.bfloat16)
        if self._before is not None:
            after = json.dumps(self._loader.state_dict())
            out[_STATE_KEY] = (self._before, after)
            self._before = after
        if self._source is not None:
            out[_STATS_KEY] = (*self._source, self._loader.stats())
        return out


class DataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    """A ``torch.utils.data.DataLoader`` over a voxlake ``Dataset``: ``DataLoader(table,
    batch_size=32, shuffle=True, num_workers=4, ...)`` takes the ``Dataset``'s options and the
    ``DataLoader``'s (``batch_size`` is voxlake's: the loader makes the batches), or a
    ``Dataset`` and the ``DataLoader``'s options. See the module for what it adds."""

    def __init__(self, data: Any, **kwargs: Any) -> None:
        if isinstance(data, Dataset):
            dataset = data
            given = sorted(k for k in kwargs if k in _OPTION_NAMES)
            if given:
                raise ConfigError(f"options {', '.join(given)} belong to the Dataset given")
        else:
            options = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTION_NAMES}
            dataset = Dataset(data if isinstance(data, (list, tuple)) else str(data), **options)
        if kwargs.pop("batch_size", None) is not None:
            raise ConfigError("batch_size is the Dataset's option")
        if kwargs.get("in_order") is False:
            raise ConfigError("in_order=False: the batches' order, and so the state, would depend on timing")
        super().__init__(dataset, batch_size=None, **kwargs)
        self._voxlake_dataset = dataset
        self._states: Optional[Tuple[str, str]] = None
        self._batches_per_pass: Optional[int] = None
        self._agreed = False
        self._stats = LoopStats()

    def _workers(self) -> int:
        return max(int(self.num_workers), 1)

    def _prepare(self) -> None:
        """Before the workers start: the rank and the table version, once for all of them."""
        ds = self._voxlake_dataset
        place = ds.placement()
        if self._batches_per_pass is not None:
            return
        # Opened as this rank: its version is the rank's (the workers' too). No epoch: the log
        # and the first footers are read, no data.
        options = dict(ds._options, rank=place.rank, world_size=place.world_size, epochs=0)
        if _process_group(place) is not None:
            options.update(rank=0, world_size=1)  # rank 0's version is broadcast at the first pass
        fixed = _fixed(ds._table, options)
        table = ds._table
        if ds._job_versions is not None and not fixed:
            table = _at_versions(table, options, ds._job_versions)  # a loaded state's, or resolved before
        elif place.job is not None and not fixed and _process_group(place) is None:
            options["job"] = place.job  # torch.distributed agrees without writing anything
        with Loader(table, **options) as probe:
            if not fixed:
                ds._job_versions = probe.versions
            per_epoch = probe.batches_per_epoch(worker_rank(place, 0, self._workers())[1])
        self._batches_per_pass = per_epoch * self._workers() * max(ds._per_pass, 1)

    def _agree(self) -> None:
        """Every rank reads rank 0's version, broadcast by torch.distributed where it is
        initialized (at the first pass, which every rank of a DDP job starts together; never in
        ``len()``, which one rank may call alone)."""
        self._agreed = True
        ds = self._voxlake_dataset
        dist = _process_group(ds.placement())
        if dist is None or _fixed(ds._table, ds._options):
            return
        box = [ds._job_versions]
        dist.broadcast_object_list(box, src=0)
        if box[0] is not None and box[0] != ds._job_versions:
            ds._job_versions = [int(v) for v in box[0]]
            self._batches_per_pass = None  # rank 0's version may have other rows
            self._prepare()

    def __len__(self) -> int:
        """Batches a pass yields on this rank (every worker's)."""
        self._prepare()
        assert self._batches_per_pass is not None
        return self._batches_per_pass

    def __iter__(self) -> Iterator[Dict[str, Any]]:  # type: ignore[override]
        self._prepare()
        if not self._agreed:
            self._agree()
        ds = self._voxlake_dataset
        ds._report_states = self.num_workers > 0
        ds._report_stats = True
        self._check_fork()
        batches = super().__iter__()
        return self._strip(batches)

    def _check_fork(self) -> None:
        """Refuses, before any worker starts, to fork workers while loaders of this process run:
        each worker would refuse to load (see ``voxlake_loader``'s ``fork.rs``)."""
        if self.num_workers == 0 or (self.persistent_workers and self._iterator is not None):
            return  # no worker is started now
        context = self.multiprocessing_context
        method = multiprocessing.get_start_method() if context is None else context.get_start_method()
        threads = live_threads()
        if method == "fork" and threads > 0:
            raise ConfigError(
                f"{threads} thread(s) of voxlake loaders run in this process: workers forked now "
                "could not load (a fork leaves the lock table those threads wait in dangling). "
                "Close or finish those loaders first (`with Loader(...)`, `loader.close()`, a "
                "pass run to its end), or use multiprocessing_context='forkserver' or 'spawn'"
            )

    def _strip(self, batches: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                asked = time.perf_counter()  # the loop waits from here: what stats() reports
                batch = next(batches, None)
                if batch is None:
                    return
                self._stats.waited(asked, time.perf_counter())
                states = batch.pop(_STATE_KEY, None)
                if states is not None:
                    self._states = states
                stats = batch.pop(_STATS_KEY, None)
                if stats is not None:
                    self._stats.take(*stats)
                yield batch
        finally:
            # What this pass's copies carry (workers forked or pickled already have it): a
            # plain DataLoader over the same dataset later gets batches without those keys.
            ds = self._voxlake_dataset
            ds._report_states = ds._report_stats = False

    def stats(self) -> Dict[str, Any]:
        """This rank's counters under ``voxlake.Loader.stats()``'s names, added up over its
        workers' loaders and every pass so far (as of each worker's latest batch), and the wait
        of the loop that iterates this ``DataLoader``, measured where it waits:
        ``consumer_wait_s``, ``step_wait_p50_s`` … ``step_wait_max_s``,
        ``input_bound_fraction``, ``first_batch_s`` and ``elapsed_s`` (from the first batch
        asked for to the latest received). ``workers_reporting`` counts the workers heard from.
        A worker's own latency, forecast and queue peak (``read_latency_s``,
        ``steady_iteration_s``, ``epoch_forecast_s``, ``batches_ready_peak``) are left out."""
        return self._stats.stats()

    def state_dict(self) -> Dict[str, Any]:
        """Where the run stands after the last batch handed out: load it into a new
        ``DataLoader`` (any number of workers, any world size) to go on from there."""
        ds = self._voxlake_dataset
        if self.num_workers == 0 or self._states is None:
            return ds.state_dict()
        before, after = (json.loads(s) for s in self._states)
        state = compose(before, after, ds.placement(), self._workers())
        pass_epoch = ds._passes.last_epoch()
        return dict(state, pass_epoch=int(state["epoch"]) if pass_epoch is None else pass_epoch)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume the next pass from ``state`` (from ``state_dict``)."""
        self._states = None
        self._batches_per_pass = None  # counted again at the state's version
        self._voxlake_dataset.load_state_dict(state)


def _agree_versions(table: Union[str, List[Source]], options: Dict[str, Any], place: Placement) -> Optional[List[int]]:
    """Rank 0's latest version of each table, broadcast to every rank where torch.distributed
    is initialized over them (the first pass in the main process, which the ranks start
    together); else None."""
    dist = _process_group(place)
    if dist is None:
        return None
    box: List[Optional[List[int]]] = [None]
    if place.rank == 0:
        box[0] = _latest_versions(table, options)
    dist.broadcast_object_list(box, src=0)
    return None if box[0] is None else [int(v) for v in box[0]]


def _latest_versions(table: Union[str, List[Source]], options: Dict[str, Any]) -> List[int]:
    """The latest version of each table, opened as one rank: the log and a footer, no data,
    no job."""
    with Loader(table, **dict(options, rank=0, world_size=1, epochs=0)) as probe:
        versions = [int(v) for v in probe.versions]
    return versions


def _fixed(table: Union[str, List[Source]], options: Dict[str, Any]) -> bool:
    """Whether the options (or, of a mixture, every source) name the version to read."""
    if "version" in options or "timestamp" in options:
        return True
    return not isinstance(table, str) and all(s.fixed() for s in table)


def _at_versions(table: Union[str, List[Source]], options: Dict[str, Any], versions: List[int]) -> Union[str, List[Source]]:
    """``table`` at the job's ``versions``: one table's as the ``version`` option (set in
    ``options``), each source's of a mixture on the source (those naming their own keep it)."""
    if isinstance(table, str):
        options["version"] = versions[0]
        return table
    return [s.at_version(v) for s, v in zip(table, versions)]


def _process_group(place: Placement) -> Any:
    """``torch.distributed`` where it is initialized over this placement's ranks, else None."""
    import torch.distributed as dist

    if place.world_size > 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() == place.world_size:
        return dist
    return None
