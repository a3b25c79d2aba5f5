"""voxlake with PyTorch as training scripts use it: errors that cross the DataLoader's worker
boundary, passes that advance the epoch by themselves (persistent workers included), exact
resume through torchdata's StatefulDataLoader and voxlake.torch.DataLoader in a new process,
len(), pickling, launchers' variables, one batch schema per table.

The table is test_package.py's: ROWS cubes in row groups of 8, made by `compact`.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import voxlake  # noqa: E402
from voxlake.torch import DataLoader, Dataset  # noqa: E402

from test_package import ROWS, TARGET, cube, number, table  # noqa: E402,F401

KW = dict(batch_size=8, shuffle=True, seed=5, rank=0, world_size=1)


def ids_of(batches) -> list:
    return [i for b in batches for i in b["id"]]


def every_row_once(ids, slack) -> None:
    """Every row of the table among `ids`, none more than once but the pad repeats."""
    assert {f"s{i:04}.npy" for i in range(ROWS)} <= {os.path.basename(i) for i in ids} | set(ids), ids
    assert 0 <= len(ids) - ROWS <= slack, len(ids)


def run_python(script: str, timeout: int = 120) -> str:
    """`script` in a new Python process; its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=timeout, cwd=os.path.dirname(__file__))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_exceptions_pickle_and_are_the_builtins_users_catch(table, tmp_path):
    for cls in (voxlake.VoxlakeError, voxlake.TableError, voxlake.NotFoundError,
                voxlake.StoreError, voxlake.ConfigError, voxlake.OptionError):
        e = pickle.loads(pickle.dumps(cls("what and why")))
        assert type(e) is cls and str(e) == "what and why"
        assert cls.__module__ == "voxlake"
    with pytest.raises(FileNotFoundError) as missing:
        next(iter(voxlake.Loader(str(tmp_path / "nope"))))
    assert isinstance(missing.value, voxlake.NotFoundError) and missing.value.transient is False
    assert "nothing at this location" in str(missing.value)
    again = pickle.loads(pickle.dumps(missing.value))
    assert type(again) is voxlake.NotFoundError and again.transient is False
    with pytest.raises(TypeError, match="unknown option"):
        voxlake.Loader(table, bach_size=3)
    with pytest.raises(ValueError, match="rank and world_size"):
        voxlake.Loader(table, rank=1)
    assert issubclass(voxlake.StoreError, OSError)


def broken_copy(table, tmp_path, how: str) -> str:
    """A copy of `table` with one of its data files corrupt (garbled in the middle) or gone."""
    copy = str(tmp_path / f"broken-{how}")
    shutil.copytree(table, copy)
    data = sorted(f for f in os.listdir(copy) if f.endswith(".parquet"))
    victim = os.path.join(copy, data[len(data) // 2])
    if how == "missing":
        os.remove(victim)
    else:
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            f.seek(size // 3)
            f.write(b"\xff" * (size // 3))
    return copy


@pytest.mark.parametrize("how", ["corrupt", "missing"])
@pytest.mark.parametrize("workers,context,persistent", [
    (0, None, False), (2, "fork", False), (2, "spawn", False), (2, "fork", True), (2, "spawn", True),
])
def test_an_error_in_a_worker_is_raised_in_the_main_process(table, tmp_path, how, workers, context, persistent):
    broken = broken_copy(table, tmp_path, how)
    ds = Dataset(broken, batch_size=4, rank=0, world_size=1, memory_budget=64 << 20)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context=context,
                                     persistent_workers=persistent, timeout=30 if workers else 0)
    expected = voxlake.NotFoundError if how == "missing" else voxlake.VoxlakeError
    with pytest.raises(expected) as caught:
        for _ in dl:
            pass
    assert ".parquet" in str(caught.value), caught.value


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_each_pass_reads_the_next_epoch_without_set_epoch(table, workers, persistent):
    ds = Dataset(table, **KW)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=persistent)
    first, second, third = ids_of(dl), ids_of(dl), ids_of(dl)
    for ids in (first, second, third):
        every_row_once(ids, max(workers, 1) - 1)
    assert first != second and second != third
    # set_epoch reaches persistent workers too: epoch 1 again.
    ds.set_epoch(1)
    assert ids_of(dl) == second
    if workers == 0:  # the Rust loader's epochs 0 and 1
        both = ids_of(voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, epochs=2))
        assert first + second == both


def test_a_loaders_passes_advance_the_epoch(table):
    both = ids_of(voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, epochs=2))
    loader = voxlake.Loader(table, batch_size=8, shuffle=True, seed=5)
    assert ids_of(loader) + ids_of(loader) == both
    loader.set_epoch(1)
    assert ids_of(loader) == both[ROWS:]
    with voxlake.Loader(table, batch_size=8) as held:
        next(iter(held))
    # Closed: its threads and budget freed; a pass starts again.
    assert len(ids_of(held)) == ROWS


def test_a_state_decides_the_epoch(table):
    """A state taken in epoch 2 of a 4-epoch run, loaded into a loader of 1 epoch: the rest of
    epoch 2, not an empty pass; then its state is the new position."""
    kw = dict(batch_size=8, shuffle=True, seed=9)
    whole = ids_of(voxlake.Loader(table, epochs=4, **kw))
    per_epoch = (ROWS + 7) // 8
    run = voxlake.Loader(table, epochs=4, **kw)
    it = iter(run)
    head = [i for _ in range(2 * per_epoch + 3) for i in next(it)["id"]]
    state = run.state_dict()
    assert state["epoch"] == 2
    resumed = voxlake.Loader(table, **kw)
    resumed.load_state_dict(state)
    rest = ids_of(resumed)
    assert head + rest == whole[:3 * ROWS]
    assert resumed.state_dict()["epoch"] == 3
    # With the run's own settings the run ends where it would have.
    again = voxlake.Loader(table, epochs=4, **kw)
    again.load_state_dict(state)
    assert head + ids_of(again) == whole


def take_then_state(dl, k):
    it = iter(dl)
    head = [i for _ in range(k) for i in next(it)["id"]]
    return head, dl.state_dict()


RESUME = """
import json, sys, torch
import voxlake
from voxlake.torch import DataLoader, Dataset
table, kind, workers, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
kw = dict(batch_size=8, shuffle=True, seed=5, rank=0, world_size=1)
if kind == "stateful":
    from torchdata.stateful_dataloader import StatefulDataLoader
    dl = StatefulDataLoader(Dataset(table, **kw), batch_size=None, num_workers=workers)
else:
    dl = DataLoader(table, num_workers=workers, **kw)
dl.load_state_dict(state)
rest = [i for b in dl for i in b["id"]]
following = [i for b in dl for i in b["id"]]
print(json.dumps([rest, following]))
"""


def resume_elsewhere(table, kind, workers, state):
    out = run_python(f"import sys; sys.argv = ['x'] + {[table, kind, str(workers), json.dumps(state)]!r}\n" + RESUME)
    return json.loads(out)


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly_in_a_new_process(table, workers):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    dl = stateful.StatefulDataLoader(Dataset(table, **KW), batch_size=None, num_workers=workers)
    whole = ids_of(dl)
    dl = stateful.StatefulDataLoader(Dataset(table, **KW), batch_size=None, num_workers=workers)
    head, state = take_then_state(dl, 5)
    rest, following = resume_elsewhere(table, "stateful", workers, state)
    assert head + rest == whole
    assert following != whole
    every_row_once(following, max(workers, 1) - 1)


@pytest.mark.parametrize("workers,then", [(0, 0), (2, 2), (4, 4), (2, 4), (4, 0), (0, 2)])
def test_voxlake_dataloader_resumes_exactly_in_a_new_process(table, workers, then):
    whole = ids_of(DataLoader(table, num_workers=workers, **KW))
    head, state = take_then_state(DataLoader(table, num_workers=workers, **KW), 5)
    json.dumps(state)
    rest, following = resume_elsewhere(table, "voxlake", then, state)
    if then == workers:
        assert head + rest == whole
    else:  # another number of workers: the rest of the epoch over them, every row once
        every_row_once(head + rest, max(workers, 1) + max(then, 1))
    every_row_once(following, max(then, 1) - 1)
    assert following != whole


def test_voxlake_dataloader_with_persistent_workers_resumes_mid_pass(table):
    dl = DataLoader(table, num_workers=2, persistent_workers=True, **KW)
    first = ids_of(dl)
    head, state = take_then_state(dl, 3)
    second_whole = ids_of(DataLoader(table, num_workers=2, start_epoch=1, **KW))
    rest, _ = resume_elsewhere(table, "voxlake", 2, state)
    assert head + rest == second_whole and second_whole != first


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("workers", [0, 2])
def test_len_is_the_batches_a_pass_yields(table, world, workers):
    for rank in range(world):
        dl = DataLoader(table, batch_size=8, rank=rank, world_size=world, num_workers=workers)
        assert len(dl) == len(list(dl)) > 0


def test_a_used_dataset_pickles_and_opens_nothing_until_iterated(table, tmp_path):
    ds = Dataset(str(tmp_path / "not-yet"), batch_size=8)  # nothing there: nothing opened
    repr(ds)
    ds = Dataset(table, **KW)
    first = ids_of(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert ids_of(copy) != first  # the copy goes on to the next epoch
    every_row_once(ids_of(ds), 0)


def test_lightnings_variables_without_rank(table, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    for name, value in {"WORLD_SIZE": "2", "LOCAL_RANK": "1", "NODE_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    ds = Dataset(table, batch_size=8)
    assert tuple(ds.placement())[:2] == (1, 2)
    mine = ids_of(ds)
    every_row_once(mine + ids_of(Dataset(table, batch_size=8, rank=0, world_size=2)), 1)


def test_labels_are_one_type_in_every_batch_of_a_table_with_null_labels(tmp_path):
    """Every third cube converted with a label, the others added later without: the labels
    stay an int64 array (a null as 0) with `label_valid` beside it in every batch."""
    src = tmp_path / "npy"
    src.mkdir()
    compact = os.path.join(TARGET, "debug", "compact")
    out = str(tmp_path / "t")
    for labelled in (True, False):
        for i in range(12):
            if (i % 3 == 0) == labelled:
                np.save(src / f"s{i:04}.npy", cube(i))
        labels = []
        if labelled:
            with open(tmp_path / "labels.csv", "w") as f:
                f.write("file,label\n" + "".join(f"s{i:04}.npy,{i % 2}\n" for i in range(0, 12, 3)))
            labels = ["--labels", str(tmp_path / "labels.csv")]
        subprocess.run([compact, "convert", str(src), out, "--row-group-rows", "4", *labels],
                       check=True, capture_output=True)
    batches = list(voxlake.Loader(out, batch_size=3, shuffle=True, seed=1))
    assert {tuple(sorted(b)) for b in batches} == {("id", "label", "label_valid", "tensor")}
    assert sum(len(b["id"]) for b in batches) == 12
    for b in batches:
        assert b["label"].dtype == np.int64 and b["label_valid"].dtype == np.bool_
        for sample_id, label, valid in zip(b["id"], b["label"], b["label_valid"]):
            n = number(sample_id)
            assert bool(valid) == (n % 3 == 0) and int(label) == (n % 2 if n % 3 == 0 else 0)
    ds_batch = next(iter(Dataset(out, batch_size=12, rank=0, world_size=1)))
    assert ds_batch["label"].dtype == torch.int64 and ds_batch["label_valid"].dtype == torch.bool
