"""Bricked volumes from Python: ``voxlake.write_volumes`` writes volumes of several shapes as
bricks; pyarrow and deltalake-python read the table, and the volumes put together from their
bricks equal numpy's, voxel for voxel, their info's class counts numpy's ``unique``; a re-run
skips what is written; bad volumes are refused naming the volume and the field."""

import json

import numpy as np
import pytest

import voxlake

BRICK = (8, 8, 4)


def volume(i, shape):
    rng = np.random.default_rng(i)
    image = rng.standard_normal((2, *shape), dtype=np.float32)
    mask = (rng.random(shape) < 0.05).astype(np.uint8)
    mask[-1, -1, -2:] = 3  # a rare class
    return {"id": f"vol_{i}", "label": i, "spacing": (1.5, 0.7, 0.7), "image": image, "mask": mask}


def read_back(table):
    """Each volume put together from its bricks (read with pyarrow, by the id's brick number)."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    files = DeltaTable(table).file_uris()
    rows = ds.dataset(files, format="parquet").to_table().to_pylist()
    by_volume = {}
    for row in rows:
        by_volume.setdefault(row["volume"], []).append(row)
    volumes = {}
    for vid, bricks in by_volume.items():
        (info,) = [json.loads(b["volume_info"]) for b in bricks if b["volume_info"]]
        shape = info["shape"]
        counts = [-(-shape[a] // BRICK[a]) for a in range(3)]
        assert len(bricks) == np.prod(counts), vid
        image = np.zeros((2, *[c * b for c, b in zip(counts, BRICK)]), np.float32)
        mask = np.zeros([c * b for c, b in zip(counts, BRICK)], np.uint8)
        for b in bricks:
            n = int(b["id"].rsplit("#", 1)[1])
            z, y, x = n // (counts[1] * counts[2]), n // counts[2] % counts[1], n % counts[2]
            at = (slice(z * BRICK[0], (z + 1) * BRICK[0]), slice(y * BRICK[1], (y + 1) * BRICK[1]),
                  slice(x * BRICK[2], (x + 1) * BRICK[2]))
            image[(slice(None), *at)] = np.frombuffer(b["image"], np.float32).reshape(2, *BRICK)
            mask[at] = np.frombuffer(b["mask"], np.uint8).reshape(BRICK)
            assert b["label"] == int(vid.split("_")[1])
        inside = tuple(slice(0, s) for s in shape)
        # Past the volume's edge the bricks are zeros.
        assert image.sum() == pytest.approx(image[(slice(None), *inside)].sum(), abs=1e-3)
        assert mask.sum() == mask[inside].sum()
        volumes[vid] = (image[(slice(None), *inside)], mask[inside], info)
    return volumes


def test_volumes_written_as_bricks_read_back_voxel_for_voxel(tmp_path):
    table = str(tmp_path / "bricked")
    shapes = [(19, 9, 7), (8, 16, 4), (5, 30, 11)]
    taken = []
    summary = voxlake.write_volumes(table, (volume(i, s) for i, s in enumerate(shapes)), brick=BRICK,
                                    progress=taken.append)
    assert taken[-1] == 3
    bricks = sum(np.prod([-(-s[a] // BRICK[a]) for a in range(3)]) for s in shapes)
    assert summary["rows"] == bricks
    got = read_back(table)
    assert sorted(got) == ["vol_0", "vol_1", "vol_2"]
    for i, shape in enumerate(shapes):
        want = volume(i, shape)
        image, mask, info = got[f"vol_{i}"]
        np.testing.assert_array_equal(image, want["image"])
        np.testing.assert_array_equal(mask, want["mask"])
        assert info["shape"] == list(shape) and info["spacing"] == [1.5, 0.7, 0.7]
        classes, counts = np.unique(want["mask"], return_counts=True)
        kept = info["classes"]["mask"]
        assert [(c["class"], c["count"]) for c in kept] == list(zip(classes.tolist(), counts.tolist()))
        for c in kept:
            assert len(c["coords"]) == min(c["count"], 1024)
            assert all(want["mask"][tuple(p)] == c["class"] for p in c["coords"])
    # voxlake's own loader streams the bricks as samples of their fields.
    seen = 0
    for batch in voxlake.Loader(table, batch_size=4):
        assert batch["image"].shape[1:] == (2, *BRICK) and batch["mask"].shape[1:] == BRICK
        assert all(v.startswith("vol_") for v in batch["volume"])
        seen += len(batch["id"])
    assert seen == bricks
    # Again with one more: only that one is written.
    again = voxlake.write_volumes(table, (volume(i, s) for i, s in enumerate([*shapes, (4, 4, 4)])),
                                  brick=BRICK, progress=False)
    assert again["rows"] == 1


def test_bad_volumes_are_refused_naming_the_volume_and_the_field(tmp_path):
    good = volume(0, (8, 8, 4))
    cases = [
        ({**volume(1, (8, 8, 4)), "mask": np.zeros((8, 8, 5), np.uint8)},
         "volume 'vol_1' field 'mask' covers \\(8, 8, 5\\) voxels, field 'image' \\(8, 8, 4\\)"),
        ({**volume(1, (8, 8, 4)), "image": np.zeros((3, 8, 8, 4), np.float32)},
         "volume 'vol_1' field 'image' is float32 \\[3, 8, 8, 4\\], the first volume's f32 \\(2, z, y, x\\)"),
        ({**volume(1, (8, 8, 4)), "extra": np.zeros((8, 8, 4))}, "volume 'vol_1' has fields \\['extra'\\]"),
    ]
    for n, (bad, message) in enumerate(cases):
        with pytest.raises(voxlake.ConfigError, match=message):
            voxlake.write_volumes(str(tmp_path / f"t{n}"), [good, bad], brick=BRICK, progress=False)
    with pytest.raises(voxlake.ConfigError, match="class field 'image' holds f32 in 2 channels"):
        voxlake.write_volumes(str(tmp_path / "c"), [good], brick=BRICK, class_fields=["image"], progress=False)
    with pytest.raises(voxlake.ConfigError, match="brick=\\(8, 8\\)"):
        voxlake.write_volumes(str(tmp_path / "b"), [good], brick=(8, 8), progress=False)  # type: ignore[arg-type]
    with pytest.raises(voxlake.ConfigError, match="has shape \\(8, 8\\)"):
        voxlake.write_volumes(str(tmp_path / "d"), [{"id": "v", "image": np.zeros((8, 8))}], progress=False)
