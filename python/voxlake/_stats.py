"""What a ``voxlake.torch.DataLoader`` reports in ``stats()``: its workers' counters added up,
and the training loop's own wait.

Each worker's loader counts its own reads; none sees the training loop, which waits in the
main process for whichever worker's batch is next. So each batch carries its loader's
``stats()`` (taken as the batch left the loader) with the worker and the pass it came from, and
the main process keeps the latest of each worker's pass: the counters (``COUNTERS``, totals
that only grow) are those added up over every pass and worker so far. The wait inside
``next()`` is measured here, where the loop waits (``WaitMeter``: the loader's histogram).
"""

import copy
from typing import Any, Callable, Dict, Optional, Tuple

from ._voxlake import COUNTERS, WaitMeter

#: Figures of one worker's loader that do not add up over workers (a latency, a forecast of one
#: worker's share): left out of the combined ``stats()``.
_PER_LOADER = frozenset({"read_latency_s", "steady_iteration_s", "epoch_forecast_s", "batches_ready_peak"})

#: What the training loop's own wait replaces in the workers' figures.
_LOOP = frozenset({"consumer_wait_s", "input_bound_fraction", "first_batch_s", "elapsed_s"})


def _add(total: Dict[str, Any], stats: Dict[str, Any], numbers: Callable[[str], bool]) -> None:
    """``stats`` added into ``total``: each label's and each source's count, the version, and
    the numbers ``numbers`` keeps."""
    for name, value in stats.items():
        if name == "labels":
            labels = total.setdefault("labels", {})
            for label, n in value.items():
                labels[label] = labels.get(label, 0) + n
        elif name == "sources":  # samples of each source of a mixture
            total[name] = [a + b for a, b in zip(total.get(name, [0] * len(value)), value)]
        elif name == "version":
            total[name] = value
        elif numbers(name) and isinstance(value, (int, float)):
            total[name] = total.get(name, 0) + value


class LoopStats:
    """The counters of a ``DataLoader``'s workers and the wait of the loop that iterates it."""

    def __init__(self) -> None:
        self._latest: Dict[int, Tuple[int, Dict[str, Any]]] = {}
        self._ended: Dict[str, Any] = {name: 0 for name in COUNTERS}
        self._meter = WaitMeter()
        self._started: Optional[float] = None
        self._first: Optional[float] = None
        self._last = 0.0

    def waited(self, asked: float, got: float) -> None:
        """The loop asked for a batch at ``asked`` and got it at ``got`` (``perf_counter``)."""
        if self._started is None:
            self._started = asked
            self._first = got - asked
        self._meter.record(max(got - asked, 0.0))
        self._last = got

    def take(self, worker: int, token: int, stats: Dict[str, Any]) -> None:
        """The latest ``stats()`` of ``worker``'s pass ``token`` (the pass's own, one a pass of
        a ``DataLoader`` iterator: ``_passes.pass_token``); a later pass's ends the one before,
        whose counters are kept."""
        before = self._latest.get(worker)
        if before is not None and before[0] != token:
            _add(self._ended, before[1], lambda name: name in COUNTERS)
        self._latest[worker] = (token, stats)

    def stats(self) -> Dict[str, Any]:
        """The counters added up over every worker and pass, the gauges of the workers' loaders
        added up (``reads_in_flight``, ``batches_ready``), and the loop's wait:
        ``consumer_wait_s``, ``step_wait_*``, ``input_bound_fraction``, ``first_batch_s``,
        ``elapsed_s`` (from the loop's first ask to its latest batch)."""
        out = copy.deepcopy(self._ended)
        out.setdefault("labels", {})
        for _, stats in self._latest.values():
            _add(out, stats, _added)
        out.update(self._meter.waits())
        elapsed = 0.0 if self._started is None else self._last - self._started
        out["elapsed_s"] = elapsed
        out["first_batch_s"] = self._first or 0.0
        out["input_bound_fraction"] = out["consumer_wait_s"] / elapsed if elapsed > 0 else 0.0
        out["workers_reporting"] = len(self._latest)
        return out


def _added(name: str) -> bool:
    """Whether a worker's figure ``name`` adds up over workers (not its own latency or forecast,
    not what the loop's own wait replaces)."""
    return not (name in _PER_LOADER or name in _LOOP or name.startswith("step_wait"))
