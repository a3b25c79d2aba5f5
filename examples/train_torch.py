"""The Rust example `train` in PyTorch: a small 3D CNN (Conv3d blocks with batch norm and
residual connections, global max and mean pooling, a linear head) learns the synthetic demo
table through `voxlake.torch.Dataset`; a validation split by id hash (FNV-1a, as the Rust
example); loss and held-out accuracy per epoch.

    scripts/demo.sh    # writes demo-data/table
    python examples/train_torch.py --table demo-data/table --epochs 5
    torchrun --nproc-per-node 2 examples/train_torch.py --table demo-data/table --epochs 2

Under torchrun each rank reads its own share: the ranks' ids are gathered after each epoch and
checked disjoint, with the same number of batches on every rank. On a GPU (`--device cuda`, the
default where one is found; a rank takes `cuda:LOCAL_RANK` and NCCL) the batches arrive through
`voxlake.torch.to_device`: staged in page-locked buffers, copied without blocking the loop.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from voxlake.torch import Dataset, to_device


class Block(nn.Module):
    """Conv3d -> batch norm -> ReLU, twice, with a residual connection."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = nn.Conv3d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm3d(c)
        self.c2 = nn.Conv3d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm3d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + x)


class Net(nn.Module):
    def __init__(self, channels: int, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv3d(channels, width, 3, padding=1, stride=2)
        self.bn = nn.BatchNorm3d(width)
        self.r1, self.r2 = Block(width), Block(width)
        self.head = nn.Linear(2 * width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.r2(self.r1(F.relu(self.bn(self.stem(x)))))
        # Global max and mean pooling: a local anomaly shows in the max.
        pooled = torch.cat([h.amax(dim=(2, 3, 4)), h.mean(dim=(2, 3, 4))], dim=1)
        out: torch.Tensor = self.head(pooled)
        return out


def is_validation(sample_id: str) -> bool:
    """Validation membership by id hash (FNV-1a): the same split on every run."""
    h = 0xCBF29CE484222325
    for b in sample_id.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % 5 == 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--table", required=True)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(0)
    torch.set_num_threads(2)

    ds = Dataset(args.table, batch_size=args.batch_size, shuffle=True, seed=7, shuffle_buffer=512,
                 channels_first=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.workers)
    model: nn.Module = Net(channels=next(iter(loader))["tensor"].shape[1]).to(device)
    if dist.is_initialized():
        ids_of_device = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids_of_device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = time.monotonic()
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        model.train()
        losses: List[float] = []
        held: List[Tuple[torch.Tensor, torch.Tensor]] = []
        ids: List[str] = []
        batches = 0
        for batch in to_device(loader, device) if device.type == "cuda" else loader:
            batches += 1
            ids.extend(batch["id"])
            mask = torch.tensor([is_validation(i) for i in batch["id"]], device=device)
            x, y = batch["tensor"], batch["label"]
            if mask.any():
                held.append((x[mask], y[mask]))
            if (~mask).sum() > 1:
                loss = F.cross_entropy(model(x[~mask]), y[~mask])
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                losses.append(loss.item())
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in held:
                correct += int((model(x).argmax(1) == y).sum())
                total += len(y)
        line = (f"rank={rank} epoch={epoch} loss={sum(losses) / max(len(losses), 1):.4f} "
                f"val_acc={correct / max(total, 1):.3f} val_n={total} batches={batches} "
                f"elapsed_s={time.monotonic() - start:.1f}")
        print(line, flush=True)
        if dist.is_initialized():
            report(ids, batches)
    if dist.is_initialized():
        dist.destroy_process_group()


def report(ids: List[str], batches: int) -> None:
    """Rank 0 checks that the ranks' rows were disjoint and their batch counts equal."""
    gathered: List[Dict[str, Any]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, {"ids": ids, "batches": batches})
    if dist.get_rank() != 0:
        return
    counts = [g["batches"] for g in gathered]
    sets = [set(g["ids"]) for g in gathered]
    overlap = len(set.intersection(*sets)) if len(sets) > 1 else 0
    print(f"ranks: batches {counts} (equal: {len(set(counts)) == 1}), rows {[len(s) for s in sets]}, "
          f"rows read by more than one rank: {overlap}", flush=True)


if __name__ == "__main__":
    main()
