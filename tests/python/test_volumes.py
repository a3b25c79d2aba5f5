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
            assert b["label"] == int(vid.split("_")[1].split(".")[0])
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
    assert again["rows"] == 1 and again["already_present"] == bricks


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


def crop(array, origin, size, pad):
    """numpy's crop of the last three axes of ``array`` at ``origin``, zero- or edge-padded."""
    spatial = array.shape[-3:]
    lo = [max(0, -o) for o in origin]
    hi = [min(s, sp - o) for s, sp, o in zip(size, spatial, origin)]
    inside = array[(..., *[slice(o + a, o + b) for o, a, b in zip(origin, lo, hi)])]
    widths = [(0, 0)] * (array.ndim - 3) + [(a, s - b) for a, b, s in zip(lo, hi, size)]
    return np.pad(inside, widths, mode="edge" if pad == "edge" else "constant")


class Patches:
    """A map-style dataset of given patches (what a patch sampler of one's own looks like)."""

    def __init__(self, ds, at, size):
        self.ds, self.at, self.size = ds, at, size

    def __len__(self):
        return len(self.at)

    def __getitem__(self, i):
        return self.ds.patches([self.at[i]], self.size, pad="edge")


def test_patches_of_a_bricked_table_equal_numpy_crops_under_dataloader_workers(tmp_path):
    """MapDataset.patches: patches of several volumes, zero- and edge-padded, equal numpy's
    crops (np.pad), in the main process and in two spawned DataLoader workers; a patch of one
    brick reads about one brick's bytes; bad asks are refused by name."""
    import torch.utils.data
    from voxlake.torch import MapDataset

    table = str(tmp_path / "bricked")
    shapes = [(19, 9, 7), (40, 40, 16)]
    voxlake.write_volumes(table, (volume(i, s) for i, s in enumerate(shapes)), brick=BRICK, progress=False)
    ds = MapDataset(table)
    listed = ds.volumes()
    assert [v["id"] for v in listed] == ["vol_0", "vol_1"] and listed[1]["shape"] == [40, 40, 16]
    rng = np.random.default_rng(3)
    size = (6, 5, 7)
    for pad in ("zero", "edge", "none"):
        at = []
        for k in range(10):
            v = k % 2
            if pad == "none":
                origin = [int(rng.integers(0, s - p + 1)) for s, p in zip(shapes[v], size)]
            else:
                origin = [int(rng.integers(-p + 1, s)) for s, p in zip(shapes[v], size)]
            at.append((v, origin))
        batch = ds.patches(at, size, pad=pad)
        assert batch["image"].shape == (10, 2, *size) and batch["mask"].shape == (10, *size)
        for k, (v, origin) in enumerate(at):
            want = volume(v, shapes[v])
            np.testing.assert_array_equal(batch["image"][k].numpy(), crop(want["image"], origin, size, pad))
            np.testing.assert_array_equal(batch["mask"][k].numpy(), crop(want["mask"], origin, size, pad))
            assert batch["origin"][k].tolist() == origin and batch["id"][k] == f"vol_{v}"
            assert batch["label"][k].item() == v
    # One brick's patch of the larger volume: about one brick read (its 100 bricks untouched).
    fresh = MapDataset(table)
    before = fresh.stats()["bytes_read"]
    fresh.patches([(1, (8, 16, 4))], BRICK, pad="none")
    brick_bytes = np.prod(BRICK) * (2 * 4 + 1)
    read = fresh.stats()["bytes_read"] - before
    assert brick_bytes <= read < 2 * brick_bytes, read
    # The same patches from spawned workers: each opens its own lookup.
    at = [(1, (30, -3, 12)), (0, (15, 4, 3)), (1, (0, 0, 0))]
    loader = torch.utils.data.DataLoader(Patches(ds, at, size), batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    for (v, origin), batch in zip(at, loader):
        np.testing.assert_array_equal(batch["image"][0].numpy(), crop(volume(v, shapes[v])["image"], origin, size, "edge"))
    with pytest.raises(voxlake.ConfigError, match="reaches past the edge of volume 'vol_0'"):
        ds.patches([(0, (15, 0, 0))], (8, 8, 8), pad="none")
    with pytest.raises(voxlake.ConfigError, match="no volume #5: the table has 2"):
        ds.patches([(5, (0, 0, 0))], size)
    with pytest.raises(voxlake.ConfigError, match="pad=\"mirror\""):
        ds.patches([(0, (0, 0, 0))], size, pad="mirror")


def test_a_volume_missing_a_brick_is_refused_and_one_without_its_info_left_out(tmp_path, caplog):
    """Bricks deleted by deltalake-python: a volume short of a brick is a TableError naming it
    and its bricks; a volume whose last brick (its info) is gone, as a writer stopped mid-volume
    leaves it, is left out with a warning naming it."""
    from deltalake import DeltaTable
    from voxlake.torch import MapDataset

    shape = (16, 8, 8)  # 2×1×2 bricks
    for n, (deleted, outcome) in enumerate([("vol_0#1", "refused"), ("vol_1#3", "left out")]):
        table = str(tmp_path / f"t{n}")
        voxlake.write_volumes(table, (volume(i, shape) for i in range(3)), brick=BRICK, progress=False)
        DeltaTable(table).delete(f"id = '{deleted}'")
        ds = MapDataset(table)
        caplog.clear()
        if outcome == "refused":
            with pytest.raises(voxlake.TableError, match=r"volume 'vol_0' of \[16, 8, 8\] voxels takes 4 bricks of "
                                                         r"\[8, 8, 4\]; the scan holds 3"):
                ds.volumes()
            continue
        assert [v["id"] for v in ds.volumes()] == ["vol_0", "vol_2"]
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("left out" in m and "vol_1" in m for m in said), said


def test_compact_converts_npy_volumes_into_bricks_and_inspect_shows_them(tmp_path):
    """compact convert --brick: a folder per field of .npy volumes (float64 images converted
    to float32 with --dtype, a Fortran-order mask), labels from a CSV; the bricks equal what
    write_volumes makes of the same volumes; a re-run converts nothing; inspect lists the
    volumes and their classes (text and --json); a 2-D array is refused naming it."""
    import os
    import subprocess
    import sys

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "target"))
    compact = os.path.join(target, "debug", "compact")
    src = tmp_path / "src"
    (src / "image").mkdir(parents=True)
    (src / "mask").mkdir()
    shapes = [(19, 9, 7), (8, 16, 4), (5, 30, 11)]
    for i, shape in enumerate(shapes):
        v = volume(i, shape)
        np.save(src / "image" / f"vol_{i}.npy", v["image"].astype(np.float64))
        np.save(src / "mask" / f"vol_{i}.npy", np.asfortranarray(v["mask"]))
    (tmp_path / "labels.csv").write_text("file,label\n" + "".join(f"vol_{i}.npy,{i}\n" for i in range(3)))
    table = str(tmp_path / "bricked")

    def convert(*extra):
        return subprocess.run([compact, "convert", str(src), table, "--fields", "image,mask", "--brick", "8,8,4",
                               "--dtype", "f32", "--labels", str(tmp_path / "labels.csv"), "--json", *extra],
                              capture_output=True, text=True, timeout=300)

    done = convert()
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rows"] == sum(np.prod([-(-s[a] // BRICK[a]) for a in range(3)]) for s in shapes)
    got = read_back(table)
    for i, shape in enumerate(shapes):
        image, mask, info = got[f"vol_{i}.npy"]
        want = volume(i, shape)
        np.testing.assert_array_equal(image, want["image"])
        np.testing.assert_array_equal(mask, want["mask"])
    # A converted volume's source is not read again (junk now: a read of it would fail).
    (src / "image" / "vol_0.npy").write_bytes(b"junk")
    again = convert()
    assert again.returncode == 0, again.stderr
    again = json.loads(again.stdout.strip().splitlines()[-1])
    # Nothing downloaded again: the volumes the table holds whole are left out before.
    assert (again["rows"], again["already_present"], again["bytes_read"]) == (0, summary["rows"], 0), again
    shown = subprocess.run([compact, "inspect", table], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "volumes   3 in bricks of [8, 8, 4], from [5, 9, 4] to [19, 30, 11]" in shown.stdout, shown.stdout
    assert "classes   mask: 0: " in shown.stdout and "3: 6 (" in shown.stdout, shown.stdout
    as_json = json.loads(subprocess.run([compact, "inspect", table, "--json"], capture_output=True, text=True,
                                        timeout=120).stdout)
    listed = {v["id"]: v for v in as_json["volumes"]["list"]}
    assert listed["vol_2.npy"]["shape"] == [5, 30, 11] and listed["vol_2.npy"]["label"] == 2
    assert listed["vol_0.npy"]["classes"]["mask"]["3"] == 2
    np.save(src / "image" / "vol_9.npy", np.zeros((4, 4), np.float32))
    np.save(src / "mask" / "vol_9.npy", np.zeros((4, 4), np.uint8))
    bad = convert()
    assert bad.returncode != 0 and "is not a volume: (z, y, x) or (channels, z, y, x)" in bad.stderr, bad.stderr
    assert "image/vol_9.npy" in bad.stderr, bad.stderr


def test_grid_patches_cover_a_volume_and_the_aggregator_puts_a_model_output_back(tmp_path):
    """MapDataset.grid: overlapping patches that cover the volume (the last at the edge); a
    model's outputs (here the image itself, times 2, and a 1-channel map) averaged back by
    GridAggregator equal the volume; an uncovered voxel and bad outputs are errors."""
    from voxlake.torch import GridAggregator, MapDataset

    table = str(tmp_path / "bricked")
    shape = (19, 30, 11)
    voxlake.write_volumes(table, [volume(0, shape)], brick=BRICK, progress=False)
    ds = MapDataset(table)
    size, overlap = (8, 12, 6), (2, 4, 3)
    at = ds.grid(0, size, overlap)
    starts = [sorted({o[a] for _, o in at}) for a in range(3)]
    assert starts == [[0, 6, 11], [0, 8, 16, 18], [0, 3, 5]]
    image = volume(0, shape)["image"]
    doubled, single = GridAggregator(shape), GridAggregator(shape)
    for k in range(0, len(at), 7):
        batch = ds.patches(at[k:k + 7], size, pad="none")
        doubled.add(batch["image"] * 2, batch["origin"])
        single.add(batch["image"][:, 0].numpy(), batch["origin"].numpy())
    np.testing.assert_allclose(doubled.result().numpy(), image * 2, rtol=1e-6)
    got = single.result()
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, image[0], rtol=1e-6)
    partial = GridAggregator(shape)
    batch = ds.patches(at[:3], size, pad="none")
    partial.add(batch["image"], batch["origin"])
    with pytest.raises(ValueError, match="voxels of \\(19, 30, 11\\) are in no patch added"):
        partial.result()
    with pytest.raises(ValueError, match="outputs of \\(3, 2, 6\\) and origins"):
        partial.add(batch["image"][:, :, 0, 0], batch["origin"])
    with pytest.raises(voxlake.ConfigError, match="overlap"):
        ds.grid(0, size, (8, 0, 0))


def test_a_loader_of_patches_under_dataloader_workers_resumes_exactly(tmp_path):
    """voxlake.Loader and voxlake.torch.DataLoader with patch=: every patch equals numpy's crop
    at its origin, about half the centres on the rare class asked for, two workers together
    give one process's patches, and state_dict mid-epoch resumes with the very next batches."""
    from voxlake.torch import DataLoader

    table = str(tmp_path / "bricked")
    shapes = [(19, 9, 7), (8, 16, 6), (12, 12, 12), (10, 20, 9)]
    voxlake.write_volumes(table, (volume(i, s) for i, s in enumerate(shapes)), brick=BRICK, progress=False)
    options = dict(patch=(6, 5, 4), patches_per_volume=30, label_field="mask", label_probabilities={0: 1, 3: 1},
                   pad="edge", batch_size=4, shuffle=True, seed=5, epochs=1)
    batches = list(voxlake.Loader(table, **options))
    assert len(batches) == 30 and all(b["image"].shape == (4, 2, 6, 5, 4) for b in batches)
    centres_on_3 = 0
    for b in batches:
        for k, vid in enumerate(b["id"]):
            i = int(vid.split("_")[1])
            want = volume(i, shapes[i])
            origin = b["origin"][k].tolist()
            np.testing.assert_array_equal(b["image"][k], crop(want["image"], origin, (6, 5, 4), "edge"))
            np.testing.assert_array_equal(b["mask"][k], crop(want["mask"], origin, (6, 5, 4), "edge"))
            centre = [o + s // 2 for o, s in zip(origin, (6, 5, 4))]
            centres_on_3 += int(want["mask"][tuple(min(max(c, 0), n - 1) for c, n in zip(centre, shapes[i]))] == 3)
    assert 35 <= centres_on_3 <= 85, centres_on_3  # of 120, half asked
    seen = sorted((v, tuple(o)) for b in batches for v, o in zip(b["id"], b["origin"].tolist()))
    # Two workers: together the same patches.
    loader = DataLoader(table, num_workers=2, **options)
    assert len(loader) == 30
    got = sorted((v, tuple(o)) for b in loader for v, o in zip(b["id"], b["origin"].tolist()))
    assert got == seen
    # Resume after 11 batches: the next batches are the uninterrupted run's.
    first = voxlake.Loader(table, **options)
    it = iter(first)
    for _ in range(11):
        next(it)
    state = first.state_dict()
    resumed = voxlake.Loader(table, **options)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == 19
    for a, b in zip(rest, batches[11:]):
        assert a["id"] == b["id"]
        np.testing.assert_array_equal(a["origin"], b["origin"])
    # A split of volumes: train and val patches come from disjoint volumes, together all.
    split = dict(patch=(4, 4, 4), patches_per_volume=2, batch_size=2, epochs=1, splits={"train": 0.5, "val": 0.5})
    train = {v for b in voxlake.Loader(table, split="train", **split) for v in b["id"]}
    val = {v for b in voxlake.Loader(table, split="val", **split) for v in b["id"]}
    assert not train & val and len(train | val) == len(shapes)
    with pytest.raises(voxlake.ConfigError, match="options pad: they go with patch"):
        voxlake.Loader(table, pad="edge")
    with pytest.raises(voxlake.ConfigError, match="class 9 is in no volume's 'mask'"):
        next(iter(voxlake.Loader(table, patch=(4, 4, 4), label_field="mask", label_probabilities={9: 1.0})))


def test_a_grid_loader_and_the_aggregator_rebuild_each_volume(tmp_path):
    """sampler="grid": every patch of every volume's grid streamed (two workers), the outputs
    of an identity model averaged back per volume equal the volumes."""
    from voxlake.torch import DataLoader, GridAggregator

    table = str(tmp_path / "bricked")
    shapes = [(19, 9, 7), (8, 16, 6), (12, 12, 12)]
    voxlake.write_volumes(table, (volume(i, s) for i, s in enumerate(shapes)), brick=BRICK, progress=False)
    loader = DataLoader(table, patch=(6, 5, 4), sampler="grid", overlap=(2, 1, 1), batch_size=4, epochs=1,
                        num_workers=2)
    aggregators = {f"vol_{i}": GridAggregator(s) for i, s in enumerate(shapes)}
    for batch in loader:
        for k, vid in enumerate(batch["id"]):
            aggregators[vid].add(batch["image"][k:k + 1], batch["origin"][k:k + 1])
    for i, shape in enumerate(shapes):
        np.testing.assert_allclose(aggregators[f"vol_{i}"].result().numpy(), volume(i, shape)["image"], rtol=1e-6)
    with pytest.raises(voxlake.ConfigError, match="option overlap: it goes with sampler=\"grid\""):
        next(iter(voxlake.Loader(table, patch=(6, 5, 4), overlap=(1, 1, 1))))
    with pytest.raises(voxlake.ConfigError, match="a grid takes every patch"):
        next(iter(voxlake.Loader(table, patch=(6, 5, 4), sampler="grid", label_field="mask",
                                 label_probabilities={3: 1.0})))
