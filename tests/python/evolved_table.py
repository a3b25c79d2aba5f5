"""Delta tables as an ingest job leaves them, written by deltalake-python (the ground truth of
tests/integration/conformance.rs is what this script writes, not what voxlake reads).

    python evolved_table.py evolved TABLE
        version 0: x float32, label int64, code string partitions '007', '10' and null
        version 1: appended with schema_mode="merge": a new column depth (float64), and x null
                   in one row
    python evolved_table.py empty TABLE
        version 0 with the schema above and no data files
"""

import sys

import deltalake
import pyarrow as pa


def evolved(path):
    v0 = pa.table({
        "x": pa.array([1.0, 2.0, 3.0], pa.float32()),
        "label": pa.array([0, 1, 0], pa.int64()),
        "code": pa.array(["007", "10", None], pa.string()),
    })
    deltalake.write_deltalake(path, v0, partition_by=["code"])
    v1 = pa.table({
        "x": pa.array([4.0, None], pa.float32()),
        "label": pa.array([1, 1], pa.int64()),
        "code": pa.array(["007", "007"], pa.string()),
        "depth": pa.array([0.5, 1.5], pa.float64()),
    })
    deltalake.write_deltalake(path, v1, partition_by=["code"], mode="append", schema_mode="merge")


def empty(path):
    schema = pa.schema([("x", pa.float32()), ("label", pa.int64()), ("code", pa.string())])
    deltalake.write_deltalake(path, schema.empty_table(), partition_by=["code"])


if __name__ == "__main__":
    {"evolved": evolved, "empty": empty}[sys.argv[1]](sys.argv[2])
