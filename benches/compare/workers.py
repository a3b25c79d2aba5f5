"""How to feed a PyTorch loop from voxlake: the loader in the training process (num_workers 0,
batches through ``to_device``) against DataLoader workers (2 and 4, ``pin_memory=True`` on cuda).

    python benches/compare/workers.py TABLE [--epochs 2] [--device cpu|cuda] [--rounds 2]

Each mode runs in a fresh process, the modes alternated round by round (the machine is shared:
compare ratios within a round). Prints one JSON line a run: samples/s over the epochs after
the first batch, the first batch's wait, and the peak RSS of the training process and of it
and its workers together (sampled from /proc every 50 ms).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

RUN = r"""
import json, os, sys, threading, time, torch
import voxlake.torch as vt

def rss_of(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found

peak = {"self": 0, "all": 0}
def sample():  # the RSS of this process and of its workers together, every 50 ms
    while True:
        try:
            mine = rss_of(os.getpid())
            total = mine + sum(rss_of(c) for c in children(os.getpid()))
        except OSError:
            continue
        peak["self"], peak["all"] = max(peak["self"], mine), max(peak["all"], total)
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()

table, mode, epochs, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
kw = dict(batch_size=32, shuffle=True, seed=1, rank=0, world_size=1)
if mode == "main+to_device":
    batches = lambda: vt.to_device(vt.Dataset(table, epochs=epochs, **kw), device)
else:
    workers = int(mode.split()[0])
    dl = vt.DataLoader(table, num_workers=workers, pin_memory=device == "cuda",
                       persistent_workers=True, epochs=epochs, **kw)
    batches = lambda: (({k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                        for k, v in b.items()}) for b in dl)
start = time.perf_counter()
first = None
samples = 0
total = 0.0
for b in batches():
    x = b["tensor"]
    total += float(x.view(-1)[0])  # touch the batch as a step would
    if first is None:
        first = time.perf_counter() - start
        mark = time.perf_counter()
        continue
    samples += x.shape[0]
if device == "cuda":
    torch.cuda.synchronize()
took = time.perf_counter() - mark
time.sleep(0.1)
print(json.dumps({"mode": mode, "samples_per_s": samples / took, "first_batch_s": first,
                  "rss_mib": peak["self"] / 2**20, "all_processes_rss_mib": peak["all"] / 2**20}))
"""

MODES = ["main+to_device", "2 workers", "4 workers"]  # workers pin memory on cuda


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for round in range(args.rounds):
        for mode in MODES:
            done = subprocess.run([sys.executable, "-c", RUN, args.table, mode, str(args.epochs), args.device],
                                  capture_output=True, text=True, check=True)
            report = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps(dict(report, round=round, device=args.device)), flush=True)


if __name__ == "__main__":
    main()
