"""The Python loader with transforms by name against the same run without them (issue 45):
ROUNDS alternated shuffled epochs of TABLE into batches of 32, each batch summed, samples/s and
their ratio per round. Needs the package built in release (`maturin develop --release`).

    python benches/compare/transforms.py TABLE [ROUNDS=4]
"""

import sys
import time

import numpy as np

import voxlake

FLIP_NORMALIZE = [("flip", {"axes": [0, 1, 2], "p": 0.5}), ("normalize", {"mean": 0.5, "std": 0.25})]


def samples_per_s(table: str, transforms: list) -> float:
    start, n, total = time.perf_counter(), 0, 0.0
    options = {"transforms": transforms} if transforms else {}
    for batch in voxlake.Loader(table, batch_size=32, shuffle=True, seed=1, **options):
        x = batch["tensor"]
        total += float(x.sum(dtype=np.float32))
        n += len(x)
    return n / (time.perf_counter() - start)


def main() -> None:
    table = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    for r in range(rounds):
        plain = samples_per_s(table, [])
        augmented = samples_per_s(table, FLIP_NORMALIZE)
        print(f"round {r}: none {plain:.0f}/s, flip + normalize {augmented:.0f}/s, "
              f"ratio {augmented / plain:.2f}", flush=True)


if __name__ == "__main__":
    main()
