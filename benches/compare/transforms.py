"""The Python loader with transforms against the same run without them (issue 45): ROUNDS
rounds, each mode EPOCHS shuffled epochs of TABLE (a seed each, the modes taking turns an epoch
at a time) into batches of 32, each batch summed (CONSUMER=bits: as integers of the values'
width); per round, samples/s, their ratio to the run without transforms (at the end, each
ratio's median and range over the rounds), and the process's CPU time per sample
(all threads: on a machine whose cores are all busy, what a transform costs shows there
first), for
- `transforms=` flip + normalize by name (in Rust, on the assembly threads, per sample),
- the same with the last axis among the flipped (`every axis`: rows read backwards),
- `transforms=` casts to f16 (alone and after the normalization) and to bf16,
- `batch_transform=` doing nothing (what handing each batch to Python costs),
- `batch_transform=` with the same flip + normalize in numpy (per batch).
Needs the package built in release (`maturin develop --release`).

    EPOCHS=3 [CONSUMER=bits] [SUMS=1] python benches/compare/transforms.py TABLE [ROUNDS=4] [MODE ...]

(MODEs: a subset of the modes below, by name; "none" always runs.)
"""

import os
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import numpy as np

import voxlake

FLIP_NORMALIZE = [("flip", {"axes": [0, 1, 2], "p": 0.5}), ("normalize", {"mean": 0.5, "std": 0.25})]


def nothing(batch: Dict[str, Any], rng: np.random.Generator) -> None:
    return None


def numpy_flip_normalize(batch: Dict[str, Any], rng: np.random.Generator) -> Dict[str, Any]:
    x = batch["tensor"]
    for axis in (1, 2, 3):
        if rng.random() < 0.5:
            x = np.flip(x, axis)
    return {"tensor": (x - np.float32(0.5)) / np.float32(0.25)}


MODES: Dict[str, Dict[str, Any]] = {
    "none": {},
    "transforms": {"transforms": FLIP_NORMALIZE},
    "every axis": {"transforms": [("flip", {"axes": [0, 1, 2, 3], "p": 0.5}), FLIP_NORMALIZE[1]]},
    "cast f16": {"transforms": [("cast", {"dtype": "f16"})]},
    "normalize + f16": {"transforms": [FLIP_NORMALIZE[1], ("cast", {"dtype": "f16"})]},
    "cast bf16": {"transforms": [("cast", {"dtype": "bf16"})]},
    "batch_transform noop": {"batch_transform": nothing},
    "batch_transform numpy": {"batch_transform": numpy_flip_normalize},
}


# CONSUMER=bits: each batch's values summed as unsigned integers of their width, so a batch of
# f16 or bf16 costs the loop what its bytes cost (numpy's float32 sum of f16 converts each value,
# and alone takes longer than the loader).
BITS = os.environ.get("CONSUMER") == "bits"
# SUMS=k: each batch summed k times, a training step that takes k times as long (with 1, the
# loop is far faster than the loader: the run measures the loader alone).
SUMS = int(os.environ.get("SUMS", "1"))


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def measure(table: str, options: Dict[str, Any], seed: int) -> Tuple[int, float, float]:
    """One shuffled epoch (`seed`): samples, seconds and CPU seconds."""
    start, cpu, n, total = time.perf_counter(), cpu_s(), 0, 0.0
    loader = voxlake.Loader(table, batch_size=32, shuffle=True, seed=seed, **options)
    for batch in loader:
        x = batch["tensor"]
        assert isinstance(x, np.ndarray)
        for _ in range(SUMS):
            if BITS:
                total += float(x.view(f"u{x.itemsize}").sum(dtype=np.uint64))
            else:
                total += float(x.sum(dtype=np.float32))
        n += len(x)
    return n, time.perf_counter() - start, cpu_s() - cpu


def main() -> None:
    table = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    chosen = set(sys.argv[3:]) | {"none"} if len(sys.argv) > 3 else set(MODES)
    unknown = chosen - set(MODES)
    if unknown:
        sys.exit(f"unknown modes {sorted(unknown)}; the modes are {list(MODES)}")
    epochs = int(os.environ.get("EPOCHS", "3"))
    modes = [name for name in MODES if name in chosen]
    # Read once first, unmeasured: no round reads the table from disk.
    measure(table, {}, 0)
    ratios: Dict[str, List[float]] = {name: [] for name in modes}
    for r in range(rounds):
        done = {name: (0, 0.0, 0.0) for name in modes}
        # The modes take turns an epoch at a time (the order reversed every other epoch), so
        # a shared machine's drift falls on all of them alike.
        for epoch in range(epochs):
            for name in modes if epoch % 2 == 0 else modes[::-1]:
                n, wall, cpu = measure(table, MODES[name], 1 + epoch)
                was = done[name]
                done[name] = (was[0] + n, was[1] + wall, was[2] + cpu)
        rates = {name: (n / wall, cpu / n * 1e6) for name, (n, wall, cpu) in done.items()}
        plain = rates["none"][0]
        for name, (rate, _) in rates.items():
            ratios[name].append(rate / plain)
        print(f"round {r}: " + ", ".join(
            f"{name} {rate:.0f}/s ({rate / plain:.2f}, {cpu:.0f} µs CPU)"
            for name, (rate, cpu) in rates.items()), flush=True)
    print("median over the rounds: " + ", ".join(
        f"{name} {statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"
        for name, r in ratios.items() if name != "none"))


if __name__ == "__main__":
    main()
