"""voxlake.torch.MapDataset as training scripts drive it: every sample equal to pyarrow's row
for its id (each field type), the samplers (DistributedSampler, WeightedRandomSampler, a
BatchSampler) under 0 and 2 workers, fork and spawn, StatefulDataLoader's resume, and the errors
(an index out of range, an id the version lacks, a corrupt row in a worker).

The table is test_package.py's: ROWS cubes in row groups of 8, made by `compact`.
"""

import os
import pickle
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import voxlake  # noqa: E402
from voxlake.torch import MapDataset  # noqa: E402

from test_package import ROWS, cube, number, table  # noqa: E402,F401
from test_torch import broken_copy, prompt_teardown  # noqa: E402,F401


def arrow_rows(table_path: str) -> dict:
    """Each row of the table's latest version by id, as pyarrow reads it (through deltalake)."""
    import deltalake
    t = deltalake.DeltaTable(table_path).to_pyarrow_table()
    return {row["id"]: row for row in t.to_pylist()}


def test_every_sample_is_pyarrow_s_row_for_its_id(tmp_path):
    """Fields of several types (float32 volume, uint8 mask, float64 and int16 vectors, text):
    ds[i], __getitems__ and by_id give pyarrow's values for the id, at a few hundred random
    indices."""
    rng = np.random.default_rng(11)
    samples = [{
        "id": f"v{i:04}",
        "label": i % 3,
        "x": rng.standard_normal((4, 3, 2)).astype(np.float32),
        "mask": (rng.random((4, 3)) > 0.5).astype(np.uint8),
        "porosity": np.array([i / 10], np.float64),
        "counts": rng.integers(-500, 500, 5).astype(np.int16),
        "site": f"well-{i % 7}",
    } for i in range(300)]
    table_path = str(tmp_path / "fields")
    voxlake.write(table_path, samples, progress=False)
    rows = arrow_rows(table_path)
    ds = MapDataset(table_path)
    assert len(ds) == 300 == len(rows)
    assert sorted(ds.ids()) == sorted(rows)
    dtypes = {"x": np.float32, "mask": np.uint8, "porosity": np.float64, "counts": np.int16}

    def check(sample):
        row = rows[sample["id"]]
        assert sample["label"] == row["label"]
        assert sample["site"] == row["site"]
        for name, dtype in dtypes.items():
            want = np.frombuffer(row[name], dtype)
            assert np.array_equal(sample[name].numpy().reshape(-1), want), (sample["id"], name)

    picks = random.Random(3).choices(range(len(ds)), k=200)
    for i in picks[:100]:
        sample = ds[i]
        assert sample["id"] == ds.ids()[i]
        assert isinstance(sample["x"], torch.Tensor) and sample["x"].shape == (4, 3, 2)
        check(sample)
    batch = ds.__getitems__(picks[100:])
    assert [s["id"] for s in batch] == [ds.ids()[i] for i in picks[100:]]
    for sample in batch:
        check(sample)
    check(ds.by_id("v0123"))
    assert ds.index_of("v0123") == ds.ids().index("v0123")
    stats = ds.stats()
    assert stats["samples"] == 201 and stats["bytes_read"] > 0 and stats["version"] == ds.version


def test_one_sample_reads_its_row_group_only(table):
    ds = MapDataset(table)
    first = ds[0]
    assert np.array_equal(first["tensor"].numpy(), cube(number(first["id"])))
    one = ds.stats()
    assert one["row_groups"] == 1
    ds[len(ds) - 1]
    assert ds.stats()["row_groups"] == 2


def test_errors_name_the_index_the_id_and_the_version(table):
    ds = MapDataset(table)
    with pytest.raises(IndexError, match=f"index {ROWS} is outside 0..{ROWS}"):
        ds[ROWS]
    with pytest.raises(IndexError):
        ds[-1]
    with pytest.raises(IndexError):
        ds.__getitems__([0, ROWS + 5])
    with pytest.raises(voxlake.NotFoundError, match="'nope.npy'.*version") as missing:
        ds.by_id("nope.npy")
    assert isinstance(missing.value, FileNotFoundError)
    with pytest.raises(voxlake.ConfigError, match="shuffle"):
        MapDataset(table, shuffle=True)
    with pytest.raises(TypeError):
        ds["0"]


def test_the_version_is_pinned_when_the_dataset_is_made(table, tmp_path):
    import shutil
    copy = str(tmp_path / "grows")
    shutil.copytree(table, copy)
    ds = MapDataset(copy)
    version = ds.version
    voxlake.write(copy, [{"id": "late", "label": 1, "tensor": cube(999)}], progress=False)
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == ROWS and again.version == version
    assert again[ROWS - 1]["id"] in again.ids() and "late" not in again.ids()
    assert len(MapDataset(copy)) == ROWS + 1


def every_id(batches) -> list:
    return [i for b in batches for i in b["id"]]


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_distributed_sampler_ranks_read_every_sample_once(table, workers, context):
    ds = MapDataset(table)
    ds[0]  # a lookup open in the parent: a fork closes it first
    seen = []
    for rank in range(2):
        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True,
                                                      seed=4, drop_last=False)
        sampler.set_epoch(1)
        dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=workers,
                                         multiprocessing_context=context, timeout=60 if workers else 0)
        for b in dl:
            assert b["tensor"].shape[1:] == cube(0).shape
            for row, sample_id in zip(b["tensor"], b["id"]):
                assert np.array_equal(row.numpy(), cube(number(sample_id)))
            seen.extend(b["id"])
        assert set(sampler) <= set(range(ROWS))
    # DistributedSampler pads the ranks to equal lengths by repeating the first indices.
    assert set(seen) == set(ds.ids()) and len(seen) == ROWS + 1
    assert ds[1]["id"] == ds.ids()[1]  # the parent reads again after the workers forked


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_weighted_random_sampler_draws_by_the_weights(table, workers, context):
    ds = MapDataset(table)
    weights = [0.0 if number(i) % 2 else 1.0 for i in ds.ids()]  # the even cubes only
    sampler = torch.utils.data.WeightedRandomSampler(weights, num_samples=64, replacement=True,
                                                     generator=torch.Generator().manual_seed(1))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, sampler=sampler, num_workers=workers,
                                     multiprocessing_context=context, persistent_workers=bool(workers))
    for _ in range(2):
        batches = list(dl)
        drawn = every_id(batches)
        assert len(drawn) == 64 and all(number(i) % 2 == 0 for i in drawn)
        assert all((b["label"] == 0).all() for b in batches)


def test_a_batch_sampler_reads_each_batch_in_one_take(table):
    ds = MapDataset(table)
    batches = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(ds), batch_size=10,
                                            drop_last=False)
    dl = torch.utils.data.DataLoader(ds, batch_sampler=batches)
    got = list(dl)
    assert every_id(got) == ds.ids()
    assert ds.stats()["batches"] == len(got) == (ROWS + 9) // 10
    # Batches by a list of indices, handed out as read (no collate): batch_size=None.
    dl = torch.utils.data.DataLoader(ds, batch_size=None, sampler=batches)
    again = list(dl)
    assert every_id(again) == ds.ids()
    for a, b in zip(got, again):
        assert torch.equal(a["tensor"], b["tensor"]) and torch.equal(a["label"], b["label"])
    assert ds[np.array([3, 1])]["id"] == [ds.ids()[3], ds.ids()[1]]
    with pytest.raises(IndexError):
        ds[[]]


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_hands_on_each_take_as_read(table, workers):
    """collate_fn=voxlake.torch.collate: what default_collate makes of a take's samples, value
    for value, without stacking a copy (the batch's own memory); a list of samples changed
    since the take, or any other list, goes to default_collate."""
    from torch.utils.data import DataLoader, default_collate

    from voxlake.torch import Samples, collate

    ds = MapDataset(table)
    samples = ds.__getitems__([5, 1, 9, 1])
    assert isinstance(samples, Samples)
    got, want = collate(samples), default_collate(list(samples))
    ids = ds.ids()
    assert list(got) == list(want) and got["id"] == want["id"] == [ids[i] for i in (5, 1, 9, 1)]
    for name in ("tensor", "label"):
        assert got[name].dtype == want[name].dtype and torch.equal(got[name], want[name]), name
    assert got["tensor"].data_ptr() == samples[0]["tensor"].data_ptr(), "no copy"
    samples[0] = samples[2]
    changed = collate(samples)
    assert changed["id"][0] == ids[9] and changed["tensor"].data_ptr() != samples[0]["tensor"].data_ptr()
    assert collate([{"x": torch.zeros(2)}] * 3)["x"].shape == (3, 2)
    replaced = ds.__getitems__([2, 3])
    replaced[1]["tensor"] = torch.zeros_like(replaced[1]["tensor"])
    assert collate(replaced)["tensor"][1].abs().sum() == 0, "a value replaced in a sample is seen"

    order = list(range(ROWS))
    random.Random(3).shuffle(order)
    fast = DataLoader(ds, batch_size=8, sampler=order, collate_fn=collate, num_workers=workers)
    plain = DataLoader(ds, batch_size=8, sampler=order, num_workers=workers)
    for a, b in zip(fast, plain, strict=True):
        assert a["id"] == b["id"] and torch.equal(a["tensor"], b["tensor"]) and torch.equal(a["label"], b["label"])


def test_stateful_dataloader_resumes_the_sampler_exactly(table):
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    ds = MapDataset(table)

    def loader():
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(9))
        return tdl.StatefulDataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)

    whole = every_id(loader())
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    del it
    again = loader()
    again.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert every_id(head) + every_id(again) == whole


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_corrupt_row_in_a_worker_is_raised_in_the_main_process(table, tmp_path, context, prompt_teardown):
    broken = broken_copy(table, tmp_path, "flipped")
    ds = MapDataset(broken)
    dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context=context, timeout=60)
    with pytest.raises(voxlake.VoxlakeError) as caught:
        for _ in dl:
            pass
    assert "CRC-32" in str(caught.value) and ".parquet" in str(caught.value), caught.value


def test_transforms_are_seeded_by_the_seed_the_epoch_and_the_id(table):
    kw = dict(seed=3, transforms=[("flip", {"axes": [0], "p": 0.5})])
    a, b = MapDataset(table, **kw), MapDataset(table, **kw)
    first = [a[i]["tensor"] for i in range(16)]
    assert all(torch.equal(x, b[i]["tensor"]) for i, x in enumerate(first))
    assert any(not torch.equal(x, torch.from_numpy(cube(number(a.ids()[i])))) for i, x in enumerate(first))
    b.set_epoch(1)
    assert any(not torch.equal(x, b[i]["tensor"]) for i, x in enumerate(first))


def test_show_is_the_picture_compact_draws(table, tmp_path):
    """voxlake.show(table, id): the (height, width, 3) picture, the same PNG as
    `compact inspect --row ID --png`; an id the version lacks is a NotFoundError."""
    import subprocess
    from test_package import TARGET
    sample_id = MapDataset(table).ids()[5]
    image = voxlake.show(table, sample_id)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert (image == 235).all(axis=2).any(), "the title's ink"
    png = tmp_path / "row.png"
    subprocess.run([os.path.join(TARGET, "debug", "compact"), "inspect", table, "--row", sample_id,
                    "--png", str(png)], check=True, capture_output=True)
    width, height, rgb, encoded = voxlake._voxlake.picture(table, sample_id)
    assert png.read_bytes() == encoded and (height, width, 3) == image.shape
    assert np.array_equal(np.frombuffer(rgb, np.uint8).reshape(image.shape), image)
    with pytest.raises(voxlake.NotFoundError, match="nope"):
        voxlake.show(table, "nope")


def test_a_split_is_the_streaming_split_s_rows_alone(table):
    splits = {"train": 0.8, "val": 0.2}
    train = MapDataset(table, split="train", splits=splits)
    val = MapDataset(table, split="val", splits=splits)
    assert len(train) + len(val) == ROWS and 0 < len(val) < len(train)
    assert set(train.ids()) | set(val.ids()) == set(MapDataset(table).ids())
    streamed = [i for b in voxlake.Loader(table, batch_size=8, split="val", splits=splits) for i in b["id"]]
    assert sorted(streamed) == sorted(val.ids())
    assert [val[i]["id"] for i in range(len(val))] == val.ids()
    with pytest.raises(IndexError):
        val[len(val)]
    with pytest.raises(voxlake.NotFoundError):
        val.by_id(train.ids()[0])
    assert val.index_of(val.ids()[3]) == 3
    with pytest.raises(voxlake.ConfigError, match="balance"):
        MapDataset(table, balance=True)
