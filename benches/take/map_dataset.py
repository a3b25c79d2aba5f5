"""voxlake.torch.MapDataset against the streaming Dataset on the reference cubes (30×30×10×10
float32, 351.6 KiB each), local, warm page cache.

usage: map_dataset.py [--rows N=4000] [--dir DIR=/tmp/voxlake-take] [--singles K=1000]
                      [--batch B=256] [--rounds R=5]

- `ds[i]` for K random indices: each call's wall time (p50, p99) and the bytes read a sample
  (`stats()["bytes_read"]` over the samples, beside a sample's own bytes).
- An epoch through `torch.utils.data.DataLoader(num_workers=0)`: the MapDataset under a
  `RandomSampler` in batches of B, collated (one `__getitems__` each, `default_collate`
  stacking the samples: a copy), collated by `voxlake.torch.collate` (the take's batch handed
  on) and batched (`batch_size=None` over a `BatchSampler`: the take's batch as read), against
  the streaming Dataset shuffled in batches of B; alternated R times (one dataset of each for
  the run, a first epoch of each untimed), samples/s of each and the ratios' medians.

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
from voxlake.torch import Dataset, MapDataset, collate

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


def map_epoch(ds: MapDataset, batch: int, seed: int, mode: str) -> float:
    """An epoch of the MapDataset in random batches: through `__getitems__` and
    `default_collate` (`collated`) or `voxlake.torch.collate` (`voxlake`), or as batches by
    lists of indices (`batched`: `batch_size=None`)."""
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    if mode == "collated":
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler)
    elif mode == "voxlake":
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler, collate_fn=collate)
    else:
        batches = torch.utils.data.BatchSampler(sampler, batch_size=batch, drop_last=False)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, sampler=batches)
    t = time.perf_counter()
    n = sum(len(b["id"]) for b in dl)
    return n / (time.perf_counter() - t)


def stream_epoch(ds: Dataset) -> float:
    """A pass of the streaming Dataset (the next epoch, shuffled)."""
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
    # One dataset of each for the whole run, as a training job keeps them across epochs; a
    # first epoch of each outside the timing.
    mapped = MapDataset(table)
    streamed = Dataset(table, batch_size=args.batch, shuffle=True, seed=0, rank=0, world_size=1,
                       shuffle_buffer=args.batch)
    map_epoch(mapped, args.batch, 99, "batched")
    stream_epoch(streamed)
    ratios: dict = {"collated": [], "voxlake": [], "batched": []}
    for r in range(args.rounds):
        rates = {mode: map_epoch(mapped, args.batch, r, mode) for mode in ratios}
        s = stream_epoch(streamed)
        for mode, rate in rates.items():
            ratios[mode].append(rate / s)
        print(f"round {r}: map " + ", ".join(f"{m} {v:.0f}" for m, v in rates.items())
              + f", stream {s:.0f} samples/s")
    for mode, values in ratios.items():
        print(f"median ratio map ({mode}) / stream: {statistics.median(values):.2f}")


if __name__ == "__main__":
    main()
