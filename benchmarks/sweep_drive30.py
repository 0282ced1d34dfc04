"""Compare training options on one capture: load it once, then build the scene once per option set.

    python benchmarks/sweep_drive30.py --device cuda:0 --capture CAPTURE \\
        --run "lr_sh0=5e-3" --run "lr_opacity=0.025 lr_scales=0.01" [--steps 3000] [--json results.json]
    python benchmarks/sweep_drive30.py --preset small --device cpu --steps 20 --run "sh_degree=0"   # smoke test

Each ``--run`` is one build's overrides (``KEY=VALUE`` pairs, as ``build --set`` takes them);
the preset's defaults run first (``--no-baseline`` skips them). A row is initialisation,
training and held-out evaluation, as ``nurec_usd.build`` runs them, without the export and
the files: the capture is decoded once for all rows, so a row costs its training and little
else. Options read at load time (``eval_every``, ``downscale``) cannot vary between rows.

Prints one table row per build as it finishes (init and train seconds, it/s, Gaussians,
held-out PSNR / SSIM, lidar median range error and hit accuracy); ``--json`` also writes the
rows, rewritten after each one so that an interrupted sweep keeps what it finished.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402
from nurec_usd.cli import parse_option  # noqa: E402

LOAD_OPTIONS = ("eval_every", "downscale")  # fixed when the capture is decoded: the same for every row


def parse_run(text: str) -> dict[str, object]:
    """One ``--run``: space-separated ``KEY=VALUE`` pairs (none: the defaults)."""
    return dict(parse_option(item) for item in text.split())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="drive30", help="synth preset when no --capture is given")
    parser.add_argument("--build-preset", default="fast", choices=("fast", "quality"))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--capture", type=Path, default=None, help="an existing capture instead of generating one")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps of every row that sets none (default: the preset's)")
    parser.add_argument("--run", action="append", default=[], type=parse_run, metavar='"KEY=VALUE ..."',
                        help="one build's overrides (repeatable)")
    parser.add_argument("--no-baseline", action="store_true", help="do not build the preset's defaults first")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()

    from nurec_usd.train.config import make_config, option_names, unknown_option

    runs = ([] if args.no_baseline else [{}]) + args.run
    if not runs:
        parser.error("nothing to run: give --run, or drop --no-baseline")
    for options in runs:
        for key in options:
            if key not in option_names():
                parser.error(f"--run {key}: {unknown_option(key)}")
            if key in LOAD_OPTIONS:
                parser.error(f"--run {key}: a load option, the same for every row (the capture is decoded once)")
    try:  # values of the wrong type are usage errors too, before anything loads
        configs = [make_config(args.build_preset, device=args.device, **{"steps": args.steps, **options})
                   for options in runs]
    except ValueError as err:
        parser.error(f"--run: {err}")

    import torch

    from nurec_usd.capture.importers import load_any
    from nurec_usd.evaluation import evaluate
    from nurec_usd.ops.warmup import KernelWarmup
    from nurec_usd.ops.warp_torch import init_warp
    from nurec_usd.pipeline import initial_scene, resolve_device
    from nurec_usd.synth import generate, get_preset
    from nurec_usd.train.data import CaptureData
    from nurec_usd.train.trainer import Trainer

    dev = resolve_device(args.device)
    init_warp()
    warmup = KernelWarmup(dev)
    work = Path(tempfile.mkdtemp(prefix="sweep_"))
    rows: list[dict[str, object]] = []
    try:
        capture = args.capture
        if capture is None:
            t0 = time.perf_counter()
            capture = generate(get_preset(args.preset), work / "capture", seed=0, groundtruth_dir=None,
                               device=args.device).capture_dir
            print(f"synth {args.preset}: {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        cap = load_any(capture)
        first = configs[0].train
        data = CaptureData(cap, dev, eval_every=first.eval_every, downscale=first.downscale)
        warmup.wait()
        gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        print(f"loaded {cap.name} in {time.perf_counter() - t0:.1f} s on {gpu}, commit {commit()}, "
              f"{datetime.date.today()}", flush=True)
        print("| options | init | train | it/s | Gaussians | held-out PSNR | SSIM | lidar median error | hit accuracy |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
        for options, config in zip(runs, configs):
            torch.manual_seed(config.train.seed)
            t0 = time.perf_counter()
            scene = initial_scene(cap, data, config.init)
            init_s = time.perf_counter() - t0
            result = Trainer(scene, data, config.train).run(config.budget_s)
            metrics = evaluate(scene, data)
            label = " ".join(f"{k}={v}" for k, v in options.items()) or "(defaults)"
            row = {"options": options, "status": result.status, "init_s": init_s, "train_s": result.seconds,
                   "steps": result.steps, "it_per_s": result.steps / max(result.seconds, 1e-9),
                   "gaussians": scene.num_gaussians, "psnr": metrics["psnr"], "ssim": metrics["ssim"],
                   "lidar_median_range_error_m": metrics.get("lidar_median_range_error_m", float("nan")),
                   "lidar_hit_accuracy": metrics.get("lidar_hit_accuracy", float("nan"))}
            rows.append(row)
            status = "" if result.status == "completed" else f" ({result.status})"
            print(f"| {label}{status} | {init_s:.1f} s | {result.seconds:.1f} s | {row['it_per_s']:.1f} | "
                  f"{row['gaussians']:,} | {row['psnr']:.2f} dB | {row['ssim']:.3f} | "
                  f"{row['lidar_median_range_error_m']:.3f} m | {row['lidar_hit_accuracy']:.3f} |", flush=True)
            if args.json is not None:
                tmp = args.json.with_name(args.json.name + ".tmp")
                tmp.write_text(json.dumps({"commit": commit(), "gpu": gpu, "rows": rows}, indent=1))
                os.replace(tmp, args.json)
            del scene
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["status"] != "diverged" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
