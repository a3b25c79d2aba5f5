"""Where a ``voxlake.torch.Dataset``'s copies read: the rank of this process, the share of each
``DataLoader`` worker, and the state of a pass composed from what the workers handed out.

The arithmetic is the Rust loader's (``voxlake_loader::workers``), asked of the extension: no
code here reads or writes a state's segment keys. A worker is a rank of its own to the Rust
loader; a ``DataLoader`` asks its workers in turn, and a resumed one starts its turns where the
state says, so the batches come in the order they would have come.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import default_job, default_rank
from ._voxlake import _state_at_boundary, _state_compose, _state_fit, _state_versions, _worker_rank


class Placement(NamedTuple):
    """This process's rank and world size, and the job its ranks share (if any)."""

    rank: int
    world_size: int
    job: Optional[str]


def resolve(options: Dict[str, Any]) -> Placement:
    """The placement ``options`` give, else torch.distributed's, else the launcher's."""
    if "rank" in options or "world_size" in options:
        return Placement(int(options.get("rank", -1)), int(options.get("world_size", -1)), options.get("job"))
    rank, world = default_rank()  # torch.distributed's, else the launcher's (Lightning's too)
    job = options.get("job") or default_job()
    return Placement(rank, world, job)


def worker_rank(place: Placement, slot: int, workers: int) -> Tuple[int, int]:
    """The Rust rank and world size of worker slot ``slot`` of ``workers``."""
    return _worker_rank(place.rank, place.world_size, slot, workers)


def at_boundary(state: Dict[str, Any]) -> bool:
    """Whether ``state`` stands between two epochs (nothing of its epoch delivered)."""
    return _state_at_boundary(state)


def fit(state: Dict[str, Any], place: Placement, workers: int) -> Tuple[Dict[str, Any], int]:
    """``state`` for this run's workers and the slot worker 0 plays: where the state's ranks
    ahead are whole slots of this run, its turns go on; else its segment is closed, and the
    rows left are dealt anew over this run's ranks."""
    return _state_fit(state, place.world_size, workers)


def compose(before: Dict[str, Any], after: Dict[str, Any], place: Placement, workers: int) -> Dict[str, Any]:
    """The state of a pass after a batch: ``before`` and ``after`` are the states of the worker
    that gave it, taken before and after it."""
    return _state_compose(before, after, place.rank, place.world_size, workers)


def state_versions(state: Dict[str, Any]) -> List[int]:
    """The versions a loader state was taken at: each source's of a mixture, else the table's."""
    return _state_versions(state)
