"""Where a ``voxlake.torch.Dataset``'s copies read: the rank of this process, the share of each
``DataLoader`` worker, and the state of a pass composed from what the workers handed out.

A worker is a rank of its own to the Rust loader: worker slot ``s`` of ``n`` on rank ``r`` of
``w`` reads as rank ``s * w + r`` of ``w * n``. A ``DataLoader`` asks its workers in turn, so
when it stops, the first slots have handed out one batch more than the others: the Rust state
says so with ``ahead`` (those first ranks, ``(s + 1) * w`` of them), and a resumed loader with
as many workers starts its turns at the first slot not ahead (``shift``), so the batches come
in the order they would have come.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from . import default_job, default_rank


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
    return slot * place.world_size + place.rank, place.world_size * workers


def own_batches(state: Dict[str, Any]) -> int:
    """Batches the rank that took ``state`` delivered in its segment."""
    return int(state["batches"]) + int(state["rank"] < state.get("ahead", 0))


def at_boundary(state: Dict[str, Any]) -> bool:
    """Whether ``state`` stands between two epochs (nothing of its epoch delivered)."""
    return int(state["batches"]) == 0 and not state.get("ahead", 0) and not state["closed"]


def fit(state: Dict[str, Any], place: Placement, workers: int) -> Tuple[Dict[str, Any], int]:
    """``state`` for this run's workers and the slot worker 0 plays: where the state's ranks
    ahead are whole slots of this run, its turns go on; else its segment is closed, and the
    rows left are dealt anew over this run's ranks."""
    world = place.world_size * workers
    ahead = int(state.get("ahead", 0))
    if ahead == 0:
        return state, 0
    if int(state["world_size"]) == world and ahead % place.world_size == 0:
        return state, ahead // place.world_size
    closed = list(state["closed"]) + [
        {"world_size": state["world_size"], "batches": state["batches"], "ahead": ahead}
    ]
    return dict(state, closed=closed, batches=0, ahead=0), 0


def compose(before: Dict[str, Any], after: Dict[str, Any], place: Placement, workers: int) -> Dict[str, Any]:
    """The state of a pass after a batch: ``before`` and ``after`` are the states of the worker
    that gave it, taken before and after it. Slots are asked in turn, so the slots up to this
    one have handed out one batch more than the slots after it."""
    slot = int(before["rank"]) // place.world_size
    own = own_batches(before)
    if slot == workers - 1:
        if at_boundary(after):
            state = dict(after)
        else:
            state = dict(before, batches=own + 1, ahead=0)
    else:
        state = dict(before, batches=own, ahead=(slot + 1) * place.world_size)
    state["rank"] = place.rank
    return state
