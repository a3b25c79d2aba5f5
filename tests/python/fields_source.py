"""Sources of several fields for `compact convert --fields`, written by numpy, and the check
that a converted table holds them value for value (read with deltalake-python and pyarrow).

    python fields_source.py make DIR COUNT    # DIR/x/s000.npy, DIR/mask/s000.npy, DIR/npz/s000.npz
    python fields_source.py check TABLE DIR   # every row's x and mask against DIR's arrays
    python fields_source.py bomb FILE MB      # an .npz whose x.npy says 384 bytes, inflates to MB
"""

import os
import sys

import deltalake
import numpy as np

SHAPE = (4, 4, 2, 3)


def make(root, count):
    rng = np.random.default_rng(20261124)
    for d in ("x", "mask", "npz"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(count):
        x = rng.standard_normal(SHAPE).astype(np.float32)
        mask = (x[..., 0] > 0).astype(np.uint8)
        name = f"s{i:03d}"
        np.save(os.path.join(root, "x", name + ".npy"), x)
        np.save(os.path.join(root, "mask", name + ".npy"), mask)
        np.savez_compressed(os.path.join(root, "npz", name + ".npz"), x=x, mask=mask,
                            porosity=np.float64(i / 10))


def check(table, root):
    dt = deltalake.DeltaTable(table)
    t = dt.to_pyarrow_table()
    assert t.schema.names[:4] == ["id", "label", "x", "mask"], t.schema.names
    for i in range(t.num_rows):
        key = t.column("id")[i].as_py()
        x = np.frombuffer(t.column("x")[i].as_py(), np.float32).reshape(SHAPE)
        mask = np.frombuffer(t.column("mask")[i].as_py(), np.uint8).reshape(SHAPE[:3])
        assert (x == np.load(os.path.join(root, "x", key))).all(), key
        assert (mask == np.load(os.path.join(root, "mask", key))).all(), key
    print(t.num_rows, flush=True)
    # deltalake-python 1.6.6 may abort in a runtime destructor at interpreter exit after
    # to_pyarrow_table ("terminate called without an active exception", seen here on a loaded
    # machine); every check has passed by now, so leave without running destructors.
    os._exit(0)


def bomb(path, mb):
    """A zip bomb in an .npz: `x.npy`'s header is a valid (4, 4, 2, 3) float32 array's, its
    data MB megabytes of zeros (deflated to ~1/1000); `mask.npy` is a real mask."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": SHAPE})
    chunk = bytes(1 << 20)
    mask = io.BytesIO()
    np.save(mask, np.zeros(SHAPE[:3], np.uint8))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            for _ in range(mb):
                member.write(chunk)
        z.writestr("mask.npy", mask.getvalue())
    print(os.path.getsize(path))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "bomb":
        bomb(sys.argv[2], int(sys.argv[3]))
    else:
        check(sys.argv[2], sys.argv[3])
