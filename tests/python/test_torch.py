"""voxlake with PyTorch as training scripts use it: errors that cross the DataLoader's worker
boundary, passes that advance the epoch by themselves (persistent workers included), exact
resume through torchdata's StatefulDataLoader and voxlake.torch.DataLoader in a new process,
len(), pickling, launchers' variables, one batch schema per table.

The table is test_package.py's: ROWS cubes in row groups of 8, made by `compact`.
"""

import gc
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import voxlake  # noqa: E402
from voxlake.torch import DataLoader, Dataset  # noqa: E402

from test_package import ROWS, TARGET, cube, failing_batch_transform, number, offset_by_batch, table  # noqa: E402,F401

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


@pytest.fixture
def prompt_teardown(monkeypatch):
    """A DataLoader whose worker raised shuts its workers down after waiting
    MP_STATUS_CHECK_INTERVAL (5 s) for each, whatever the dataset (a plain IterableDataset
    raising the same way: 10.4 s for two workers, 1.3 s at 0.5 s; the 19 tests that raise in
    workers 54 s at 0.5, 40 s at 0.1); and its iterator outlives the test, held by the
    re-raised exception's traceback cycle, until a later collection makes another test wait.
    Collected here, inside a shorter wait."""
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.1)
    yield
    gc.collect()


def broken_copy(table, tmp_path, how: str) -> str:
    """A copy of `table` with one of its data files corrupt (garbled in the middle, or one bit of
    a tensor flipped, its pages intact: only the row's checksum tells) or gone."""
    copy = str(tmp_path / f"broken-{how}")
    shutil.copytree(table, copy)
    data = sorted(f for f in os.listdir(copy) if f.endswith(".parquet"))
    victim = os.path.join(copy, data[len(data) // 2])
    if how == "missing":
        os.remove(victim)
    elif how == "flipped":
        import pyarrow.parquet as pq
        group = pq.ParquetFile(victim).metadata.row_group(0)
        chunk = next(group.column(i) for i in range(group.num_columns)
                     if group.column(i).path_in_schema == "tensor")
        at = chunk.data_page_offset + chunk.total_compressed_size // 2
        with open(victim, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0x10]))
    else:
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            f.seek(size // 3)
            f.write(b"\xff" * (size // 3))
    return copy


@pytest.mark.parametrize("how", ["corrupt", "flipped", "missing"])
@pytest.mark.parametrize("workers,context,persistent", [
    (0, None, False), (2, "fork", False), (2, "spawn", False), (2, "fork", True), (2, "spawn", True),
])
def test_an_error_in_a_worker_is_raised_in_the_main_process(table, tmp_path, how, workers, context, persistent,
                                                           prompt_teardown):
    broken = broken_copy(table, tmp_path, how)
    ds = Dataset(broken, batch_size=4, rank=0, world_size=1, memory_budget=64 << 20)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context=context,
                                     persistent_workers=persistent, timeout=30 if workers else 0)
    expected = voxlake.NotFoundError if how == "missing" else voxlake.VoxlakeError
    with pytest.raises(expected) as caught:
        for _ in dl:
            pass
    assert ".parquet" in str(caught.value), caught.value
    if how == "flipped":
        assert "CRC-32" in str(caught.value), caught.value


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_batch_transform_runs_in_each_worker(table, context):
    """batch_transform= reaches DataLoader workers (pickled under spawn): every row once, each
    batch transformed once."""
    ds = Dataset(table, batch_transform=offset_by_batch, **KW)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    ids = []
    for b in dl:
        for i, sample_id in enumerate(b["id"]):
            shift = np.asarray(b["tensor"][i]) - cube(number(sample_id))
            assert np.all(shift == shift.flat[0]) and shift.flat[0] >= 1, sample_id
        ids += b["id"]
    every_row_once(ids, 1)


def test_each_worker_writes_its_own_trace(table, tmp_path):
    """trace= under DataLoader workers: each worker (a rank of its own to the loader) writes
    its own file, the rank before the extension."""
    ds = Dataset(table, trace=str(tmp_path / "trace.json"), trace_batches=2, **KW)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    ids = [i for b in dl for i in b["id"]]
    every_row_once(ids, 1)
    for worker in range(2):
        events = json.loads((tmp_path / f"trace.rank{worker}.json").read_text())
        assert sum(e["name"] == "assemble" and e["ph"] == "B" for e in events) >= 2, events


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_batch_transform_that_raises_in_a_worker_is_raised_in_the_main_process(table, context, prompt_teardown):
    ds = Dataset(table, batch_transform=failing_batch_transform, **KW)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context,
                                     timeout=30)
    with pytest.raises(voxlake.VoxlakeError, match="batch_transform raised ValueError: no augmentation for s0050"):
        for _ in dl:
            pass


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


def test_a_one_rank_runs_workers_read_one_version_and_warn_nothing(table):
    """Under a plain DataLoader the workers of a one-rank run are ranks of the loader: each
    resolved the latest version by itself, and warned that ranks may read different versions.
    Now the first to start resolves it for all (the dataset's shared words), the others wait
    for it and read it, and a resolver that fails leaves the next to try."""
    import multiprocessing

    from voxlake._passes import Passes

    fork = multiprocessing.get_context("fork")
    passes, calls, answers = Passes(0), fork.Value("i", 0), fork.Queue()

    def resolve():
        with calls.get_lock():
            calls.value += 1
        time.sleep(0.3)  # the others ask while it reads the log
        return [os.getpid(), 7]

    copies = [fork.Process(target=lambda: answers.put(passes.versions(resolve))) for _ in range(3)]
    for p in copies:
        p.start()
    agreed = [answers.get(timeout=30) for _ in copies]
    for p in copies:
        p.join(timeout=30)
    assert calls.value == 1 and agreed[0] == agreed[1] == agreed[2] and agreed[0][1] == 7, agreed
    assert passes.versions(lambda: [0]) == agreed[0]  # later passes read them too

    failing = Passes(0)
    with pytest.raises(RuntimeError, match="log unreadable"):
        failing.versions(lambda: (_ for _ in ()).throw(RuntimeError("log unreadable")))
    assert failing.versions(lambda: [3]) == [3]

    script = f"""
        import json, torch
        from voxlake.torch import Dataset
        ds = Dataset({table!r}, batch_size=8, shuffle=True, seed=5)
        for context in ("fork", "spawn"):
            dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                             multiprocessing_context=context)
            print(json.dumps([i for b in dl for i in b["id"]]))
        """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120, cwd=os.path.dirname(__file__))
    assert done.returncode == 0, done.stderr
    assert "different versions" not in done.stderr, done.stderr
    for line in done.stdout.splitlines():
        every_row_once(json.loads(line), slack=8)


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
sampling = json.loads(sys.argv[5])
if "class_weights" in sampling:  # JSON's keys are text
    sampling["class_weights"] = {int(k): w for k, w in sampling["class_weights"].items()}
kw = dict(batch_size=8, shuffle=True, seed=5, rank=0, world_size=1, **sampling)
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


def resume_elsewhere(table, kind, workers, state, **sampling):
    argv = [table, kind, str(workers), json.dumps(state), json.dumps(sampling)]
    out = run_python(f"import sys; sys.argv = ['x'] + {argv!r}\n" + RESUME)
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


WEIGHTED = dict(class_weights={"0": 1.0, "1": 3.0}, epoch_size=400)


def weighted_kw() -> dict:
    """The weighted spec with int labels (JSON keeps only str keys: the new process converts)."""
    return dict(class_weights={0: 1.0, 1: 3.0}, epoch_size=400)


@pytest.mark.parametrize("workers", [0, 2])
def test_weighted_draws_give_every_worker_its_share_and_len_follows_the_epoch_size(table, workers):
    dl = DataLoader(table, num_workers=workers, **KW, **weighted_kw())
    batches = list(dl)
    assert len(dl) == len(batches) == 50  # 400 draws in batches of 8
    labels = [int(l) for b in batches for l in b["label"]]
    ids = ids_of(batches)
    assert len(ids) == 400 and len(set(ids)) < 103  # with replacement: repeats, not every row
    assert all(number(i) % 2 == l for i, l in zip(ids, labels))
    # Label 1 holds 3 × 51 of the 3 × 51 + 52 weight: 298 or 299 of the 400 draws.
    assert sum(labels) in (298, 299), sum(labels)
    if workers:
        # Each worker's batches take turns: every worker's draws hold its share of label 1.
        for w in range(workers):
            mine = [int(l) for b in batches[w::workers] for l in b["label"]]
            assert abs(sum(mine) - 0.746 * len(mine)) <= 2, (w, sum(mine), len(mine))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_sampling_error_met_in_the_workers_is_raised_in_the_main_process(table, context, prompt_teardown):
    # The options are sound; the table has no such column: each worker's build says so.
    ds = Dataset(table, batch_size=8, rank=0, world_size=1, weight_column="nope")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    with pytest.raises(voxlake.ConfigError, match="weight_column: no column 'nope'"):
        next(iter(dl))
    # voxlake's DataLoader looks at the table before its workers start: the same error, at once.
    with pytest.raises(voxlake.ConfigError, match="weight_column: no column 'nope'"):
        len(DataLoader(table, batch_size=8, rank=0, world_size=1, weight_column="nope", num_workers=2))


@pytest.mark.parametrize("workers,then", [(2, 2), (0, 3)])
def test_weighted_draws_resume_exactly_in_a_new_process(table, workers, then):
    whole = ids_of(DataLoader(table, num_workers=workers, **KW, **weighted_kw()))
    head, state = take_then_state(DataLoader(table, num_workers=workers, **KW, **weighted_kw()), 7)
    rest, _ = resume_elsewhere(table, "voxlake", then, state, **WEIGHTED)
    if then == workers:
        assert head + rest == whole
    else:  # the same draws over other workers (pad repeats aside)
        left = sorted(whole[len(head):])
        got = sorted(rest)
        for i in left:
            got.remove(i)
        assert len(got) < max(then, 1), got
    # A resume with another spec is refused, naming what differs.
    with pytest.raises(voxlake.ConfigError, match="differ in class_weights, balance"):
        dl = DataLoader(table, num_workers=0, **KW, balance="label", epoch_size=400)
        dl.load_state_dict(state)
        next(iter(dl))


# The names of the threads that may wait in tokio's lock table (a fork copies it with them in it).
TOKIO_THREADS = ("voxlake-io", "voxlake-loader", "voxlake-open", "voxlake-compact")
FORKS: list = []  # voxlake's count of such threads at each fork of this process, while RECORDING[0]
RECORDING = [False]
os.register_at_fork(before=lambda: FORKS.append(voxlake._voxlake.live_threads()) if RECORDING[0] else None)


def tokio_threads() -> list:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # ended meanwhile
            pass
    return sorted(n for n in names if n.startswith(TOKIO_THREADS))


def no_thread_left() -> None:
    """No thread a fork would inherit, by voxlake's count; and none listed by the kernel either
    once the last joined ones are through their exit (a moment, not the 10 s an idle blocking
    thread would wait)."""
    assert voxlake._voxlake.live_threads() == 0
    deadline = time.monotonic() + 2
    while tokio_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tokio_threads() == []


def test_workers_fork_from_a_process_with_no_loader_thread_left(table, tmp_path):
    """The threads of a loader closed, dropped or at the end of its run have ended when the
    call returns: the DataLoader's probe (len, version) before its workers fork, a main-process
    pass, a conversion (seen: a worker killed by SIGSEGV in the lock table the probe's idle
    threads were left in)."""
    FORKS.clear()
    RECORDING[0] = True
    try:
        for workers in (2, 0, 2):
            ids_of(DataLoader(table, num_workers=workers, **KW))
        no_thread_left()
        with voxlake.Loader(table, batch_size=8) as loader:
            next(iter(loader))
        no_thread_left()
        dropped = voxlake.Loader(table, batch_size=8)
        next(iter(dropped))
        del dropped
        no_thread_left()
        src = tmp_path / "npy"
        src.mkdir()
        np.save(src / "a.npy", cube(0))
        voxlake.convert(str(src), str(tmp_path / "t"), progress=False)
        no_thread_left()
        ids_of(DataLoader(table, num_workers=2, **KW))
    finally:
        RECORDING[0] = False
    assert FORKS == [0] * 6, FORKS


def test_a_pass_left_before_its_end_keeps_its_state_and_no_thread(table):
    """A loop that breaks out of a main-process pass frees its batches: the pass's threads end
    then (a validation DataLoader's forked workers next inherit none), its state stays."""
    whole = ids_of(DataLoader(table, num_workers=0, **KW))
    dl = DataLoader(table, num_workers=0, **KW)
    for taken, _ in enumerate(dl, 1):
        if taken == 3:
            break
    no_thread_left()
    state = dl.state_dict()
    every_row_once(ids_of(DataLoader(table, num_workers=2, **KW)), 1)
    again = DataLoader(table, num_workers=0, **KW)
    again.load_state_dict(state)
    assert ids_of(again) == whole[3 * 8:]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_forked_while_a_loader_runs_say_so(table, context):
    """A worker forked while a loader of the main process runs cannot run tokio safely: it
    raises, naming the cause and the way out, instead of crashing at random; spawned workers
    and the main process's loader go on."""
    running = voxlake.Loader(table, batch_size=8, epochs=1)
    first = next(iter(running))
    plain = torch.utils.data.DataLoader(Dataset(table, **KW), batch_size=None, num_workers=2,
                                        multiprocessing_context=context)
    ours = DataLoader(table, num_workers=2, multiprocessing_context=context, **KW)
    if context == "fork":
        with pytest.raises(voxlake.ConfigError, match="forked while .* of its parent's voxlake loaders ran"):
            list(plain)
        FORKS.clear()
        RECORDING[0] = True
        try:  # voxlake's DataLoader refuses before it forks any worker
            with pytest.raises(voxlake.ConfigError, match="thread.* of voxlake loaders run in this process"):
                ids_of(ours)
        finally:
            RECORDING[0] = False
        assert FORKS == []
    else:
        every_row_once([i for b in plain for i in b["id"]], 1)
        every_row_once(ids_of(ours), 1)
    rest = [i for b in running for i in b["id"]]
    assert len(first["id"]) + len(rest) == ROWS
    every_row_once(ids_of(DataLoader(table, num_workers=2, **KW)), 1)


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


DEFAULT_RUN = """
import sys, warnings
import torch.utils.data
from voxlake.torch import Dataset
warnings.simplefilter("always")
dataset = Dataset(sys.argv[1], **eval(sys.argv[2]))
print([sum(1 for _ in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2))
       for _ in range(2)])
"""


def test_defaults_warn_nothing_under_a_plain_dataloader(tmp_path):
    """Every option at its default, reference cubes (352 KiB: the default shuffle buffer does
    not fit a worker's share of the budget and is fitted), torch's DataLoader with two workers,
    two passes, in a process of its own (its workers' stderr is the process's): no warning, from
    Python's warnings or the workers' log lines (issue 61). A buffer the user asked for that
    does not fit is said."""
    subprocess.run([os.path.join(TARGET, "debug", "compact"), "demo", "--dir", str(tmp_path),
                    "--count", "200"], check=True, capture_output=True)

    def run(options):
        done = subprocess.run([sys.executable, "-c", DEFAULT_RUN, str(tmp_path / "table"), options],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        batches = eval(done.stdout.strip().splitlines()[-1])
        assert batches[0] == batches[1] > 0, done.stdout
        return done.stderr

    err = run("{}")
    assert "warn" not in err.lower() and "shuffle buffer" not in err, err
    asked = run("dict(shuffle=True, shuffle_buffer=100000)")
    assert "shuffle buffer reduced" in asked, asked


CAUTION_RUN = """
import logging, sys, warnings
import voxlake
if sys.argv[2] == "logging":
    logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(levelname)s %(message)s")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):  # said once a process
        next(iter(voxlake.Loader(sys.argv[1], batch_size=8, rank=0, world_size=2)))
print([str(w.message) for w in caught if w.category is voxlake.VoxlakeWarning])
"""


def test_rust_warnings_reach_logging_or_warnings(table, caplog):
    """A caution (ranks that may read different versions) reaches the user once a process,
    however many loaders say it: through the logger where a handler is configured (pytest's,
    `basicConfig`), else as a VoxlakeWarning and nothing on stderr (each run in a process of
    its own: pytest's process may have said it already)."""
    for configured in ("logging", "none"):
        done = subprocess.run([sys.executable, "-c", CAUTION_RUN, table, configured],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        warned = eval(done.stdout.strip().splitlines()[-1])
        said = [line for line in done.stderr.splitlines() if "ranks may read different versions" in line]
        if configured == "logging":
            assert warned == [] and len(said) == 1, done
            assert said[0].startswith("LOGGED voxlake.loader.open WARNING") and "world_size=2" in said[0], said
        else:
            assert len(warned) == 1 and "ranks may read different versions" in warned[0], done
            assert said == [], done.stderr
    # Debug events arrive once the logger asks for them.
    caplog.clear()
    caplog.set_level("DEBUG", logger="voxlake")
    voxlake.Loader(table, batch_size=8).version  # the level is read when a pass opens
    list(voxlake.Loader(table, batch_size=8))
    assert any(r.levelname == "DEBUG" and r.name.startswith("voxlake.") for r in caplog.records)


def test_bf16_fields_are_bfloat16_tensors(tmp_path):
    src = tmp_path / "npy"
    src.mkdir()
    for i in range(10):
        np.save(src / f"s{i:04}.npy", (cube(i) / 1000).astype(np.float32))
    out = str(tmp_path / "bf16")
    voxlake.convert(str(src), out, dtype="bf16", progress=False)
    loader = voxlake.Loader(out, batch_size=4)
    assert loader.fields() == [("tensor", "bf16")]
    raw = next(iter(loader))["tensor"]
    assert raw.dtype == np.uint16  # numpy has no bfloat16: the same bits
    seen = 0
    for b in Dataset(out, batch_size=4, rank=0, world_size=1):
        assert b["tensor"].dtype == torch.bfloat16
        for row, sample_id in zip(b["tensor"], b["id"]):
            expected = torch.from_numpy((cube(number(sample_id)) / 1000).astype(np.float32)).to(torch.bfloat16)
            assert torch.equal(row, expected)
            seen += 1
    assert seen == 10
    staged = next(voxlake.torch.to_device(Dataset(out, batch_size=4, rank=0, world_size=1), "cpu"))
    assert staged["tensor"].dtype == torch.bfloat16


LIGHTNING = """
import json, sys
import torch
import pytorch_lightning as pl
from voxlake.torch import DataLoader

table, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(24, 1)
        self.seen = []

    def training_step(self, batch, index):
        self.seen.append([self.current_epoch, list(batch["id"])])
        return self.layer(batch["tensor"].reshape(len(batch["id"]), -1)).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(table, batch_size=8, shuffle=True, seed=3, num_workers=workers)

    def on_train_end(self):
        with open(f"{out}.{self.global_rank}", "w") as f:
            json.dump(self.seen, f)


pl.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False,
           enable_checkpointing=False, enable_progress_bar=False,
           enable_model_summary=False).fit(Model())
"""


@pytest.mark.parametrize("workers", [0, 1])
def test_lightning_ddp_reads_every_row_once_an_epoch_in_a_new_order(table, tmp_path, workers):
    pytest.importorskip("pytorch_lightning")
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING)
    out = tmp_path / "seen"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, str(script), table, str(out), str(workers)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = [json.loads((tmp_path / f"seen.{rank}").read_text()) for rank in range(2)]
    assert len(seen[0]) == len(seen[1]) > 0  # the ranks step together
    orders = []
    for epoch in range(2):
        ids = [i for rank in seen for e, batch in rank if e == epoch for i in batch]
        every_row_once(ids, 2 * max(workers, 1) - 1)
        orders.append([i for e, batch in seen[0] if e == epoch for i in batch])
    assert orders[0] != orders[1]


LIGHTNING_RESUME = LIGHTNING.replace(
    "pl.Trainer(max_epochs=2,",
    """
class Stop(pl.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, index):
        if stop_at and trainer.global_step == stop_at:
            trainer.should_stop = True


stop_at, ckpt = int(sys.argv[4]), sys.argv[5]
pl.Trainer(max_epochs=2, callbacks=[Stop(), pl.callbacks.ModelCheckpoint(
               dirpath=out + ".ckpt", every_n_train_steps=3, save_top_k=-1)],""",
).replace("enable_checkpointing=False, ", "").replace(".fit(Model())", ".fit(Model(), ckpt_path=ckpt or None)")


def test_lightning_resumes_a_mid_epoch_checkpoint_exactly(table, tmp_path):
    pytest.importorskip("pytorch_lightning")
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING_RESUME)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}

    def fit(name, stop_at, ckpt=""):
        done = subprocess.run([sys.executable, str(script), table, str(tmp_path / name), "2", str(stop_at), ckpt],
                              capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-4000:]
        return [json.loads((tmp_path / f"{name}.{rank}").read_text()) for rank in range(2)]

    whole = fit("whole", 0)
    head = fit("head", 4)
    ckpt = [f for f in os.listdir(tmp_path / "head.ckpt") if "step=3" in f]
    assert ckpt, os.listdir(tmp_path / "head.ckpt")
    rest = fit("rest", 0, str(tmp_path / "head.ckpt" / ckpt[0]))
    for rank in range(2):
        assert head[rank][:3] + rest[rank] == whole[rank], rank


def test_a_state_loaded_into_a_dataset_is_read_once_by_workers(table):
    whole = ids_of(DataLoader(table, num_workers=2, **KW))
    head, state = take_then_state(DataLoader(table, num_workers=2, **KW), 5)
    ds = Dataset(table, **KW)
    ds.load_state_dict(state)
    assert ds.state_dict() == state  # not read yet
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert head + ids_of(dl) == whole
    second = ids_of(dl)  # the next epoch, whole: the state was read once
    every_row_once(second, 1)
    assert second != whole
    with pytest.raises(voxlake.ConfigError, match="StatefulDataLoader"):
        ds.state_dict()  # read by the workers: its state is theirs


def test_voxlake_dataloader_resumes_over_another_world_size(table):
    """Two ranks of 2 workers each stop after 5 batches; one rank of 3 workers takes the rest
    of the epoch: every row once over both."""
    head, states = [], []
    for rank in range(2):
        dl = DataLoader(table, num_workers=2, **dict(KW, rank=rank, world_size=2))
        ids, state = take_then_state(dl, 5)
        head += ids
        states.append(state)
    assert {k: v for k, v in states[0].items() if k != "rank"} == {k: v for k, v in states[1].items() if k != "rank"}
    rest, _ = resume_elsewhere(table, "voxlake", 3, states[1])
    every_row_once(head + rest, 2 * 2 + 3)


def add_cubes(src, table: str, numbers) -> None:
    """Cubes `numbers` saved under `src` and converted into `table` (a commit of them)."""
    os.makedirs(src, exist_ok=True)
    for i in numbers:
        np.save(os.path.join(src, f"s{i:04}.npy"), cube(i))
    voxlake.convert(str(src), table, progress=False)


AGREE = """
import json, os, sys, time
import torch.distributed as dist
from voxlake.torch import DataLoader

table, out, flags, rank = sys.argv[1], sys.argv[2], sys.argv[3], int(os.environ["RANK"])
# A file store: no port to race for.
dist.init_process_group("gloo", init_method="file://" + os.path.join(flags, "store"), rank=rank,
                        world_size=2)
dl = DataLoader(table, batch_size=8, shuffle=True, seed=2, num_workers=2)
if rank == 1:  # opens only once a commit landed after rank 0 opened
    while not os.path.exists(os.path.join(flags, "committed")):
        time.sleep(0.05)
print(len(dl), file=sys.stderr)
if rank == 0:
    open(os.path.join(flags, "opened"), "w").close()
ids = [i for b in dl for i in b["id"]]
json.dump(ids, open(f"{out}.{rank}", "w"))
dist.destroy_process_group()
"""


def test_ranks_agree_on_a_version_through_torch_distributed(tmp_path):
    """Rank 1 opens the table after a commit landed that rank 0 did not see: both read rank 0's
    version (broadcast over gloo), every row of it once, and nothing is written beside the
    table."""
    src, table = tmp_path / "npy", str(tmp_path / "t")
    add_cubes(src, table, range(40))
    flags = tmp_path / "flags"
    flags.mkdir()
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(script), table, str(tmp_path / "ids"), str(flags)],
                              env=dict(env, RANK=str(r)), stderr=subprocess.PIPE, text=True) for r in range(2)]
    deadline = time.monotonic() + 120
    while not (flags / "opened").exists():
        assert time.monotonic() < deadline and procs[0].poll() is None, procs[0].stderr.read()
        time.sleep(0.05)
    add_cubes(src, table, range(40, 60))  # a commit of 20 more rows
    (flags / "committed").touch()
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        errs.append(err)
        assert p.returncode == 0, err
    ids = [i for r in range(2) for i in json.loads((tmp_path / f"ids.{r}").read_text())]
    assert {number(i) for i in ids} == set(range(40)), (sorted({number(i) for i in ids}), errs)
    assert len(ids) - 40 <= 3
    assert not os.path.exists(os.path.join(table, "_voxlake"))


def test_a_resumed_run_reads_its_state_s_version_after_commits(tmp_path):
    """A checkpoint taken at version v, then a commit: the resumed DataLoader reads the rest of
    the epoch and the next one at v, as the Rust loader reads a state's version."""
    src, table = tmp_path / "npy", str(tmp_path / "t")
    add_cubes(src, table, range(30))
    head, state = take_then_state(DataLoader(table, num_workers=2, **KW), 2)
    add_cubes(src, table, range(30, 45))
    rest, following = resume_elsewhere(table, "voxlake", 2, state)
    assert {number(i) for i in head + rest} == set(range(30))
    assert {number(i) for i in following} == set(range(30))


MIXED = """
import json, sys, torch
import voxlake
from voxlake.torch import DataLoader
table, workers, state = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
sources = [voxlake.Source(table, filter="label = 0", proportion=0.75),
           voxlake.Source(table, filter="label = 1", proportion=0.25)]
dl = DataLoader(sources, num_workers=workers, epoch_size=96, batch_size=8, shuffle=True, seed=5,
                rank=0, world_size=1)
dl.load_state_dict(state)
print(json.dumps([[int(s), i] for b in dl for s, i in zip(b["source"], b["id"])]))
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_mixture_through_dataloader_workers_resumes_exactly_in_a_new_process(table, context):
    def loader():
        sources = [voxlake.Source(table, filter="label = 0", proportion=0.75),
                   voxlake.Source(table, filter="label = 1", proportion=0.25)]
        return DataLoader(sources, num_workers=2, multiprocessing_context=context, epoch_size=96, **KW)

    def drawn(batches):
        out = []
        for b in batches:
            assert b["source"].dtype == torch.int64
            assert (b["source"] == b["label"]).all()
            out += [[int(s), i] for s, i in zip(b["source"], b["id"])]
        return out

    dl = loader()
    assert len(dl) == 12
    whole = drawn(dl)
    assert len(whole) == 96 and sum(s for s, _ in whole) == 24
    # The workers' batches take turns: each worker's draws hold each source's share.
    for w in range(2):
        mine = sum((whole[8 * k:8 * k + 8] for k in range(w, 12, 2)), [])
        assert abs(sum(s for s, _ in mine) - 0.25 * len(mine)) <= 1, (w, mine)
    dl = loader()
    it = iter(dl)
    head = drawn([next(it) for _ in range(5)])
    state = dl.state_dict()
    assert len(state["sources"]) == 2
    del it
    out = run_python(f"import sys; sys.argv = ['x'] + {[table, '2', json.dumps(state)]!r}\n" + MIXED)
    assert head + json.loads(out) == whole
