"""voxlake for PyTorch Lightning: ``LoaderMonitor``, a ``Callback`` that writes the training
dataloader's ``stats()`` to the Trainer's loggers every N steps.

Built on ``pytorch_lightning.Callback`` where ``pytorch_lightning`` is installed, else on
``lightning.pytorch.Callback``: give it to a Trainer of the same package.
"""

from typing import Any, Dict, List

from ._errors import ConfigError
from ._monitor import Rates, scalars, stats_of

try:
    from pytorch_lightning import Callback
except ImportError:  # the unified `lightning` package
    from lightning.pytorch import Callback  # type: ignore[import-not-found,no-redef]

__all__ = ["LoaderMonitor"]


def _loaders(iterables: Any) -> List[Any]:
    """The loaders with ``stats()`` among a Trainer's training dataloaders (one, a list, a
    dict, or Lightning's ``CombinedLoader`` of them)."""
    if callable(getattr(iterables, "stats", None)):
        return [iterables]
    if hasattr(iterables, "iterables"):  # CombinedLoader
        return _loaders(iterables.iterables)
    if isinstance(iterables, dict):
        return [x for v in iterables.values() for x in _loaders(v)]
    if isinstance(iterables, (list, tuple)):
        return [x for v in iterables for x in _loaders(v)]
    return []


class LoaderMonitor(Callback):
    """Every ``every_n_steps`` optimizer steps, the training dataloader's ``stats()`` (a
    ``voxlake.torch.DataLoader``: its workers' counters added up, and the wait of the
    Trainer's loop inside ``next()``) goes to each of the Trainer's loggers under
    ``prefix + name`` (``labels/<label>`` counts; ``window_samples_per_s`` and
    ``window_bytes_read_per_s`` since the last write). With several training dataloaders,
    each under ``prefix + "<i>/"``. Lightning's loggers write rank 0's figures; ``voxlake
    bench --report`` and ``voxlake report merge`` compare ranks.

    A training dataloader with no ``stats()`` (a plain ``torch.utils.data.DataLoader``) is a
    ``ConfigError`` when training starts.
    """

    def __init__(self, every_n_steps: int = 50, prefix: str = "voxlake/") -> None:
        super().__init__()
        if int(every_n_steps) < 1:
            raise ConfigError(f"every_n_steps={every_n_steps}: give 1 or more")
        self._every = int(every_n_steps)
        self._prefix = prefix
        self._rates: Dict[int, Rates] = {}

    def _found(self, trainer: Any) -> List[Any]:
        loaders = _loaders(trainer.train_dataloader)
        if not loaders:
            raise ConfigError(
                "LoaderMonitor: the Trainer's training dataloader has no stats(): use "
                f"voxlake.torch.DataLoader (got {type(trainer.train_dataloader).__name__})"
            )
        return loaders

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._found(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = int(trainer.global_step)
        if step % self._every:
            return
        loaders = self._found(trainer)
        metrics: Dict[str, float] = {}
        for i, loader in enumerate(loaders):
            prefix = self._prefix if len(loaders) == 1 else f"{self._prefix}{i}/"
            stats = stats_of(loader)
            metrics.update(scalars(stats, prefix))
            self._rates.setdefault(i, Rates()).add(stats, prefix, metrics)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
