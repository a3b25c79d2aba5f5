"""Summarizes benches/gpu/check.sh's JSON lines against issue 11's targets.

python3 benches/gpu/summary.py RUNS.jsonl
"""

import json
import sys
from collections import defaultdict


def main() -> None:
    steps = defaultdict(list)
    with open(sys.argv[1]) as f:
        for line in f:
            if line.strip():
                run = json.loads(line)
                steps[run["step"]].append(run)
    if not steps.get("ndarray") or not steps.get("device"):
        sys.exit("no bench runs recorded: see stderr.log")

    cat = steps["cat"][0]
    cat_one = cat["bytes"] / cat["one_s"] / 1e9
    cat_all = cat["bytes"] / cat["parallel_s"] / 1e9
    print(f"cat: one process {cat_one:.2f} GB/s, one per core {cat_all:.2f} GB/s")

    # A run of two epochs lasts about a second: the device path's first batch (CUDA's context,
    # pinned buffers: ~0.3 s) is a large part of it, so the rate after the first batch is shown
    # too (what a long training run sees).
    def streaming(r):
        return (r["samples"] - r["samples"] / max(r["batches"], 1)) / max(r["seconds"] - r["first_batch_s"], 1e-9)

    print("\nround  ndarray/s  device/s  ratio  after 1st batch: ndarray/s  device/s  ratio  "
          "device cores  omp1/s  omp1 cores  first batch s  staging waits")
    for i, (a, d, o) in enumerate(
        zip(steps["ndarray"], steps["device"], steps["device_omp1"]), 1
    ):
        print(
            f"{i:5}  {a['samples_per_s']:9.0f}  {d['samples_per_s']:8.0f}  "
            f"{d['samples_per_s'] / a['samples_per_s']:5.2f}  "
            f"{streaming(a):25.0f}  {streaming(d):8.0f}  {streaming(d) / streaming(a):5.2f}  "
            f"{d['cpu_cores']:12.1f}  "
            f"{o['samples_per_s']:6.0f}  {o['cpu_cores']:10.1f}  "
            f"{d['first_batch_s']:13.3f}  {d['staging_waits']:13}"
        )

    for feed, how in (("staged", "voxlake.torch.to_device"), ("pin_memory", "pin_memory() in the loop")):
        python = steps.get(f"python_{feed}_device") or steps.get(f"python_{feed}_cpu") or []
        if python:
            print(f"\nround  python/s  device/s  python/device  (the Python package, {how}; "
                  "issue 31: >= 0.9)")
            for i, (p, d) in enumerate(zip(python, steps["device"]), 1):
                print(f"{i:5}  {p['samples_per_s']:8.0f}  {d['samples_per_s']:8.0f}  "
                      f"{p['samples_per_s'] / d['samples_per_s']:13.2f}")

    long = steps.get("python_staged_long") or []
    if long and steps.get("device_long"):
        print("\nround  python/s  device/s  python/device  (6 epochs a run: to_device and the device "
              "path, each a fresh process)")
        for i, (p, d) in enumerate(zip(long, steps["device_long"]), 1):
            print(f"{i:5}  {p['samples_per_s']:8.0f}  {d['samples_per_s']:8.0f}  "
                  f"{p['samples_per_s'] / d['samples_per_s']:13.2f}")

    best = max(steps["device"], key=lambda r: r["samples_per_s"])
    gbs = best["mb_per_s"] / 1e3
    print(f"\none process on the device: {gbs:.2f} GB/s of tensors = "
          f"{gbs / cat_all:.2f} of one cat per core at once (target >= 0.3)")

    print("\nranks  aggregate samples/s  (each rank's samples over the slowest rank's seconds)")
    for n in (1, 4, 8):
        runs = steps.get(f"ranks{n}", [])
        if len(runs) != n:
            print(f"{n:5}  missing ({len(runs)} of {n} ranks reported)")
            continue
        total = sum(r["samples"] for r in runs) / max(r["seconds"] for r in runs)
        print(f"{n:5}  {total:19.0f}")

    print("\ntargets: device >= 20,000 samples/s on <= 2 cores whatever OMP_NUM_THREADS; "
          "device >= 0.9 x ndarray (whole run and after the first batch); first batch <= 0.05 s; "
          "8 ranks above 4")


if __name__ == "__main__":
    main()
