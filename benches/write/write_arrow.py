"""`voxlake.write` from a pyarrow Table of reference cubes (30×30×10×10 float32, a binary label):
the samples a second, each way of handing them over timed alternately in one run.

usage: write_arrow.py [--count N] [--rounds R] [--modes arrow,dicts,bytes] [--dir DIR=/dev/shm]
  arrow: the pyarrow Table itself (a fixed_shape_tensor column)
  dicts: the same samples as dicts of numpy arrays, made from the Table batch by batch as
         the write took a Table before it read Arrow data itself (the per-sample path)
  bytes: no table: the tensors' bytes written to one file in 5 MiB writes (the floor: what
         the file system takes to hold the bytes once)
"""

import argparse
import statistics
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa

import voxlake

SHAPE = (30, 30, 10, 10)


def reference_table(count: int) -> pa.Table:
    rng = np.random.default_rng(7)
    values = rng.standard_normal((count, *SHAPE), dtype=np.float32)
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(values)
    return pa.table({
        "id": [f"cube-{i:06d}" for i in range(count)],
        "label": pa.array(rng.integers(0, 2, count), type=pa.int64()),
        "tensor": tensor,
    })


def as_dicts(table: pa.Table):
    for batch in table.to_batches():
        values = batch.column("tensor").to_numpy_ndarray()
        ids, labels = batch.column("id").to_pylist(), batch.column("label").to_pylist()
        yield from ({"id": i, "label": l, "tensor": v} for i, l, v in zip(ids, labels, values))


def tensor_bytes(table: pa.Table) -> list:
    """Each chunk's tensor values as they lie in memory (no copy: `combine_chunks` would make
    one, 1.44 GB, and time it as the floor's)."""
    views = []
    for chunk in table.column("tensor").chunks:
        values = chunk.storage.values
        size = values.type.bit_width // 8
        buf = memoryview(values.buffers()[1])
        views.append(buf[values.offset * size:(values.offset + len(values)) * size])
    return views


def write_bytes(views: list, rows: int, out: str) -> dict:
    with open(os.path.join(out, "tensors.bin"), "wb") as f:
        for values in views:
            for start in range(0, len(values), 5 << 20):
                f.write(values[start:start + (5 << 20)])
    return {"rows": rows}


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--count", type=int, default=4000)
    args.add_argument("--rounds", type=int, default=3)
    args.add_argument("--modes", default="arrow,dicts,bytes")
    # tmpfs by default: the disk's writeback of 1.4 GB a round would time the disk.
    args.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    a = args.parse_args()
    table = reference_table(a.count)
    sources = {"arrow": lambda: table, "dicts": lambda: as_dicts(table)}
    views = tensor_bytes(table)
    assert sum(len(v) for v in views) == table.column("tensor").nbytes
    modes = a.modes.split(",")
    times: dict = {m: [] for m in modes}
    stages: dict = {}
    for _ in range(a.rounds):
        for mode in modes:
            out = tempfile.mkdtemp(prefix="voxlake-write-", dir=a.dir)
            try:
                start = time.perf_counter()
                if mode == "bytes":
                    summary = write_bytes(views, len(table), out)
                else:
                    summary = voxlake.write(out, sources[mode](), progress=False)
                times[mode].append(time.perf_counter() - start)
                assert summary["rows"] == a.count, summary
                stages[mode] = {k: round(v, 2) for k, v in summary.items() if k.endswith("_s")}
            finally:
                shutil.rmtree(out)
    mib = table.column("tensor").nbytes / 2**20
    for mode in modes:
        mid = statistics.median(times[mode])
        print(f"{mode:6} median {mid:6.2f} s  {a.count / mid:8.0f} samples/s  {mib / mid:7.0f} MiB/s"
              f"  (rounds: {', '.join(f'{t:.2f}' for t in times[mode])})")
        print(f"       the writer's stages, last round: {stages[mode]}")
    if "arrow" in times and "dicts" in times:
        ratios = [d / a for a, d in zip(times["arrow"], times["dicts"])]
        print(f"dicts / arrow time, medians: {statistics.median(times['dicts']) / statistics.median(times['arrow']):.2f}x"
              f"  (per round: {', '.join(f'{r:.2f}' for r in ratios)})")
    if "arrow" in times and "bytes" in times:
        print(f"arrow / bytes time, medians: {statistics.median(times['arrow']) / statistics.median(times['bytes']):.2f}x")


if __name__ == "__main__":
    main()
