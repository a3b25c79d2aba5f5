"""Prints the rows the deletion vectors of a local Delta table delete, as deltalake-python (the
Delta kernel) reads them: a JSON object {file path relative to the table: [deleted rows]} for
every file that has a vector. Ground truth for the integration tests, never voxlake's reader.

    python deleted_rows.py TABLE [VERSION]
"""

import json
import os
import sys
import urllib.parse

import pyarrow as pa
from deltalake import DeltaTable


def main():
    table = os.path.abspath(sys.argv[1])
    version = int(sys.argv[2]) if len(sys.argv) > 2 else None
    dt = DeltaTable(table, version=version)
    root = urllib.parse.unquote(dt.table_uri).rstrip("/") + "/"
    out = {}
    vectors = pa.table(dt.deletion_vectors().read_all())
    for uri, mask in zip(vectors.column("filepath").to_pylist(),
                         vectors.column("selection_vector").to_pylist()):
        path = urllib.parse.unquote(uri)
        if not path.startswith(root):
            raise SystemExit(f"{path} is not under {root}")
        out[path[len(root):]] = [i for i, keep in enumerate(mask) if not keep]
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
