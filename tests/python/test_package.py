"""The `voxlake` Python package (crates/python + python/voxlake), installed into .venv by
scripts/test.sh: zero copy, every row once over ranks and workers, exact resume, the Rust
loader's order, errors as exceptions, the GIL released while a batch is awaited.

Tables are written by the real deltalake-python and pyarrow in voxlake's layout (a raw
little-endian tensor column described by the table's configuration).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import boto3
import pytest

import voxlake

SHAPE = [2, 3, 4]
ROWS = 103
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "target"))
KEYS = {"AWS_ACCESS_KEY_ID": "voxlake", "AWS_SECRET_ACCESS_KEY": "voxlake-secret",
        "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def cube(i: int) -> np.ndarray:
    return np.arange(24, dtype=np.float32).reshape(SHAPE) + 1000 * i


def number(sample_id: str) -> int:
    return int(re.search(r"s(\d+)", sample_id).group(1))


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """ROWS cubes (row i holds cube(i), label i % 2) as .npy files, converted by `compact`
    into a table of row groups of 8 rows."""
    src = tmp_path_factory.mktemp("npy")
    with open(src / "labels.csv", "w") as f:
        f.write("file,label\n")
        for i in range(ROWS):
            np.save(src / f"s{i:04}.npy", cube(i))
            f.write(f"s{i:04}.npy,{i % 2}\n")
    out = str(tmp_path_factory.mktemp("table"))
    subprocess.run([os.path.join(TARGET, "debug", "compact"), "convert", str(src), out,
                    "--labels", str(src / "labels.csv"), "--row-group-rows", "8", "--json"],
                   check=True, capture_output=True)
    return out


def ids_of(loader) -> list:
    return [i for batch in loader for i in batch["id"]]


def test_batches_are_numpy_views_of_the_rust_buffer(table):
    loader = voxlake.Loader(table, batch_size=10)
    batch = next(iter(loader))
    arr = batch["tensor"]
    assert arr.shape == (10, *SHAPE) and arr.dtype == np.float32
    assert type(arr.base).__name__ == "TensorOwner", type(arr.base)
    assert not arr.flags.owndata
    for row, sample_id in zip(arr, batch["id"]):
        np.testing.assert_array_equal(row, cube(number(sample_id)))
    assert batch["label"].dtype == np.int64
    assert list(batch["label"]) == [number(s) % 2 for s in batch["id"]]
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(arr)
    assert t.data_ptr() == arr.__array_interface__["data"][0]
    # An array still held keeps its buffer: the batches after it are filled elsewhere.
    held = arr.copy()
    del batch, t
    freed_and_checked = 0
    for b in loader:
        for row, sample_id in zip(b["tensor"], b["id"]):
            np.testing.assert_array_equal(row, cube(number(sample_id)))
        freed_and_checked += len(b["id"])
        del b  # freed: its buffer goes back to the loader
    np.testing.assert_array_equal(arr, held)
    assert freed_and_checked == ROWS - 10
    # Freed batches were filled again (zero copy does not cost a new buffer a batch).
    assert loader.stats()["recycled_batches"] > 0, loader.stats()
    assert loader.stats()["version"] == loader.version


def test_row_groups_are_kept_between_epochs_unless_told_not_to(table):
    """Later epochs take the row groups kept in the memory budget back instead of reading them
    (stats' row_groups_reused), with the same batches as a loader that reads every epoch."""
    def run(**options):
        loader = voxlake.Loader(table, batch_size=8, shuffle=True, seed=3, epochs=3, **options)
        batches = [(list(b["id"]), b["tensor"].copy()) for b in loader]
        return batches, loader.stats()

    groups = (ROWS + 7) // 8
    kept, stats = run()
    assert (stats["row_groups"], stats["row_groups_reused"]) == (3 * groups, 2 * groups), stats
    read, stats = run(keep_row_groups=False)
    assert (stats["row_groups"], stats["row_groups_reused"]) == (3 * groups, 0), stats
    assert [ids for ids, _ in kept] == [ids for ids, _ in read]
    for (_, a), (_, b) in zip(kept, read):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_row_once_an_epoch_over_ranks(table, world):
    per_rank = []
    for rank in range(world):
        loader = voxlake.Loader(table, batch_size=8, shuffle=True, seed=7, rank=rank, world_size=world, epochs=2)
        per_rank.append(list(loader))
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, f"ranks got different batch counts: {counts}"
    for epoch in range(2):
        seen = []
        for batches in per_rank:
            n = len(batches) // 2
            for b in batches[epoch * n:(epoch + 1) * n]:
                seen.extend(b["id"])
        # Every row of the epoch, once (a rank's padding repeats rows to even the ranks out).
        assert set(seen) == set(ids_of(voxlake.Loader(table, batch_size=ROWS)))
        assert len(seen) - ROWS < world


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloaders_workers_read_disjoint_equal_shares(table, workers):
    torch = pytest.importorskip("torch")
    from voxlake.torch import Dataset

    ds = Dataset(table, batch_size=8, rank=0, world_size=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    batches = list(dl)
    assert all(isinstance(b["tensor"], torch.Tensor) for b in batches)
    ids = [i for b in batches for i in b["id"]]
    assert set(ids) == set(ids_of(voxlake.Loader(table, batch_size=ROWS)))
    assert len(ids) - ROWS < max(workers, 1)
    if workers:
        sizes = [len(b["id"]) for b in batches]
        assert len(batches) % workers == 0, sizes


def test_a_state_resumes_exactly_mid_epoch(table):
    whole = ids_of(voxlake.Loader(table, batch_size=8, shuffle=True, seed=3, epochs=2))
    first = voxlake.Loader(table, batch_size=8, shuffle=True, seed=3, epochs=2)
    it = iter(first)
    head = [i for _ in range(9) for i in next(it)["id"]]
    state = first.state_dict()
    assert json.loads(json.dumps(state)) == state
    resumed = voxlake.Loader(table, batch_size=8, shuffle=True, seed=3, epochs=2)
    resumed.load_state_dict(state)
    assert head + ids_of(resumed) == whole


def test_the_order_is_the_rust_loaders(table, tmp_path):
    out = tmp_path / "ids.txt"
    bench = os.path.join(TARGET, "debug", "voxlake")
    subprocess.run([bench, "bench", table, "--batch-size", "8", "--shuffle", "--seed", "11",
                    "--epochs", "2", "--ids-out", str(out), "--json"], check=True, capture_output=True)
    rust = out.read_text().split()
    python = ids_of(voxlake.Loader(table, batch_size=8, shuffle=True, seed=11, epochs=2))
    assert python == rust


def test_a_state_loads_into_a_loader_opened_but_not_iterated(table):
    first = voxlake.Loader(table, batch_size=8)
    it = iter(first)
    head = [i for _ in range(2) for i in next(it)["id"]]
    state = first.state_dict()
    resumed = voxlake.Loader(table, batch_size=8)
    assert resumed.version == first.version  # opens a pass: no batch handed out yet
    resumed.load_state_dict(state)
    assert head + ids_of(resumed) == ids_of(voxlake.Loader(table, batch_size=8))
    with pytest.raises(voxlake.ConfigError, match="before iterating"):
        started = voxlake.Loader(table, batch_size=8)
        next(iter(started))
        started.load_state_dict(state)


def test_a_dataset_not_iterated_here_has_no_state(table):
    pytest.importorskip("torch")
    from voxlake.torch import Dataset

    ds = Dataset(table, batch_size=8, rank=0, world_size=1)
    with pytest.raises(voxlake.ConfigError, match="no pass"):
        ds.state_dict()
    it = iter(ds)
    next(it)
    assert ds.state_dict() == dict(ds._loader.state_dict(), pass_epoch=0)


def test_set_epoch_gives_that_epochs_order(table):
    both = ids_of(voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, epochs=2))
    loader = voxlake.Loader(table, batch_size=8, shuffle=True, seed=5)
    assert ids_of(loader) == both[:ROWS]
    assert ids_of(loader) == both[ROWS:], "a second pass reads the next epoch"
    loader.set_epoch(0)
    assert ids_of(loader) == both[:ROWS]


def test_convert_and_inspect_are_compacts(table, tmp_path):
    src = tmp_path / "npy"
    src.mkdir()
    for i in range(20):
        np.save(src / f"c{i:02}.npy", cube(i))
    out = str(tmp_path / "converted")
    summary = voxlake.convert(str(src), out, progress=False)
    assert summary["rows"] == 20, summary
    # Again: nothing left to convert (resumable, exactly once).
    assert voxlake.convert(str(src), out, progress=False)["rows"] == 0
    info = voxlake.inspect(out)
    assert info["rows"] == 20 and info["shape"] == SHAPE, info
    assert voxlake.inspect(table)["rows"] == ROWS
    batch = next(iter(voxlake.Loader(out, batch_size=20)))
    for row, sample_id in zip(batch["tensor"], batch["id"]):
        np.testing.assert_array_equal(row, cube(int(re.search(r"c(\d+)", sample_id).group(1))))
    # One row by its id, as `compact inspect --row`: the loader's row summed up.
    for k in (0, 13):
        one = voxlake.inspect(out, row=batch["id"][k])
        values = batch["tensor"][k].astype(np.float64)
        field = one["fields"][0]
        assert one["id"] == batch["id"][k] and one["rows"] == 20 and field["shape"] == SHAPE, one
        assert (field["min"], field["max"]) == (values.min(), values.max()), (field, values.min(), values.max())
        assert abs(field["mean"] - values.mean()) < 1e-6 * max(1.0, abs(values.mean())), field
    with pytest.raises(voxlake.NotFoundError, match=r"no row of id 'c99\.npy' in the scan of version \d+"):
        voxlake.inspect(out, row="c99.npy")
    with pytest.raises(voxlake.VoxlakeError):
        voxlake.convert(str(tmp_path / "nothing-here"), str(tmp_path / "t2"), progress=False)
    with pytest.raises(voxlake.ConfigError, match="shard"):
        voxlake.convert(str(src), out, shard=(2, 2), progress=False)


def test_the_console_scripts_are_the_command_lines(table, tmp_path):
    """The wheel's `compact` and `voxlake` run the Rust command lines in Python: the same
    output as the binaries, the same exit statuses, and `bench`'s own Ctrl-C handling."""
    scripts = os.path.dirname(sys.executable)
    compact, bench = os.path.join(scripts, "compact"), os.path.join(scripts, "voxlake")

    def run(*argv):
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)

    info = run(compact, "inspect", table, "--json")
    assert info.returncode == 0, info.stderr
    binary = run(os.path.join(TARGET, "debug", "compact"), "inspect", table, "--json")
    assert json.loads(info.stdout) == json.loads(binary.stdout)
    assert json.loads(info.stdout)["rows"] == ROWS
    report = run(bench, "bench", table, "--json", "--shuffle", "--batch-size", "10")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["samples"] == ROWS
    missing = run(compact, "inspect", str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.startswith("error: "), missing.stderr
    assert "nope" in missing.stderr
    assert run(bench, "bench").returncode == 2  # no TABLE: clap's usage error
    assert run(compact, "--version").stdout.startswith("compact ")
    # Ctrl-C: bench stops after the batch in hand with its state written, status 128 + 2.
    state = tmp_path / "state.json"
    proc = subprocess.Popen([bench, "bench", table, "--epochs", "1000000", "--state-out",
                             str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "stopped by signal 2" in err
    written = json.loads(state.read_text())
    assert {"epoch", "batches", "closed"} <= written.keys(), written


def test_errors_are_exceptions_with_the_rust_message(table, tmp_path):
    with pytest.raises(voxlake.VoxlakeError, match="nothing at this location"):
        next(iter(voxlake.Loader(str(tmp_path / "nope"))))
    with pytest.raises(voxlake.VoxlakeError, match="no_such_column"):
        next(iter(voxlake.Loader(table, filter="no_such_column = 1")))
    with pytest.raises(voxlake.VoxlakeError, match="nope_field"):
        next(iter(voxlake.Loader(table, fields=["nope_field"])))
    with pytest.raises(voxlake.ConfigError, match="unknown option bach_size"):
        voxlake.Loader(table, bach_size=3)
    with pytest.raises(voxlake.ConfigError, match="batch_size: expected an int"):
        voxlake.Loader(table, batch_size="3")
    with pytest.raises(voxlake.ConfigError, match="rank and world_size"):
        voxlake.Loader(table, rank=1)
    assert issubclass(voxlake.TableError, voxlake.VoxlakeError)


def test_sampling_options_are_refused_by_name_before_any_read(tmp_path):
    nowhere = str(tmp_path / "no table here")  # nothing is opened: the option is refused first
    for options, says in [
        (dict(subsample=1.5), "subsample: 1.5 is not a share in"),
        (dict(subsample=0.1, epoch_size=10), "subsample: give subsample or epoch_size"),
        (dict(class_weights={0: -1.0, 1: 1.0}), "class_weights: label 0 has weight -1"),
        (dict(class_weights={0: float("nan")}), "class_weights: label 0 has weight NaN"),
        (dict(class_weights={0: 0.0, 1: 0.0}), "class_weights: every weight is 0"),
        (dict(balance="labels"), 'balance: "labels" is not a way'),
        (dict(balance="label", weight_column="w"), "give one"),
        (dict(split="dev", splits={"train": 0.9, "val": 0.1}), "split: 'dev' is not one of the splits"),
        (dict(split="val", splits={"train": 0.9, "val": 0.0}), "splits: split 'val' has share 0"),
        (dict(split="val"), "split and splits go together"),
        (dict(epoch_size=0), "epoch_size: 0 draws"),
        (dict(subsample=0.1, subset_by="file"), "subset_by: 'file' is not row or row_group"),
        (dict(subset_by="row_group"), "subset_by: row_group needs a subset"),
    ]:
        with pytest.raises(voxlake.ConfigError, match=re.escape(says)):
            voxlake.Loader(nowhere, **options)
    with pytest.raises(voxlake.ConfigError, match="class_weights: expected a dict"):
        voxlake.Loader(nowhere, class_weights=[1.0])


def test_splits_partition_the_table_the_same_way_every_time(table):
    splits = {"train": 0.6, "val": 0.2, "test": 0.2}
    parts = {name: ids_of(voxlake.Loader(table, batch_size=7, split=name, splits=splits, split_salt="a"))
             for name in splits}
    assert sorted(sum(parts.values(), [])) == sorted(f"s{i:04}.npy" for i in range(ROWS))
    assert all(10 < len(p) < 70 for p in parts.values()), {k: len(v) for k, v in parts.items()}
    # The same rows every time, whichever order the shares are listed in; another salt, others.
    again = voxlake.Loader(table, batch_size=7, split="val", splits=dict(reversed(list(splits.items()))), split_salt="a")
    assert ids_of(again) == parts["val"]
    other = ids_of(voxlake.Loader(table, batch_size=7, split="val", splits=splits, split_salt="b"))
    assert set(other) != set(parts["val"])
    loader = voxlake.Loader(table, batch_size=7, split="val", splits=splits, split_salt="a")
    assert loader.batches_per_epoch() == -(-len(parts["val"]) // 7)


def test_balanced_draws_and_what_stats_count_of_them(table):
    loader = voxlake.Loader(table, batch_size=10, shuffle=True, seed=1, balance="label", epoch_size=300)
    assert loader.batches_per_epoch() == 30
    it = iter(loader)
    labels = [int(l) for _ in range(30) for l in next(it)["label"]]
    assert len(labels) == 300 and sum(labels) == 150
    stats = loader.stats()
    assert stats["labels"] == {0: 150, 1: 150}
    assert stats["samples"] == 300 and stats["bytes_read"] > 0


def test_a_mixture_draws_each_sources_share_and_names_each_samples_source(table):
    # The table twice, each source with its own filter: 3/4 of the draws label 0, 1/4 label 1.
    sources = [voxlake.Source(table, filter="label = 0", proportion=0.75),
               voxlake.Source(table, filter="label = 1", proportion=0.25)]
    loader = voxlake.Loader(sources, batch_size=10, shuffle=True, seed=2, epoch_size=200)
    assert loader.batches_per_epoch() == 20
    assert loader.versions == [loader.version] * 2
    batches = list(loader)
    source = np.concatenate([b["source"] for b in batches])
    label = np.concatenate([b["label"] for b in batches])
    assert source.dtype == np.int64 and len(source) == 200
    assert (source == label).all()  # source 0 reads label 0, source 1 label 1
    assert int((source == 0).sum()) == 150
    assert loader.stats()["sources"] == [150, 50]
    assert "source" not in next(iter(voxlake.Loader(table, batch_size=4)))
    # Repeat and choose: every label-0 row once, 7 draws of label 1.
    loader = voxlake.Loader([voxlake.Source(table, filter="label = 0"),
                             voxlake.Source(table, filter="label = 1", choose=7)], batch_size=9)
    ids = [(int(s), i) for b in loader for s, i in zip(b["source"], b["id"])]
    assert len(ids) == 52 + 7 and len({i for s, i in ids if s == 0}) == 52
    assert repr(loader).startswith("voxlake.Loader([")


def test_bad_mixtures_are_refused_by_name_before_any_read(tmp_path):
    nowhere = str(tmp_path / "no table here")
    with pytest.raises(voxlake.ConfigError, match="give every source a proportion or none"):
        voxlake.Loader([voxlake.Source(nowhere, proportion=0.5), voxlake.Source(nowhere, repeat=1.0)])
    with pytest.raises(voxlake.ConfigError, match="proportion: source 1 has weight -1"):
        voxlake.Loader([voxlake.Source(nowhere, proportion=0.5), voxlake.Source(nowhere, proportion=-1.0)])
    with pytest.raises(voxlake.ConfigError, match="with repeat and choose the sources set the epoch's size"):
        voxlake.Loader([voxlake.Source(nowhere, repeat=2.0)], epoch_size=10)
    with pytest.raises(voxlake.OptionError, match="one of proportion, repeat, choose"):
        voxlake.Source(nowhere, proportion=0.5, repeat=2.0)
    with pytest.raises(voxlake.OptionError, match="item 0 of the list is str"):
        voxlake.Loader([nowhere])
    with pytest.raises(voxlake.ConfigError, match="a mixture of no source"):
        voxlake.Loader([])


def test_a_subsample_is_a_new_subset_each_epoch(table):
    epochs = [ids_of(voxlake.Loader(table, batch_size=5, shuffle=True, seed=3, start_epoch=e, subsample=0.2))
              for e in (0, 1)]
    assert [len(e) for e in epochs] == [21, 21]
    assert all(len(set(e)) == 21 for e in epochs)
    assert set(epochs[0]) != set(epochs[1])
    # By row group (of 8 rows here): 21 rows from 3 row groups, only those read.
    loader = voxlake.Loader(table, batch_size=7, shuffle=True, seed=3, subsample=0.2, subset_by="row_group")
    it = iter(loader)
    ids = [i for _ in range(3) for i in next(it)["id"]]
    assert len(set(ids)) == 21 and len({number(i) // 8 for i in ids}) <= 4
    assert loader.stats()["row_groups"] <= 4


def test_the_options_are_listed_once_and_documented():
    names = [name for name, _, _ in voxlake.loader_options()]
    assert len(names) == len(set(names))
    doc = voxlake.Loader.__doc__ or ""
    stub = open(os.path.join(os.path.dirname(voxlake.__file__), "_voxlake.pyi")).read()
    init = stub[stub.index("class Loader"):stub.index("def __iter__")]
    for name in names:
        assert f"{name}:" in doc, name
        assert re.search(rf"\b{name}:", init), f"{name} is missing from the stub"


def test_every_rust_setter_is_an_option_or_says_why():
    """The Rust builder's setters (its own, the table's and the stream's macros), walked in the
    sources: each is reached by the options _setters() names (which must exist), or says how
    else Python reaches it, or why not."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    sources = ["crates/loader/src/builder.rs", "crates/loader/src/torch.rs", "crates/table/src/options.rs",
               "crates/stream/src/read_options.rs"]
    setters = set()
    for path in sources:
        setters |= set(re.findall(r"pub fn (with_\w+)", open(os.path.join(root, path)).read()))
    covered = dict(voxlake._voxlake._setters())
    assert setters - set(covered) == set(), "setters Python neither reaches nor explains"
    assert set(covered) - setters == set(), "explained setters the builder does not have"
    options = {name for name, _, _ in voxlake.loader_options()}
    for setter, how in covered.items():
        if how.startswith("option "):
            named = {n.strip() for n in how[len("option "):].split(",")}
            assert named <= options, (setter, named - options)


def test_sizes_and_times_as_python_says_them(table):
    import datetime as dt

    assert ids_of(voxlake.Loader(table, batch_size=8, memory_budget="256MiB")) == ids_of(voxlake.Loader(table, batch_size=8))
    with pytest.raises(voxlake.ConfigError, match="memory_budget"):
        voxlake.Loader(table, batch_size=8, memory_budget="lots").rank()
    # A time after every commit reads the latest; a naive datetime is refused (whose zone?).
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    latest = voxlake.Loader(table, batch_size=8).version
    assert voxlake.Loader(table, batch_size=8, timestamp=later).version == latest
    with pytest.raises(voxlake.ConfigError, match="naive"):
        voxlake.Loader(table, batch_size=8, timestamp=dt.datetime.now()).rank()


def test_a_spark_array_of_floats_table_reads_from_python():
    """Spark's `array<float>` (a Delta table Spark wrote) needs the sample's shape: given as
    options, every row comes with numpy's values (the fixture's expected.npy)."""
    from wheel_check import check_spark_table

    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures", "foreign")
    with pytest.raises(voxlake.VoxlakeError):
        next(iter(voxlake.Loader(os.path.join(fixtures, "spark_delta"), batch_size=1)))  # no shape
    check_spark_table(fixtures)


def test_the_options_for_other_writers_tables_and_the_deal(table, tmp_path):
    # The tensor column, the columns read, the deal, the threads: the same rows.
    plain = ids_of(voxlake.Loader(table, batch_size=8))
    got = ids_of(voxlake.Loader(table, batch_size=8, tensor_column="tensor", verify_checksums=False,
                                uneven="drop", row_group_prefetch=2, assembly_threads=2, runtime_threads=1))
    assert got == plain
    loader = voxlake.Loader(table, batch_size=8, fields={"tensor": None}, nulls={"tensor": "error"})
    assert [name for name, _ in loader.fields()][0] == "tensor"
    # A wrong value is an error naming the option.
    for bad, match in [({"uneven": "sideways"}, "uneven"), ({"tensor_dtype": "f32"}, "tensor_shape"),
                       ({"nulls": {"tensor": "ignore"}}, "nulls"), ({"node_affinity": "nodes"}, "node_affinity"),
                       ({"fields": {"tensor": ((2, 2), "f99")}}, "fields")]:
        with pytest.raises(voxlake.ConfigError, match=match):
            voxlake.Loader(table, batch_size=8, **bad).rank()


@pytest.fixture(scope="module")
def s3_table(table):
    """The table in the S3 server scripts/test.sh starts: its URL and the server's address."""
    endpoint, bucket = os.environ.get("VOXLAKE_S3_ENDPOINT"), os.environ.get("VOXLAKE_S3_BUCKET")
    if not endpoint:
        pytest.skip("needs the S3 server scripts/test.sh starts")
    prefix = f"python-{os.getpid()}"
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
    for root, _, files in os.walk(table):
        for name in files:
            path = os.path.join(root, name)
            s3.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, table)}")
    host, port = endpoint.rsplit("//", 1)[1].rsplit(":", 1)
    return f"s3://{bucket}/{prefix}", (host, int(port))


# Relays each connection to the S3 server byte by byte in Python threads: every byte of a reply
# needs the GIL, so a wait for the store that held it could never end.
RELAY = """
import socket, threading
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        b.close(); a.close()
def relay(upstream):
    server = socket.create_server(("127.0.0.1", 0))
    def serve():
        while True:
            client = server.accept()[0]
            store = socket.create_connection(upstream)
            threading.Thread(target=pipe, args=(client, store), daemon=True).start()
            threading.Thread(target=pipe, args=(store, client), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]
"""


def test_the_gil_is_released_while_a_batch_is_awaited(s3_table):
    # The first batch comes through a relay that is Python threads of the same process: with the
    # GIL held while the batch is awaited the relay could not pass a byte and the wait would never
    # end (the child is then killed at the timeout and the test fails).
    uri, upstream = s3_table
    script = RELAY + (
        "import voxlake\n"
        f"port = relay({upstream!r})\n"
        f"options = {{**{KEYS!r}, 'AWS_ENDPOINT_URL': f'http://127.0.0.1:{{port}}'}}\n"
        f"batch = next(iter(voxlake.Loader({uri!r}, batch_size=8, storage_options=options)))\n"
        "print(len(batch['id']), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8"], out


def test_ctrl_c_stops_a_wait_promptly():
    # A store that accepts connections and never answers: the open would wait out the store's
    # timeouts (minutes); Ctrl-C ends the process with KeyboardInterrupt at once instead (the
    # timeout below is a hang guard, not a timing).
    silent = socket.create_server(("127.0.0.1", 0))
    options = {**KEYS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    script = (
        # Python's own handler, whatever the shell that started the tests left (a background
        # job's SIGINT is ignored, and Python keeps an ignored SIGINT ignored).
        "import signal, sys, voxlake\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "loader = voxlake.Loader('s3://silent/table', batch_size=8,"
        f" storage_options={options!r})\n"
        "print('started', flush=True)\n"
        "next(iter(loader))\n"
        "print('opened', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        # Once a connection is made the open is waiting on the store.
        silent.settimeout(60)
        held = silent.accept()[0]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        silent.close()
    held.close()
    assert "KeyboardInterrupt" in err, err
    assert "opened" not in out


def test_a_state_resumes_over_another_world_size(table):
    kw = dict(batch_size=8, shuffle=True, seed=9)
    everything = set(ids_of(voxlake.Loader(table, batch_size=ROWS)))
    head, state = [], None
    for rank in range(2):
        loader = voxlake.Loader(table, rank=rank, world_size=2, **kw)
        it = iter(loader)
        for _ in range(3):
            head.extend(next(it)["id"])
        state = loader.state_dict()
    rest, counts = [], set()
    for rank in range(3):
        loader = voxlake.Loader(table, rank=rank, world_size=3, **kw)
        loader.load_state_dict(state)
        batches = list(loader)
        counts.add(len(batches))
        rest.extend(i for b in batches for i in b["id"])
    assert len(counts) == 1, counts
    assert set(head) | set(rest) == everything
    # Each row once, but the rows the 3 new ranks repeat to come out even (at most 2).
    again = len(head) + len(rest) - ROWS
    assert 0 <= again <= 2, (again, sorted(set(head) & set(rest)))
    assert len(set(head) & set(rest)) <= again


def test_a_dataloader_with_pinned_memory_reads_every_row(table):
    torch = pytest.importorskip("torch")
    from voxlake.torch import Dataset

    dl = torch.utils.data.DataLoader(Dataset(table, batch_size=8, rank=0, world_size=1),
                                     batch_size=None, pin_memory=True)
    ids = [i for b in dl for i in b["id"]]
    assert sorted(ids) == sorted(ids_of(voxlake.Loader(table, batch_size=ROWS)))


def test_ranks_left_to_the_launcher_join_its_job(table, monkeypatch):
    torch = pytest.importorskip("torch")
    from voxlake.torch import Dataset

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("VOXLAKE_JOB_ID", f"pytest-{os.getpid()}")
    marker = os.path.join(table, "_voxlake", "jobs", f"pytest-{os.getpid()}.json")
    loader = voxlake.Loader(table, batch_size=8)
    assert loader.rank() == (1, 2)
    assert os.path.exists(marker), "the job's version was not agreed"
    assert json.load(open(marker))["version"] == loader.version
    ds = Dataset(table, batch_size=8)
    assert ds.placement() == (1, 2, f"pytest-{os.getpid()}")
    # A rank given explicitly joins no job unless told.
    os.remove(marker)
    voxlake.Loader(table, batch_size=8, rank=0, world_size=2).rank()
    assert not os.path.exists(marker)


def test_a_job_folder_takes_the_marker_instead_of_the_table(table, tmp_path, monkeypatch):
    job = f"pytest-dir-{os.getpid()}"
    beside = os.path.join(table, "_voxlake", "jobs", f"{job}.json")
    loader = voxlake.Loader(table, batch_size=8, rank=1, world_size=2, job=job, job_dir=str(tmp_path / "jobs"))
    version = loader.version  # the table opened
    markers = list((tmp_path / "jobs").glob(f"t*/{job}.json"))
    assert len(markers) == 1, list(tmp_path.rglob("*"))
    assert json.load(open(markers[0]))["version"] == version
    assert not os.path.exists(beside)
    # From the environment too; a folder that cannot be made is an error naming it.
    monkeypatch.setenv("VOXLAKE_JOB_DIR", str(tmp_path / "env-jobs"))
    voxlake.Loader(table, batch_size=8, rank=0, world_size=2, job=job).rank()
    assert len(list((tmp_path / "env-jobs").glob(f"t*/{job}.json"))) == 1
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(voxlake.VoxlakeError, match="a-file"):
        voxlake.Loader(table, batch_size=8, rank=0, world_size=2, job=job, job_dir=str(tmp_path / "a-file" / "x")).rank()
    assert not os.path.exists(beside)


def test_to_device_stages_every_batch_through_its_ring(table):
    """On the CPU (no GPU in CI) the staging runs as on CUDA, into pageable buffers: each
    batch arrives whole and equal, a ring slot's buffer reused without touching a batch
    already handed out, the last smaller batch included; the ids pass as they are."""
    torch = pytest.importorskip("torch")
    from voxlake.torch import Dataset, to_device

    seen = []
    # batch_size 7 over ROWS rows: a smaller last batch; 2 slots: each reused many times.
    for b in to_device(voxlake.Loader(table, batch_size=7, drop_last=False), "cpu", buffers=2):
        assert isinstance(b["tensor"], torch.Tensor) and b["tensor"].dtype == torch.float32
        assert b["label"].dtype == torch.int64
        seen.append(b)
    assert sum(len(b["id"]) for b in seen) == ROWS and len(seen[-1]["id"]) == ROWS % 7
    for b in seen:  # checked after all were staged: none was overwritten by a later one
        for row, label, sample_id in zip(b["tensor"], b["label"], b["id"]):
            np.testing.assert_array_equal(row.numpy(), cube(number(sample_id)))
            assert int(label) == number(sample_id) % 2
    # A Dataset's torch tensors go through it too.
    ds = Dataset(table, batch_size=8, rank=0, world_size=1)
    ids = [i for b in to_device(ds, torch.device("cpu")) for i in b["id"]]
    assert sorted(ids) == sorted(ids_of(voxlake.Loader(table, batch_size=ROWS)))
    with pytest.raises(voxlake.ConfigError, match="buffers"):
        next(to_device(ds, "cpu", buffers=0))


def test_copy_into_refuses_what_it_cannot_copy():
    from voxlake._voxlake import _copy_into

    src = np.arange(3 << 20, dtype=np.float32)  # 12 MiB: copied by several threads
    dst = np.zeros_like(src)
    assert _copy_into(dst.ctypes.data, dst.nbytes, src) == src.nbytes
    np.testing.assert_array_equal(dst, src)
    with pytest.raises(ValueError, match="C-contiguous"):
        _copy_into(dst.ctypes.data, dst.nbytes, src.reshape(1024, -1)[:, ::2])
    with pytest.raises(ValueError, match="bytes"):
        _copy_into(dst.ctypes.data, dst.nbytes - 1, src)
    with pytest.raises(ValueError, match="overlaps"):
        _copy_into(src.ctypes.data + 4, src.nbytes, src)
    with pytest.raises(ValueError, match="null"):
        _copy_into(0, src.nbytes, src)
    with pytest.raises(ValueError, match="end of memory"):
        _copy_into(2**64 - 8, 16, np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="threads"):
        _copy_into(dst.ctypes.data, dst.nbytes, src, 9)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_copy_into_works_in_a_process_forked_after_its_threads_started():
    """A DataLoader worker forked after the parent copied has none of the copy threads: its
    copies run on its own thread instead of waiting for threads that do not exist."""
    from voxlake._voxlake import _copy_into

    src = np.arange(3 << 20, dtype=np.float32)
    dst = np.zeros_like(src)
    _copy_into(dst.ctypes.data, dst.nbytes, src, 8)  # the pool starts here
    pid = os.fork()
    if pid == 0:  # the child: a hang here fails the test by its timeout below
        out = np.zeros_like(src)
        _copy_into(out.ctypes.data, out.nbytes, src, 8)
        os._exit(0 if np.array_equal(out, src) else 1)
    deadline = time.time() + 60
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked process's copy hung")


def test_transforms_by_name_are_exact_and_repeat_after_a_resume(table):
    """transforms=: flips, a random crop, normalize and a cast on the loader's threads, value
    for value against numpy, the same draws after a resume mid-epoch."""
    transforms = [("flip", {"axes": [0], "p": 1.0}), ("crop", {"shape": [2, 2, 4]}),
                  ("normalize", {"mean": 10.0, "std": 4.0}), ("cast", {"dtype": "f16"})]

    def batches(loader):
        return {(b["id"][i]): b["tensor"][i].copy() for b in loader for i in range(len(b["id"]))}

    loader = voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, transforms=transforms)
    assert dict(loader.fields())["tensor"] == "f16"
    seen = batches(loader)
    assert len(seen) == ROWS
    offsets = set()
    for sample_id, got in seen.items():
        assert got.dtype == np.float16 and got.shape == (2, 2, 4)
        x = ((cube(number(sample_id))[::-1] - 10.0) / 4.0).astype(np.float16)
        windows = [x[:, o:o + 2] for o in range(2)]
        found = [o for o, w in enumerate(windows) if np.array_equal(w, got)]
        assert found, sample_id
        offsets.add(found[0])
    assert offsets == {0, 1}, "the crop draws its offset"
    # Resumed after 5 batches: the rest exactly as in the run above.
    first = voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, transforms=transforms)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    rest = voxlake.Loader(table, batch_size=8, shuffle=True, seed=5, transforms=transforms)
    rest.load_state_dict(state)
    resumed = batches(rest)
    assert len(resumed) == ROWS - 40
    for sample_id, got in resumed.items():
        np.testing.assert_array_equal(got, seen[sample_id], err_msg=sample_id)
    for bad, match in [([("blur", {})], r"transforms\[0\] \(blur\): no such transform"),
                       ([("flip", {"axis": [0]})], r"no parameter 'axis' \(it takes axes, p\)"),
                       ([("crop", {})], "'shape' is required"),
                       ([("flip", {"axes": [7]})], "flip: axis 7"),
                       ([("normalize", {"mean": 0, "std": 1}), ("cast", {"dtype": "i8"})], "only f16, bf16 or f32")]:
        with pytest.raises(voxlake.ConfigError, match=match):
            voxlake.Loader(table, batch_size=8, transforms=bad).rank()


def failing_batch_transform(batch, rng):
    """A batch transform that raises on the batch holding row s0050 (the DataLoader tests')."""
    if "s0050.npy" in [os.path.basename(i) for i in batch["id"]]:
        raise ValueError("no augmentation for s0050")


def offset_by_batch(batch, rng):
    """A batch transform: each batch's tensor plus one random integer, drawn from `rng`, in
    place; the loader's thread and the draw noted in the batch's label column."""
    batch["tensor"] += rng.integers(1, 1000)
    assert threading.current_thread() is not threading.main_thread()


def test_stats_hold_the_exposed_wait_the_loop_measures(table):
    """stats(): the loop's wait inside next() a step (quantiles, sum, share) as the loop's own
    clock measures it, a slow batch_transform making every step wait; every metric of
    docs/usage.md's table by name, the same names as `voxlake bench --json`."""
    def slow(batch, rng):
        time.sleep(0.02)

    loader = voxlake.Loader(table, batch_size=8, batch_transform=slow)
    it, timed = iter(loader), []
    while True:
        start = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            timed.append(time.perf_counter() - start)
            break
        timed.append(time.perf_counter() - start)
    stats = loader.stats()
    assert stats["consumer_wait_s"] == pytest.approx(sum(timed), rel=0.05), (stats, timed)
    steps = sorted(timed[:-1])
    assert stats["step_waits"] == stats["batches"] == len(steps) == (ROWS + 7) // 8
    assert stats["step_wait_p50_s"] == pytest.approx(steps[(len(steps) + 1) // 2 - 1], rel=0.05)
    assert stats["step_wait_max_s"] == pytest.approx(steps[-1], rel=0.05)
    assert stats["step_wait_p50_s"] >= 0.015 and stats["input_bound_fraction"] > 0.5, stats
    assert isinstance(stats["bytes_read"], int) and isinstance(stats["fetch_s"], float)
    for name in ("steady_iteration_s", "epoch_forecast_s", "decode_s", "assemble_s",
                 "producer_wait_s", "budget_wait_s", "recycled_batches", "cache_hits"):
        assert name in stats, name


def test_metrics_port_serves_the_stats_to_prometheus(table):
    """metrics_port=0: the loader's stats() in Prometheus' text on 127.0.0.1 while it lives,
    each metric as voxlake_<name>; a map-style dataset refuses it (no loop to time)."""
    import urllib.request

    from voxlake.torch import MapDataset

    loader = voxlake.Loader(table, batch_size=8, metrics_port=0)
    host, port = loader.metrics_address
    assert host == "127.0.0.1" and port > 0
    batches = sum(1 for _ in loader)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    served = dict(line.split(" ") for line in text.splitlines() if not line.startswith("#"))
    stats = loader.stats()
    assert float(served["voxlake_batches"]) == stats["batches"] == batches
    assert float(served["voxlake_bytes_read"]) == stats["bytes_read"] > 0
    assert {k for k in stats if isinstance(stats[k], (int, float))} - {"version"} \
        == {k.removeprefix("voxlake_") for k in served}
    loader.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5)
    with pytest.raises(voxlake.ConfigError, match="metrics_port"):
        MapDataset(table, metrics_port=0)
    with pytest.raises(voxlake.OptionError, match="metrics_port"):
        voxlake.Loader(table, metrics_port=70000)


def test_trace_writes_a_chrome_trace_of_the_first_batches(table, tmp_path):
    """trace=: a Chrome trace-event file (one JSON array) of the first trace_batches batches,
    a span for each wait in next() and each batch's assembly, each row group's read; a path
    that cannot be written fails naming it; a map-style dataset refuses it."""
    from collections import Counter

    from voxlake.torch import MapDataset

    path = tmp_path / "trace.json"
    loader = voxlake.Loader(table, batch_size=8, trace=str(path), trace_batches=3)
    assert sum(1 for _ in loader) == -(-ROWS // 8)
    events = json.loads(path.read_text())
    begun = Counter(e["name"] for e in events if e["ph"] == "B")
    assert begun["next"] >= 3 and begun["assemble"] >= 3, begun
    assert begun["row_group"] >= 1 and begun["decode"] >= 1 and begun["read"] >= 1, begun
    assert sorted({int(e["args"]["batch"]) for e in events if e["name"] == "next"}) == [0, 1, 2]
    bad = tmp_path / "absent" / "trace.json"
    with pytest.raises(voxlake.ConfigError, match=str(bad)):
        next(iter(voxlake.Loader(table, trace=str(bad))))
    with pytest.raises(voxlake.ConfigError, match="trace"):
        MapDataset(table, trace=str(path))


def test_batch_transform_runs_on_the_loaders_thread_seeded_and_repeats_after_a_resume(table):
    """batch_transform=: a callable run on every batch ahead of the loop, its in-place changes
    handed out in the same zero-copy buffers, its draws the same in a second run and after a
    resume mid-epoch, its time in stats()."""
    def run(loader):
        out = {}
        for b in loader:
            assert type(b["tensor"].base).__name__ == "TensorOwner"
            for i, sample_id in enumerate(b["id"]):
                shift = b["tensor"][i] - cube(number(sample_id))
                assert np.all(shift == shift.flat[0]) and shift.flat[0] >= 1, sample_id
                out[sample_id] = shift.flat[0]
        return out

    kw = dict(batch_size=8, shuffle=True, seed=5, batch_transform=offset_by_batch)
    loader = voxlake.Loader(table, **kw)
    seen = run(loader)
    assert len(seen) == ROWS and len(set(seen.values())) > 5, seen
    assert loader.stats()["batch_transform_s"] > 0
    assert run(voxlake.Loader(table, **kw)) == seen, "the same seed draws the same"
    assert run(voxlake.Loader(table, **{**kw, "seed": 6})) != seen
    first = voxlake.Loader(table, **kw)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    rest = voxlake.Loader(table, **kw)
    rest.load_state_dict(state)
    resumed = run(rest)
    assert len(resumed) == ROWS - 40
    assert resumed == {k: seen[k] for k in resumed}


def test_batch_transform_returns_new_fields_and_labels_and_keeps_no_view(table):
    """A returned dict replaces the fields it names (another shape and type) and the labels;
    arrays the callable keeps past its call keep their values while the loader recycles its
    buffers."""
    kept = []

    def flip_half(batch, rng):
        kept.append((batch["tensor"], list(batch["id"])))
        return {"tensor": batch["tensor"][:, ::-1, :, :2].astype(np.float64), "label": 1 - batch["label"]}

    loader = voxlake.Loader(table, batch_size=8, batch_transform=flip_half)
    assert dict(loader.fields())["tensor"] == "f32", "fields() is the table's, before the transform"
    n = 0
    for b in loader:
        assert b["tensor"].dtype == np.float64 and b["tensor"].shape[1:] == (2, 3, 2)
        for i, sample_id in enumerate(b["id"]):
            want = cube(number(sample_id))[::-1, :, :2]
            np.testing.assert_array_equal(b["tensor"][i], want)
            assert b["label"][i] == 1 - number(sample_id) % 2
            n += 1
        del b
    assert n == ROWS
    for tensor, ids in kept:
        for i, sample_id in enumerate(ids):
            np.testing.assert_array_equal(tensor[i], cube(number(sample_id)), err_msg=sample_id)

    # Kept without a new dict: the batch handed out is a copy, the kept view its own.
    views = {}
    loader = voxlake.Loader(table, batch_size=8, batch_transform=lambda b, rng: views.update({b["id"][0]: b["tensor"]}))
    for b in loader:
        view = views[b["id"][0]]
        assert not np.shares_memory(b["tensor"], view)
        np.testing.assert_array_equal(b["tensor"], view)
    assert len(views) == (ROWS + 7) // 8


def test_batch_transform_errors_name_the_batch_and_keep_the_cause(table):
    def boom(batch, rng):
        if batch["id"] and len(boom.calls) == 3:
            raise ValueError("boom")
        boom.calls.append(1)
    boom.calls = []
    loader = voxlake.Loader(table, batch_size=8, batch_transform=boom)
    got = 0
    with pytest.raises(voxlake.VoxlakeError, match=r"batch 3 of epoch 0.*batch_transform raised ValueError: boom") as caught:
        for _ in loader:
            got += 1
    assert got == 3
    assert isinstance(caught.value.__cause__, ValueError) and str(caught.value.__cause__) == "boom"
    for bad, match in [(lambda b, r: {"tensor": b["tensor"][:3]}, r"field \"tensor\" of shape \[3, 2, 3, 4\]: its first axis is the batch's 8"),
                       (lambda b, r: {"mask": b["tensor"]}, r"returned key \"mask\", which the batch does not have"),
                       (lambda b, r: {"id": ["x"] * 8}, r"changed \"id\": text fields and ids are read only"),
                       (lambda b, r: {"label": b["label"][:2]}, r"\"label\" of shape \[2\] and dtype int64, not the batch's \[8\] of integers"),
                       (lambda b, r: {"label": b["label"] * 0.5}, r"\"label\" of shape \[8\] and dtype float64, not the batch's \[8\] of integers"),
                       (lambda b, r: {"tensor": b["tensor"].astype(np.complex64)}, "numpy dtype complex64"),
                       (lambda b, r: [b], "returned list, not a dict or None")]:
        with pytest.raises(voxlake.VoxlakeError, match=match):
            next(iter(voxlake.Loader(table, batch_size=8, batch_transform=bad)))
    with pytest.raises(voxlake.OptionError, match="batch_transform: expected a callable"):
        voxlake.Loader(table, batch_transform=3)
    # A callable that asks its own loader (whose loop waits for it) is refused, not hung.
    holder = []
    loader = voxlake.Loader(table, batch_size=8, batch_transform=lambda b, r: holder[0].stats())
    holder.append(loader)
    with pytest.raises(voxlake.VoxlakeError, match="a batch_transform cannot use a Loader"):
        next(iter(loader))


def test_a_loader_in_its_batch_transform_closes_and_exits_at_once(table):
    """A callable holding the GIL when the loop closes the loader, the interpreter exits or the
    process forks. Told by what the callable counts, not by the clock: close() lets the call
    under way end (Python code cannot be stopped midway) and starts no other; a forked child's
    exit waits for none of its parent's calls; the interpreter's exit ends cleanly."""
    calls = {"started": 0, "finished": 0}

    def spin(batch, rng):
        calls["started"] += 1
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
        calls["finished"] += 1

    loader = voxlake.Loader(table, batch_size=8, batch_transform=spin)
    it = iter(loader)
    next(it)
    for _ in range(3000):  # until the loader's thread is in its call for the next batch
        if calls["started"] >= 2:
            break
        time.sleep(0.01)
    assert calls["started"] >= 2, calls
    loader.close()
    assert calls == {"started": 2, "finished": 2}, calls  # the call under way ended, no other began
    time.sleep(0.2)
    assert calls["started"] == 2, calls
    del it, loader
    script = f"""
import time, voxlake
def spin(batch, rng):
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass
it = iter(voxlake.Loader({table!r}, batch_size=8, prefetch=4, batch_transform=spin))
next(it)
print("one batch", flush=True)
"""
    # A process forked while a call is under way has none of it: its exit does not wait for it.
    forking = f"""
import os, sys, time, voxlake
calls = {{"started": 0, "finished": 0}}
def spin(batch, rng):
    calls["started"] += 1
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        pass
    calls["finished"] += 1
it = iter(voxlake.Loader({table!r}, batch_size=8, batch_transform=spin))
next(it)
while calls["started"] < 2:  # the loader's thread is in its next call
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print("calls finished when the child had exited:", calls["finished"], flush=True)
os._exit(0)
"""
    done = subprocess.run([sys.executable, "-c", forking], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # Only the first batch's call had ended: the child's exit did not wait for the second.
    assert done.stdout.split()[-1] == "1", done.stdout
    for _ in range(4):  # a thread ended by the finalizing interpreter aborted 1 run in 3
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "one batch" in done.stdout, (done.returncode, done.stderr)


def test_write_then_load_round_trips_and_a_rerun_adds_what_is_missing(tmp_path):
    """voxlake.write: samples held in memory (1 and 3 fields, and a text field) into a table the
    Loader reads back value for value (its row checksums verified), a re-run skips the ids present, a bad sample
    is refused naming it, and a generator that fails leaves nothing of its window committed."""
    def sample(i, fields):
        s = {"id": f"w{i:03}", "label": i % 3 if i % 5 else None,
             "tensor": np.arange(24, dtype=np.float32).reshape(2, 3, 4) * i}
        if fields >= 3:
            s["mask"] = np.full((2, 3, 4), i % 7, np.uint8)
            s["dose"] = np.array([i, -i], dtype=np.int64)
        if fields == 4:
            s["site"] = f"Zürich-{i % 4}" if i % 6 else ""
        return s

    for fields in (1, 3, 4):
        table = str(tmp_path / f"t{fields}")
        taken = []
        summary = voxlake.write(table, (sample(i, fields) for i in range(40)), progress=taken.append)
        assert summary["rows"] == 40 and taken[-1] == 40
        got = {}
        for batch in voxlake.Loader(table, batch_size=6, shuffle=True, seed=1):
            for i, sample_id in enumerate(batch["id"]):
                got[sample_id] = {k: v[i] for k, v in batch.items() if k != "id"}
                assert "label_valid" in batch
        assert len(got) == 40
        for i in range(40):
            want, row = sample(i, fields), got[f"w{i:03}"]
            assert bool(row["label_valid"]) == (want["label"] is not None), f"w{i:03}"
            if want["label"] is not None:
                assert row["label"] == want["label"], f"w{i:03}"
            for name in [k for k in want if k not in ("id", "label")]:
                assert name in row, name
                np.testing.assert_array_equal(row[name], want[name], err_msg=f"w{i:03} {name}")
        again = voxlake.write(table, (sample(i, fields) for i in range(30, 50)), progress=False)
        assert (again["rows"], again["already_present"]) == (10, 10)
        assert len(ids_of(voxlake.Loader(table, batch_size=8))) == 50
    with pytest.raises(voxlake.ConfigError, match="sample 'w001' field 'site' is not UTF-8 text"):
        voxlake.write(str(tmp_path / "surrogate"), [{**sample(0, 4), "site": "x"}, {**sample(1, 4), "site": "\ud800"}],
                      progress=False)
    with pytest.raises(voxlake.ConfigError, match="sample 'w002' field 'tensor' is float64"):
        voxlake.write(str(tmp_path / "bad"), [sample(1, 1), {"id": "w002", "tensor": np.zeros((2, 3, 4))}],
                      progress=False)

    def failing():
        yield from (sample(i, 1) for i in range(20))
        raise RuntimeError("the source broke")

    broken = str(tmp_path / "broken")
    with pytest.raises(RuntimeError, match="the source broke"):
        voxlake.write(broken, failing(), progress=False)
    assert ids_of(voxlake.Loader(broken, batch_size=8)) == [], "nothing of the open window"


def test_write_takes_a_pyarrow_table_or_reader(tmp_path):
    """voxlake.write from Arrow data (the Arrow C stream: a pyarrow Table, a slice of one, a
    RecordBatchReader, one a generator feeds): a fixed_shape_tensor column and a list column
    reshaped by shapes=, read back value for value; bad data is refused naming the column and
    the row; a stream that fails commits nothing of its open window."""
    import pyarrow as pa

    n = 25
    volumes = np.arange(n * 24, dtype=np.float32).reshape(n, 2, 3, 4)
    masks = (np.arange(n * 6) % 5).astype(np.uint8).reshape(n, 6)
    source = pa.table({
        "id": [f"a{i:02}" for i in range(n)],
        "label": [i % 2 for i in range(n)],
        "tensor": pa.FixedShapeTensorArray.from_numpy_ndarray(volumes),
        "mask": pa.array(list(masks), type=pa.list_(pa.uint8())),
    })
    for name, src in [("table", source), ("reader", pa.RecordBatchReader.from_batches(source.schema, source.to_batches(max_chunksize=7)))]:
        out = str(tmp_path / name)
        assert voxlake.write(out, src, shapes={"mask": (2, 3)}, progress=False)["rows"] == n
        got = {}
        for batch in voxlake.Loader(out, batch_size=4):
            for i, sample_id in enumerate(batch["id"]):
                got[sample_id] = (batch["label"][i], batch["tensor"][i].copy(), batch["mask"][i].copy())
        assert len(got) == n
        for i in range(n):
            label, volume, mask = got[f"a{i:02}"]
            assert label == i % 2
            np.testing.assert_array_equal(volume, volumes[i])
            np.testing.assert_array_equal(mask, masks[i].reshape(2, 3))
    # A string column is a text field.
    noted = str(tmp_path / "noted")
    voxlake.write(noted, source.append_column("note", pa.array([f"n{i}" for i in range(n)])),
                  shapes={"mask": (2, 3)}, progress=False)
    notes = {i: note for b in voxlake.Loader(noted, batch_size=4) for i, note in zip(b["id"], b["note"])}
    assert notes == {f"a{i:02}": f"n{i}" for i in range(n)}
    with pytest.raises(voxlake.ConfigError, match="arrow column .note.: Struct"):
        voxlake.write(str(tmp_path / "bad"), source.append_column("note", pa.array([{"a": 1}] * n)), progress=False)
    # A slice (offsets into every column's buffers) writes exactly its rows.
    sliced = str(tmp_path / "sliced")
    voxlake.write(sliced, source.slice(3, 15), shapes={"mask": (2, 3)}, progress=False)
    rows = {i: t.copy() for b in voxlake.Loader(sliced, batch_size=4) for i, t in zip(b["id"], b["tensor"])}
    assert sorted(rows) == [f"a{i:02}" for i in range(3, 18)]
    for i in range(3, 18):
        np.testing.assert_array_equal(rows[f"a{i:02}"], volumes[i])
    # Bad data is refused naming the column (and the row); a shape for no column is no setting
    # silently ignored.
    with pytest.raises(voxlake.ConfigError, match="arrow column 'masks': a shape is given"):
        voxlake.write(str(tmp_path / "bad"), source, shapes={"masks": (2, 3)}, progress=False)
    holes = source.set_column(3, "mask", pa.array([None if i == 4 else list(m) for i, m in enumerate(masks)],
                                                  type=pa.list_(pa.uint8())))
    with pytest.raises(voxlake.ConfigError, match="arrow column 'mask': row 'a04' is null"):
        voxlake.write(str(tmp_path / "bad"), holes, shapes={"mask": (2, 3)}, progress=False)

    # A stream a Python generator feeds, failing after two batches: the error is raised and
    # nothing of the open window is committed.
    def failing():
        yield from source.to_batches(max_chunksize=7)[:2]
        raise RuntimeError("the source broke")

    broken = str(tmp_path / "broken")
    with pytest.raises(voxlake.VoxlakeError, match="reading the Arrow data: .*the source broke"):
        voxlake.write(broken, pa.RecordBatchReader.from_batches(source.schema, failing()),
                      shapes={"mask": (2, 3)}, progress=False)
    assert ids_of(voxlake.Loader(broken, batch_size=8)) == [], "nothing of the open window"
