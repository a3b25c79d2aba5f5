"""Writes a voxlake table's rows again in the encodings of other tools, file for file and row
group for row group (same ids, labels and values; no compression, like voxlake's default), so
`voxlake bench` can compare reading them (docs/benchmarks.md, "What does each kind of table cost to read?"):

- list/: `volume` as list<float32> (Spark's array<float>)
- fsl/:  `volume` as pyarrow's arrow.fixed_shape_tensor (Ray Data)
- npy/:  `volume` as np.save bytes per row (Petastorm's NdarrayCodec)

Usage: python foreign_tables.py TABLE OUT (the project venv: pyarrow, deltalake, numpy).
"""

import io
import os
import sys

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main():
    table, out = sys.argv[1], sys.argv[2]
    dt = deltalake.DeltaTable(table)
    config = dt.metadata().configuration
    shape = tuple(int(d) for d in config["voxlake.tensor.shape"].strip("[]").split(","))
    assert config["voxlake.tensor.dtype"] == "f32"
    numel = int(np.prod(shape))
    kinds = ["list", "fsl", "npy"]
    for kind in kinds:
        os.makedirs(os.path.join(out, kind), exist_ok=True)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), shape)
    for n, path in enumerate(sorted(dt.file_uris())):
        source = pq.ParquetFile(path)
        rows = source.metadata.row_group(0).num_rows
        t = source.read(columns=["id", "label", "tensor"])
        raw = t.column("tensor").combine_chunks()
        values = np.frombuffer(b"".join(raw.to_pylist()), dtype="<f4")
        flat = pa.array(values, type=pa.float32())
        offsets = pa.array(np.arange(0, (t.num_rows + 1) * numel, numel, dtype=np.int32))
        columns = {
            "list": pa.ListArray.from_arrays(offsets, flat),
            "fsl": pa.ExtensionArray.from_storage(
                tensor_type, pa.FixedSizeListArray.from_arrays(flat, numel)),
            "npy": pa.array([npy(values[i * numel:(i + 1) * numel].reshape(shape))
                             for i in range(t.num_rows)], type=pa.binary()),
        }
        for kind in kinds:
            part = pa.table({"id": t.column("id"), "label": t.column("label"),
                             "volume": columns[kind]})
            pq.write_table(part, os.path.join(out, kind, f"part-{n:05d}.parquet"),
                           row_group_size=rows, compression="none", use_dictionary=False,
                           write_statistics=["id", "label"])


def npy(array):
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


if __name__ == "__main__":
    main()
