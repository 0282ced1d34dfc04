"""A capture's images decoded alone, several ways and thread counts: what sets the load's time.

    python benchmarks/image_decode.py CAPTURE [--device cuda:0] [--threads 1,4,8,16]

Prints the wall time of decoding every image of every camera: the files' bytes read; PIL's
decode alone (``Image.load``, no array); PIL's decode and its pixels as a numpy array
(``read_rgb``); libjpeg-turbo through simplejpeg into a buffer (``read_rgb_into``); and the
build's path (``CaptureData``'s decode into the image store on the device) with either decoder.
How far N threads fall short of N times one thread says how much of the work holds Python's lock.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nurec_usd.capture import images, load_capture  # noqa: E402
from nurec_usd.capture.images import read_rgb, read_rgb_into  # noqa: E402
from nurec_usd.train.data import _decode_into, _new_image_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--threads", default="1,4,8,16")
    args = parser.parse_args()
    capture = load_capture(args.capture)
    dev = torch.device(args.device)
    cameras = list(capture.cameras.values())
    frames = [(ci, fi, frame) for ci, cam in enumerate(cameras) for fi, frame in enumerate(cam.frames)]
    stores = [_new_image_store(len(cam.frames), (cam.width, cam.height), dev, True) for cam in cameras]
    print(f"{len(frames)} images of {len(cameras)} cameras, {cameras[0].width}x{cameras[0].height}, "
          f"{frames[0][2].image_path.suffix}", flush=True)

    def pil_load(frame) -> None:
        with Image.open(frame.image_path) as im:
            im.load()

    buffers = threading.local()

    def fast_decode(frame) -> None:
        if not hasattr(buffers, "out"):
            buffers.out = np.empty((cameras[0].height, cameras[0].width, 3), np.uint8)
        read_rgb_into(frame.image_path, buffers.out)

    fast = images.simplejpeg
    ways = {
        "file bytes read": (None, lambda ci, fi, frame: frame.image_path.read_bytes()),
        "PIL decode (Image.load)": (None, lambda ci, fi, frame: pil_load(frame)),
        "PIL decode + numpy (read_rgb)": (None, lambda ci, fi, frame: read_rgb(frame.image_path)),
        "simplejpeg into a buffer (read_rgb_into)": (fast, lambda ci, fi, frame: fast_decode(frame)),
        f"build's decode into {dev}, PIL": (None, lambda ci, fi, frame: _decode_into(stores[ci], fi, frame, 1)),
        f"build's decode into {dev}, simplejpeg": (fast, lambda ci, fi, frame: _decode_into(stores[ci], fi, frame, 1)),
    }
    counts = [int(n) for n in args.threads.split(",")]
    rows = []
    for name, (decoder, fn) in ways.items():
        if "simplejpeg" in name and decoder is None:
            print(f"{name:<44} (simplejpeg is not installed)")
            continue
        images.simplejpeg = decoder
        figures = []
        for n in counts:
            with ThreadPoolExecutor(max_workers=n) as pool:
                list(pool.map(lambda item: fn(*item), frames[:n]))  # warm the threads
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                list(pool.map(lambda item: fn(*item), frames))
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                figures.append(time.perf_counter() - t0)
        rows.append((name, figures))
        print(f"{name:<44} " + " ".join(f"{t:7.2f} s" for t in figures), flush=True)
    images.simplejpeg = fast
    print()
    print(f"{'threads':<44} " + " ".join(f"{n:>9}" for n in counts))
    for name, figures in rows:
        print(f"{name:<44} " + " ".join(f"{t:7.2f} s" for t in figures))


if __name__ == "__main__":
    main()
