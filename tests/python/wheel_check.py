"""Run by scripts/check_wheel.sh inside a fresh venv of another CPython where only the wheel of
scripts/wheel.sh is installed (and numpy), with no Rust toolchain on PATH: the package imports,
its `compact` command writes the demo table and one shuffled epoch reads every row of it once,
and a table Spark wrote (array<float>) reads value for value through the loader's options."""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import voxlake


def check_spark_table(fixtures: str) -> None:
    """Spark's `array<float>` table (tests/fixtures/foreign/spark_delta), read with the sample's
    shape given as options: every row with numpy's values (the fixture's expected.npy)."""
    expected = np.load(os.path.join(fixtures, "expected.npy")).astype(np.float32)
    loader = voxlake.Loader(os.path.join(fixtures, "spark_delta"), batch_size=5,
                            tensor_shape=[3, 4, 2, 2], tensor_dtype="f32",
                            id_column="sample", label_column="target")
    seen = 0
    for batch in loader:
        for i, sample_id in enumerate(batch["id"]):
            n = int(sample_id.removeprefix("cube-"))
            assert batch["label"][i] == n % 2, sample_id
            np.testing.assert_array_equal(batch["tensor"][i], expected[n], err_msg=sample_id)
            seen += 1
    assert seen == len(expected) == 24, seen


def main() -> None:
    assert shutil.which("cargo") is None, "cargo must not be on PATH here"
    # The interpreter check_wheel.sh chose (another CPython than the build's where it has one).
    assert "%d.%d" % sys.version_info[:2] == sys.argv[2], (sys.version, sys.argv[2])
    where = os.path.dirname(voxlake.__file__)
    assert "site-packages" in where, f"voxlake imported from {where}, not the installed wheel"
    fixtures = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        # The wheel's own command line (voxlake._cli), as a user runs it after pip install.
        subprocess.run(["compact", "demo", "--dir", tmp, "--count", "96"], check=True,
                       stdout=subprocess.DEVNULL)
        ids = []
        for batch in voxlake.Loader(os.path.join(tmp, "table"), batch_size=8, shuffle=True, seed=3):
            assert batch["tensor"].shape[1:] == (30, 30, 10, 10), batch["tensor"].shape
            assert batch["tensor"].dtype == np.float32
            ids.extend(batch["id"])
        assert len(ids) == 96 == len(set(ids)), (len(ids), len(set(ids)))
    check_spark_table(fixtures)
    print(f"wheel ok: CPython {sys.version.split()[0]}, voxlake from {where}")


if __name__ == "__main__":
    main()
