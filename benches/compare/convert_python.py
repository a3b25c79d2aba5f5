"""The baseline `compact convert` is measured against: a plain Python script doing the same job
with numpy + pyarrow + deltalake.write_deltalake (same schema, same row-group size, one file per
~217 cubes, uncompressed).

usage: convert_python.py CUBES_DIR LABELS_CSV TABLE
"""

import csv
import os
import sys

import numpy as np
import pyarrow as pa
from deltalake import WriterProperties, write_deltalake

ROWS_PER_FILE = 217
ROW_GROUP_ROWS = 32


def main() -> None:
    cubes_dir, labels_csv, table = sys.argv[1:4]
    with open(labels_csv, newline="") as f:
        labels = {row["file"]: int(row["label"]) for row in csv.DictReader(f)}
    keys = sorted(k for k in os.listdir(cubes_dir) if k.endswith(".npy"))
    schema = pa.schema([("id", pa.string(), False), ("label", pa.int64()), ("tensor", pa.binary(), False)])
    props = WriterProperties(compression="UNCOMPRESSED", max_row_group_size=ROW_GROUP_ROWS)
    for start in range(0, len(keys), ROWS_PER_FILE):
        chunk = keys[start : start + ROWS_PER_FILE]
        tensors = []
        for key in chunk:
            a = np.load(os.path.join(cubes_dir, key))
            tensors.append(np.ascontiguousarray(a, dtype="<f4").tobytes())
        batch = pa.table(
            {"id": chunk, "label": [labels[k] for k in chunk], "tensor": tensors}, schema=schema
        )
        write_deltalake(table, batch, mode="append", writer_properties=props)
    print(len(keys))
    sys.stdout.flush()
    os._exit(0)  # deltalake-python can abort in a destructor at exit


if __name__ == "__main__":
    main()
