"""The sweeps of a capture read alone (no image decoding beside them), part by part.

    python benchmarks/sweep_reads.py CAPTURE [--device cuda:0]

Prints the wall time of: every sweep read onto the device (serially, then in 6 read-ahead
threads as ``CaptureData`` does), checked and split there, turned into range images in batches,
and the host's checked reading (``Lidar.load_sweep``) for comparison. Then ``CaptureData`` (the
build's load) three ways: the sweeps alone, the images alone, and both, as a build loads them
(the images decoding while the sweeps are read).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nurec_usd.capture import load_capture  # noqa: E402
from nurec_usd.train.data import RANGE_IMAGE_BATCH, CaptureData, range_images  # noqa: E402
from nurec_usd.train.sweep_reads import checked_sweep, read_columns  # noqa: E402
from nurec_usd.util.prefetch import prefetched  # noqa: E402
from nurec_usd.util.profiling import StageClock  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    capture = load_capture(args.capture)
    lidar = next(iter(capture.lidars.values()))
    dev = torch.device(args.device)
    model = lidar.sensor_model(dtype=torch.float64, device=dev)
    count = len(lidar.sweeps)

    def timed(name: str, work):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        result = work()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        print(f"{name:<44} {time.perf_counter() - t0:6.2f} s", flush=True)
        return result

    columns = timed(f"read onto {dev}, serially, x{count}", lambda: [read_columns(lidar, i, dev) for i in range(count)])
    timed(f"read onto {dev}, 6 threads, x{count}",
          lambda: list(prefetched(lambda i: read_columns(lidar, i, dev), range(count), workers=6, depth=12)))
    sweeps = timed(f"checked and split there, x{count}",
                   lambda: [checked_sweep(c, lidar, i, None, capture.start_us) for i, c in enumerate(columns)])
    batch = [(s.points, s.intensity, s.channel) for s in sweeps]
    timed(f"range images, batches of {RANGE_IMAGE_BATCH}",
          lambda: [range_images(batch[i:i + RANGE_IMAGE_BATCH], model, lidar.channels, lidar.columns)
                   for i in range(0, count, RANGE_IMAGE_BATCH)])
    timed(f"host: Lidar.load_sweep, x{count}", lambda: [lidar.load_sweep(i) for i in range(count)])
    columns = sweeps = batch = None  # free the device memory before the loads below
    for what, part in (("sweeps alone", dataclasses.replace(capture, cameras={})),
                       ("images alone", dataclasses.replace(capture, lidars={})), ("both", capture)):
        clock = StageClock()
        timed(f"CaptureData, {what}", lambda: CaptureData(part, dev, clock=clock))
        print("    " + ", ".join(f"{name} {clock.seconds(name):.2f} s" for name in ("cameras", "sweeps",
                                                                                     "images (after the sweeps)")))


if __name__ == "__main__":
    main()
