"""A table of many small rows, then one row by its id through `compact inspect --row`: the row
index built (every id read once) and held, and the whole command's wall time.

usage: row_index.py COMPACT_BIN [--rows N=1000000] [--dir DIR=/tmp/voxlake-row-index] [--runs R=3]

The table is written once by `voxlake.write` from a pyarrow Table (ids `row-0000000`…, a label,
a one-float tensor), then `COMPACT_BIN inspect TABLE --row ID --json` is run R times for random
ids; the index's bytes a row and build seconds come from its JSON, the wall time from here.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import time

import numpy as np
import pyarrow as pa

import voxlake


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compact")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/voxlake-row-index")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    table = os.path.join(args.dir, f"rows-{args.rows}")
    if not os.path.exists(os.path.join(table, "_delta_log")):
        n = args.rows
        data = pa.table({
            "id": [f"row-{i:07d}" for i in range(n)],
            "label": pa.array(np.arange(n) % 2, type=pa.int64()),
            "tensor": pa.FixedShapeTensorArray.from_numpy_ndarray(np.ones((n, 1), np.float32)),
        })
        started = time.perf_counter()
        voxlake.write(table, data, progress=False)
        print(f"wrote {n} rows in {time.perf_counter() - started:.1f} s")
    rng = random.Random(7)
    walls, builds, per_row = [], [], []
    for _ in range(args.runs):
        row = f"row-{rng.randrange(args.rows):07d}"
        started = time.perf_counter()
        out = subprocess.run([args.compact, "inspect", table, "--row", row, "--json"],
                             check=True, capture_output=True, text=True).stdout
        walls.append(time.perf_counter() - started)
        info = json.loads(out)
        assert info["id"] == row, info
        builds.append(info["index_seconds"])
        per_row.append(info["index_bytes"] / info["rows"])
    print(f"{args.rows} rows: inspect --row {statistics.median(walls):.2f} s (median of {args.runs}), "
          f"the index built in {statistics.median(builds):.2f} s, {statistics.median(per_row):.1f} bytes a row")


if __name__ == "__main__":
    main()
