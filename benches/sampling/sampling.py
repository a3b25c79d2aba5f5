"""Sampling's cost (issue 58): `voxlake bench` over TABLE, the modes taking turns a process at a
time for ROUNDS rounds (one shuffled epoch each, a seed a round, batches of 32, every value
touched), against the plain epoch of the same round:
- `balance`: every label an equal share of the same number of draws (with replacement),
- `subsample`: a new 10 % of the rows (distinct) each epoch,
- `subsample by row group`: a new 10 % taken as whole row groups,
- `split`: the 10 % validation split of train/val 0.9/0.1,
- `mixture`: the table twice as a mixture's two sources, every row of each once (twice the
  plain epoch's draws, from two snapshots),
- `mixture half each`: the same two sources, half the rows of each (distinct, a new half each
  epoch): as many draws as the plain epoch, but every row group of both read (row subsets).
Per mode, the median over the rounds (and the range) of its samples/s over the plain run's,
its bytes of column chunks fetched over the plain run's, and the share of label 1 in what it
delivered.

    python3 benches/sampling/sampling.py VOXLAKE_BIN TABLE [ROUNDS=7] [MODE,MODE...]
"""

import json
import statistics
import subprocess
import sys

MODES = {
    "plain": [],
    "balance": ["--balance", "label"],
    "subsample": ["--subsample", "0.1"],
    "subsample by row group": ["--subsample", "0.1", "--subset-by", "row_group"],
    "split": ["--split", "val", "--splits", "train:0.9,val:0.1"],
    "mixture": ["{table}"],
    "mixture half each": ["{table}", "--repeat", "0.5,0.5"],
}


def run(binary: str, table: str, seed: int, flags: list) -> dict:
    flags = [f.format(table=table) for f in flags]
    out = subprocess.run([binary, "bench", table, "--shuffle", "--seed", str(seed), "--json", *flags],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    binary, table = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    if len(sys.argv) > 4:  # only these modes (and plain)
        keep = set(sys.argv[4].split(",")) | {"plain"}
        for mode in [m for m in MODES if m not in keep]:
            del MODES[mode]
    ratios = {m: [] for m in MODES if m != "plain"}
    bytes_ratio = {m: [] for m in MODES if m != "plain"}
    ones = {m: [] for m in MODES}
    run(binary, table, 0, [])  # the table into the page cache
    for r in range(rounds):
        reports = {}
        order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
        for mode in order:
            reports[mode] = run(binary, table, r + 1, MODES[mode])
        plain = reports["plain"]
        line = [f"round {r}: plain {plain['samples_per_s']:.0f}/s"]
        for mode, rep in reports.items():
            labels = rep["labels_delivered"]
            ones[mode].append(labels.get("1", 0) / max(rep["samples"], 1))
            if mode == "plain":
                continue
            ratios[mode].append(rep["samples_per_s"] / plain["samples_per_s"])
            bytes_ratio[mode].append(rep["bytes_read"] / plain["bytes_read"])
            line.append(f"{mode} {ratios[mode][-1]:.2f}x ({rep['samples']} samples, bytes {bytes_ratio[mode][-1]:.2f})")
        print("; ".join(line), flush=True)
    for mode in ratios:
        r = ratios[mode]
        print(f"{mode}: samples/s {statistics.median(r):.2f}x of plain (range {min(r):.2f}-{max(r):.2f}), "
              f"bytes fetched {statistics.median(bytes_ratio[mode]):.2f}x, label 1 {statistics.median(ones[mode]):.3f} "
              f"(plain {statistics.median(ones['plain']):.3f})")


if __name__ == "__main__":
    main()
