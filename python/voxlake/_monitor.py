"""The loader's ``stats()`` where teams already look: TensorBoard (``TensorBoardLogger``) and
Lightning's loggers (``voxlake.lightning.LoaderMonitor``), every N steps."""

import time
from typing import Any, Dict, Optional, Tuple

from ._errors import ConfigError


def scalars(stats: Dict[str, Any], prefix: str) -> Dict[str, float]:
    """Each number of ``stats`` under ``prefix + name`` (a label's or a source's count under
    ``labels/<label>``, ``sources/<i>``)."""
    out: Dict[str, float] = {}
    for name, value in stats.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[prefix + name] = float(value)
        elif name == "labels" and isinstance(value, dict):
            for label, n in value.items():
                out[f"{prefix}labels/{label}"] = float(n)
        elif name == "sources" and isinstance(value, list):
            for i, n in enumerate(value):
                out[f"{prefix}sources/{i}"] = float(n)
    return out


class Rates:
    """``window_samples_per_s`` and ``window_bytes_read_per_s``: the rates between one log and
    the next (``voxlake bench``'s ``samples_per_s`` is the whole run's)."""

    def __init__(self) -> None:
        self._last: Optional[Tuple[float, float, float]] = None

    def add(self, stats: Dict[str, Any], prefix: str, out: Dict[str, float]) -> None:
        now = time.perf_counter()
        samples, read = float(stats.get("samples", 0)), float(stats.get("bytes_read", 0))
        if self._last is not None and now > self._last[0] and samples >= self._last[1]:
            dt = now - self._last[0]
            out[prefix + "window_samples_per_s"] = (samples - self._last[1]) / dt
            out[prefix + "window_bytes_read_per_s"] = (read - self._last[2]) / dt
        self._last = (now, samples, read)


def stats_of(loader: Any) -> Dict[str, Any]:
    """``loader.stats()``, or an error naming what was given where it has none."""
    stats = getattr(loader, "stats", None)
    if not callable(stats):
        raise ConfigError(
            f"{type(loader).__name__} has no stats(): give a voxlake.torch.DataLoader, a "
            "voxlake.Loader or a voxlake.torch.MapDataset (a torch DataLoader over a voxlake "
            "Dataset keeps its workers' counters in the workers)"
        )
    result: Dict[str, Any] = stats()
    return result


class TensorBoardLogger:
    """Writes a loader's ``stats()`` to a TensorBoard ``SummaryWriter`` every
    ``every_n_steps`` steps: each counter as a scalar under ``prefix + name`` (the names of
    docs/usage.md's table), ``labels/<label>`` counts, and ``window_samples_per_s`` and
    ``window_bytes_read_per_s`` since the last write.

    ``writer`` is a ``torch.utils.tensorboard.SummaryWriter`` (or anything with its
    ``add_scalar(tag, value, step)``); ``log(loader, step)`` takes a
    ``voxlake.torch.DataLoader`` (its workers' counters added up and the training loop's own
    wait), a ``voxlake.Loader`` or a ``MapDataset``.
    """

    def __init__(self, writer: Any, every_n_steps: int = 50, prefix: str = "voxlake/") -> None:
        if int(every_n_steps) < 1:
            raise ConfigError(f"every_n_steps={every_n_steps}: give 1 or more")
        if not callable(getattr(writer, "add_scalar", None)):
            raise ConfigError(f"{type(writer).__name__} has no add_scalar(tag, value, step)")
        self._writer = writer
        self._every = int(every_n_steps)
        self._prefix = prefix
        self._rates = Rates()

    def log(self, loader: Any, step: int) -> bool:
        """Writes ``loader``'s figures at ``step`` where ``step`` is a multiple of
        ``every_n_steps``; says whether it wrote."""
        if int(step) % self._every:
            return False
        stats = stats_of(loader)
        out = scalars(stats, self._prefix)
        self._rates.add(stats, self._prefix, out)
        for tag, value in out.items():
            self._writer.add_scalar(tag, value, int(step))
        return True
