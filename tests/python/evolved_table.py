"""Delta tables as an ingest job leaves them, written by deltalake-python (the ground truth of
tests/integration/conformance.rs is what this script writes, not what voxlake reads).

    python evolved_table.py evolved TABLE
        version 0: x float32, label int64, code string partitions '007', '10' and null
        version 1: appended with schema_mode="merge": a new column depth (float64), and x null
                   in one row
    python evolved_table.py empty TABLE
        version 0 with the schema above and no data files
    python evolved_table.py nested TABLE
        x float32 (1, 2, 3) and meta struct<depth: float64, well: string>:
        {1.5, 'A'}, {null, 'B'}, null
    python evolved_table.py widened TABLE
        version 0: x int32 (1, 2, 3) and y float32 (0.5 ...), written by deltalake-python;
        version 1: type widening as Delta Spark commits it (`ALTER COLUMN x TYPE BIGINT`, y to
        DOUBLE: the typeWidening reader feature, delta.typeChanges in the schema), then a file
        of x int64 (2**40) and y float64 (0.1), written by pyarrow and added by hand
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


def nested(path):
    meta = pa.array([{"depth": 1.5, "well": "A"}, {"depth": None, "well": "B"}, None],
                    pa.struct([("depth", pa.float64()), ("well", pa.string())]))
    deltalake.write_deltalake(path, pa.table({"x": pa.array([1.0, 2.0, 3.0], pa.float32()), "meta": meta}))


def widened(path):
    import json
    import os
    import uuid

    import pyarrow.parquet as pq

    v0 = pa.table({"x": pa.array([1, 2, 3], pa.int32()), "y": pa.array([0.5, 1.5, 2.5], pa.float32())})
    deltalake.write_deltalake(path, v0)
    with open(os.path.join(path, "_delta_log", "00000000000000000000.json")) as f:
        meta = next(json.loads(line)["metaData"] for line in f if '"metaData"' in line)

    def changed(name, wide, narrow):
        return {"name": name, "type": wide, "nullable": True,
                "metadata": {"delta.typeChanges": [{"fromType": narrow, "toType": wide}]}}

    meta["schemaString"] = json.dumps({"type": "struct", "fields": [
        changed("x", "long", "integer"), changed("y", "double", "float")]})
    meta["configuration"] = {**meta.get("configuration", {}), "delta.enableTypeWidening": "true"}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["typeWidening"], "writerFeatures": ["typeWidening"]}
    name = f"part-00001-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(pa.table({"x": pa.array([2**40], pa.int64()), "y": pa.array([0.1], pa.float64())}),
                   os.path.join(path, name))
    size = os.path.getsize(os.path.join(path, name))
    stats = {"numRecords": 1, "minValues": {"x": 2**40, "y": 0.1}, "maxValues": {"x": 2**40, "y": 0.1},
             "nullCount": {"x": 0, "y": 0}}
    add = {"path": name, "partitionValues": {}, "size": size, "modificationTime": 1764000000000,
           "dataChange": True, "stats": json.dumps(stats)}
    with open(os.path.join(path, "_delta_log", "00000000000000000001.json"), "w") as f:
        for action in ({"protocol": protocol}, {"metaData": meta},
                       {"commitInfo": {"timestamp": 1764000000000, "operation": "CHANGE COLUMN"}}):
            f.write(json.dumps(action) + "\n")
    with open(os.path.join(path, "_delta_log", "00000000000000000002.json"), "w") as f:
        for action in ({"add": add}, {"commitInfo": {"timestamp": 1764000000001, "operation": "WRITE"}}):
            f.write(json.dumps(action) + "\n")


if __name__ == "__main__":
    {"evolved": evolved, "empty": empty, "nested": nested, "widened": widened}[sys.argv[1]](sys.argv[2])
