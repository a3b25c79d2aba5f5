"""The loader's figures where teams look: ``voxlake.torch.DataLoader.stats()`` (its workers'
counters carried across the worker boundary and added up, the loop's own wait measured where it
waits), TensorBoard through a real ``SummaryWriter`` read back by TensorBoard's own event
reader, and Lightning's loggers through ``voxlake.lightning.LoaderMonitor`` in a real Trainer.
The table is test_package.py's: ROWS cubes in row groups of 8, made by `compact`.
"""
import csv
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import voxlake  # noqa: E402
from voxlake.torch import DataLoader, TensorBoardLogger  # noqa: E402

from test_package import ROWS, table  # noqa: E402,F401

KW = dict(batch_size=8, shuffle=True, seed=5, rank=0, world_size=1)


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_a_dataloaders_stats_add_up_its_workers_and_passes(table, workers, persistent):
    loader = DataLoader(table, num_workers=workers, persistent_workers=persistent, **KW)
    steps = 0
    for _ in range(2):
        for batch in loader:
            steps += 1
            time.sleep(0.002)  # the training step: the loop is not always waiting
        stats = loader.stats()
    assert steps == 2 * len(loader)
    # Every row twice (two passes; pad rows per worker aside), counted once each.
    assert 2 * ROWS <= stats["samples"] <= 2 * (ROWS + 8 * max(workers, 1)), stats
    assert stats["batches"] == steps
    assert sum(stats["labels"].values()) == stats["samples"]
    assert stats["bytes_read"] > 0 and stats["row_groups"] > 0 and stats["fetch_s"] > 0
    assert stats["workers_reporting"] == max(workers, 1)
    # The loop's own wait, a step at a time.
    assert stats["step_waits"] == steps
    assert 0 < stats["consumer_wait_s"] < stats["elapsed_s"]
    assert 0 < stats["input_bound_fraction"] < 1
    assert stats["step_wait_p50_s"] <= stats["step_wait_p99_s"] <= stats["step_wait_max_s"]
    assert "read_latency_s" not in stats and "epoch_forecast_s" not in stats


def test_tensorboard_reads_back_the_figures(table, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    logger = TensorBoardLogger(writer, every_n_steps=2)
    loader = DataLoader(table, num_workers=2, **KW)
    written = [step for step, _ in enumerate(loader) if logger.log(loader, step)]
    writer.close()
    assert written == list(range(0, len(loader), 2))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("voxlake/samples", "voxlake/bytes_read", "voxlake/step_wait_p99_s",
                "voxlake/input_bound_fraction", "voxlake/window_samples_per_s", "voxlake/labels/1"):
        assert tag in tags, sorted(tags)
    samples = events.Scalars("voxlake/samples")
    assert [s.step for s in samples] == written
    assert [s.value for s in samples] == sorted(s.value for s in samples) and samples[-1].value > 0
    with pytest.raises(voxlake.ConfigError, match="no stats"):
        TensorBoardLogger(writer).log(torch.utils.data.DataLoader([1, 2]), 0)
    with pytest.raises(voxlake.ConfigError, match="every_n_steps"):
        TensorBoardLogger(writer, every_n_steps=0)


LIGHTNING = """
import sys
import torch
import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger
import voxlake
from voxlake.lightning import LoaderMonitor
from voxlake.torch import DataLoader

table, out, plain = sys.argv[1], sys.argv[2], sys.argv[3] == "plain"


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(24, 1)

    def training_step(self, batch, index):
        return self.layer(batch["tensor"].reshape(len(batch["id"]), -1)).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        if plain:
            return torch.utils.data.DataLoader(voxlake.torch.Dataset(table, batch_size=8), batch_size=None)
        return DataLoader(table, batch_size=8, shuffle=True, seed=3, num_workers=2)


trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=CSVLogger(out, name="run"),
                     callbacks=[LoaderMonitor(every_n_steps=3)], enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
try:
    trainer.fit(Model())
except voxlake.ConfigError as e:
    print("ConfigError:", e)
"""


@pytest.mark.parametrize("plain", [False, True])
def test_lightnings_loggers_get_the_figures(table, tmp_path, plain):
    pytest.importorskip("pytorch_lightning")
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, str(script), table, str(tmp_path / "logs"),
                           "plain" if plain else "voxlake"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    if plain:
        assert "ConfigError: LoaderMonitor: the Trainer's training dataloader has no stats()" in done.stdout
        return
    with open(tmp_path / "logs" / "run" / "version_0" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("voxlake/samples")]
    steps = [int(r["step"]) for r in rows]
    assert steps and all(s % 3 == 0 for s in steps), steps
    samples = [float(r["voxlake/samples"]) for r in rows]
    assert samples == sorted(samples) and samples[-1] > ROWS  # into the second epoch
    assert all(float(r["voxlake/step_waits"]) > 0 for r in rows)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_dataloader_after_ours_gets_plain_batches(table, workers):
    """The keys our DataLoader's batches carry (the workers' states and counters) are its own:
    the same Dataset under torch's DataLoader afterwards hands out batches without them."""
    from voxlake.torch import Dataset

    ds = Dataset(table, **KW)
    assert sum(1 for _ in DataLoader(ds, num_workers=workers)) > 0
    for batch in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers):
        assert not [k for k in batch if k.startswith("_voxlake")], sorted(batch)
