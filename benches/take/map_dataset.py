"""voxlake.torch.MapDataset against the streaming Dataset on the reference cubes (30×30×10×10
float32, 351.6 KiB each), local, warm page cache.

usage: map_dataset.py [--rows N=4000] [--dir DIR=/tmp/voxlake-take] [--singles K=1000]
                      [--batch B=256] [--rounds R=5]

- `ds[i]` for K random indices: each call's wall time (p50, p99) and the bytes read a sample
  (`stats()["bytes_read"]` over the samples, beside a sample's own bytes).
- An epoch through `torch.utils.data.DataLoader(num_workers=0)`: the MapDataset under a
  `RandomSampler` in batches of B (one `__getitems__` each, `default_collate` stacking them),
  against the streaming Dataset shuffled in batches of B; alternated R times, samples/s of
  each and their ratio per round (median reported).

The table is written once by `voxlake.write` (random cubes, label i % 2) and its files read
once before timing (the page cache warm).
"""

import argparse
import os
import random
import statistics
import time

import numpy as np
import torch

import voxlake
from voxlake.torch import Dataset, MapDataset

SHAPE = (30, 30, 10, 10)


def make(table: str, rows: int) -> None:
    rng = np.random.default_rng(1)

    def samples():
        for i in range(rows):
            yield {"id": f"cube_{i:06d}.npy", "label": i % 2,
                   "tensor": rng.standard_normal(SHAPE, dtype=np.float32)}
    voxlake.write(table, samples(), progress=False)


def warm(table: str) -> None:
    for root, _, files in os.walk(table):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def singles(table: str, k: int) -> dict:
    ds = MapDataset(table)
    ds[0]  # the lookup's first read (footers) outside the timing
    before = ds.stats()
    picks = random.Random(7).choices(range(len(ds)), k=k)
    times = []
    for i in picks:
        t = time.perf_counter()
        ds[i]
        times.append(time.perf_counter() - t)
    after = ds.stats()
    times.sort()
    sample = int(np.prod(SHAPE)) * 4
    per = (after["bytes_read"] - before["bytes_read"]) / k
    return {"p50_ms": 1e3 * times[len(times) // 2], "p99_ms": 1e3 * times[int(len(times) * 0.99)],
            "bytes_read_per_sample": per, "ratio_to_own_bytes": per / sample}


def map_epoch(table: str, batch: int, seed: int) -> float:
    ds = MapDataset(table)
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler)
    t = time.perf_counter()
    n = sum(len(b["id"]) for b in dl)
    return n / (time.perf_counter() - t)


def stream_epoch(table: str, batch: int, seed: int) -> float:
    ds = Dataset(table, batch_size=batch, shuffle=True, seed=seed, rank=0, world_size=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    t = time.perf_counter()
    n = sum(len(b["id"]) for b in dl)
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--dir", default="/tmp/voxlake-take")
    ap.add_argument("--singles", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    table = os.path.join(args.dir, f"cubes-{args.rows}")
    if not os.path.exists(os.path.join(table, "_delta_log")):
        make(table, args.rows)
    warm(table)
    print("singles:", singles(table, args.singles))
    ratios = []
    for r in range(args.rounds):
        m = map_epoch(table, args.batch, r)
        s = stream_epoch(table, args.batch, r)
        ratios.append(m / s)
        print(f"round {r}: map {m:.0f} samples/s, stream {s:.0f} samples/s, ratio {m / s:.2f}")
    print(f"median ratio map/stream: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
