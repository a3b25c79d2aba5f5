"""The Python loader with transforms against the same run without them (issue 45): ROUNDS
alternated shuffled epochs of TABLE into batches of 32, each batch summed, samples/s and their
ratio to the run without transforms, per round, for
- `transforms=` flip + normalize by name (in Rust, on the assembly threads, per sample),
- `batch_transform=` doing nothing (what handing each batch to Python costs),
- `batch_transform=` with the same flip + normalize in numpy (per batch).
Needs the package built in release (`maturin develop --release`).

    python benches/compare/transforms.py TABLE [ROUNDS=4] [MODE ...]

(MODEs: a subset of the modes below, by name; "none" always runs.)
"""

import sys
import time
from typing import Any, Dict

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


MODES = {
    "none": {},
    "transforms": {"transforms": FLIP_NORMALIZE},
    "batch_transform noop": {"batch_transform": nothing},
    "batch_transform numpy": {"batch_transform": numpy_flip_normalize},
}


def samples_per_s(table: str, options: Dict[str, Any]) -> float:
    start, n, total = time.perf_counter(), 0, 0.0
    for batch in voxlake.Loader(table, batch_size=32, shuffle=True, seed=1, **options):
        x = batch["tensor"]
        total += float(x.sum(dtype=np.float32))
        n += len(x)
    return n / (time.perf_counter() - start)


def main() -> None:
    table = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    chosen = set(sys.argv[3:]) | {"none"} if len(sys.argv) > 3 else set(MODES)
    unknown = chosen - set(MODES)
    if unknown:
        sys.exit(f"unknown modes {sorted(unknown)}; the modes are {list(MODES)}")
    for r in range(rounds):
        rates = {
            name: samples_per_s(table, options) for name, options in MODES.items() if name in chosen
        }
        plain = rates["none"]
        print(f"round {r}: " + ", ".join(
            f"{name} {rate:.0f}/s ({rate / plain:.2f})" for name, rate in rates.items()), flush=True)


if __name__ == "__main__":
    main()
