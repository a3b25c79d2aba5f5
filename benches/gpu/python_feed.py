"""The Python package's feed into a device, as a PyTorch training loop has it (issue 31): the
batches of `voxlake.Loader` moved by `voxlake.torch.to_device` (`--feed staged`: staged in a
ring of page-locked buffers, copied with `non_blocking=True`), or as torch tensors without a
copy (`torch.from_numpy`) then `pin_memory()` and `.to(device, non_blocking=True)` in the loop
as `DataLoader(pin_memory=True)` does (`--feed pin_memory`); every value summed on the device.
Prints one JSON line with the keys of `voxlake bench --json` that benches/gpu/summary.py reads,
for the same run (`--shuffle --epochs 2`, batches of 32).

usage: python_feed.py TABLE --seed S [--device cuda|cpu] [--feed staged|pin_memory]
                      [--epochs 2] [--batch-size 32] [--step NAME]
"""

import argparse
import json
import time

import torch

import voxlake
import voxlake.torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--feed", choices=["staged", "pin_memory"], default="staged")
    p.add_argument("--step", help="the step's name in the JSON (default python_FEED_DEVICE)")
    a = p.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    start = time.perf_counter()
    loader = voxlake.Loader(a.table, batch_size=a.batch_size, epochs=a.epochs, shuffle=True,
                            seed=a.seed)
    total = torch.zeros((), dtype=torch.float64, device=device)
    samples = batches = 0
    tensor_bytes = 0
    first_batch_s = None
    def pinned(batches):
        for batch in batches:
            x = torch.from_numpy(batch["tensor"])
            yield {"tensor": x.pin_memory().to(device, non_blocking=True) if cuda else x}

    feed = voxlake.torch.to_device(loader, device) if a.feed == "staged" else pinned(loader)
    for batch in feed:
        x = batch["tensor"]
        total += x.sum(dtype=torch.float64)
        samples += x.shape[0]
        batches += 1
        tensor_bytes += x.numel() * x.element_size()
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - start
    checksum = total.item()  # waits for the device
    seconds = time.perf_counter() - start
    print(json.dumps({
        "step": a.step or f"python_{a.feed}_" + ("device" if cuda else "cpu"), "samples": samples, "batches": batches,
        "seconds": seconds, "samples_per_s": samples / seconds,
        "mb_per_s": tensor_bytes / 1e6 / seconds, "first_batch_s": first_batch_s or 0.0,
        "checksum": checksum, "device": str(device),
    }))


if __name__ == "__main__":
    main()
