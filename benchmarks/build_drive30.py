"""Build the synthetic ``drive30`` capture end to end on the GPU and report what the issue asks for.

    python benchmarks/build_drive30.py --device cuda:0                   # generate drive30, then build (fast)
    python benchmarks/build_drive30.py --device cuda:0 --steps 5000      # more steps
    python benchmarks/build_drive30.py --preset small --device cpu --steps 20   # smoke test on a CPU
    python benchmarks/build_drive30.py --device cuda:0 --set lidar_range_weight=0.5  # any train/init option

Generates the capture with ``nurec_usd.synth`` (no ground-truth files: the held-out frames
and sweeps are the reference), runs ``nurec_usd.build`` and prints wall time per stage,
iterations per second, peak GPU memory, the Gaussian count, held-out PSNR / SSIM (and the
mean-colour baseline) and the held-out lidar range error; the last line is a row for
benchmarks/RESULTS.md. ``--out DIR`` keeps the run directory (metrics, eval sheet).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402
from nurec_usd.cli import parse_option  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="drive30", help="synth preset (default: drive30)")
    parser.add_argument("--build-preset", default="fast", choices=("fast", "quality"))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--capture", type=Path, default=None, help="an existing capture instead of generating one")
    parser.add_argument("--out", type=Path, default=None, help="keep the run directory here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=parse_option,
                        help="override a training or init option (repeatable), e.g. lidar_every=2")
    args = parser.parse_args()
    overrides = dict(args.set)
    from nurec_usd.train.config import option_names, unknown_option

    for key in overrides:
        if key not in option_names():  # e.g. device: a flag of its own here
            parser.error(f"--set {key}: {unknown_option(key)}")
    if "steps" in overrides and args.steps is not None:
        parser.error("give the steps once: --steps or --set steps=N")
    options = {"steps": args.steps, **overrides}
    from nurec_usd.train.config import make_config

    try:  # a value of the wrong type is a usage error too, before the capture is generated
        make_config(args.build_preset, **options)
    except ValueError as err:
        parser.error(f"--set: {err}")

    import torch

    from nurec_usd import build
    from nurec_usd.synth import generate, get_preset

    work = Path(tempfile.mkdtemp(prefix="build_bench_"))
    try:
        capture = args.capture
        synth_s = 0.0
        if capture is None:
            t0 = time.perf_counter()
            capture = generate(get_preset(args.preset), work / "capture", seed=0, groundtruth_dir=None,
                               device=args.device).capture_dir
            synth_s = time.perf_counter() - t0
            print(f"synth {args.preset}: {synth_s:.1f} s", flush=True)
        out = args.out or work / "run"
        t0 = time.perf_counter()
        result = build(capture, out, preset=args.build_preset, device=args.device, budget_s=args.budget_s,
                       progress=False, overwrite=True, **options)
        wall = time.perf_counter() - t0
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "capture", ignore_errors=True)
    m = result.metrics
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(json.dumps({k: v for k, v in m.items() if k not in ("frames", "sweeps")}, indent=1))
    print(f"\nbuild {args.preset} ({args.build_preset}) on {gpu}: status {result.status} ({result.message})"
          + (f"; options {overrides}" if overrides else ""))
    print("stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.stage_seconds.items())
          + f"; build wall {wall:.1f}")
    print(f"{m['steps']} steps at {m['steps_per_second']:.1f} it/s; Gaussians {m['gaussians']:,} "
          f"({m['static_gaussians']:,} static, {m['actor_gaussians']:,} actor); peak GPU memory "
          f"{m.get('peak_gpu_memory_gib', float('nan')):.1f} GiB")
    print(f"held-out: PSNR {m['psnr']:.2f} dB (mean-colour baseline {m['baseline_psnr']:.2f}), SSIM {m['ssim']:.3f} "
          f"over {m['held_out_frames']} frames; lidar median range error "
          f"{m.get('lidar_median_range_error_m', float('nan')):.3f} m, hit accuracy "
          f"{m.get('lidar_hit_accuracy', float('nan')):.3f} over {m['held_out_sweeps']} sweeps")
    s = result.stage_seconds
    print(f"| {datetime.date.today()} | {gpu} | {commit()} | {args.preset} {args.build_preset} | "
          f"{s.get('load', 0):.1f} | {s.get('init', 0):.1f} | {s.get('train', 0):.1f} | {s.get('eval', 0):.1f} | "
          f"{s.get('export', 0):.1f} | {m['steps_per_second']:.1f} | {m.get('peak_gpu_memory_gib', 0):.1f} | "
          f"{m['gaussians']:,} | {m['psnr']:.2f} | {m.get('lidar_median_range_error_m', float('nan')):.3f} |")
    return 0 if result.status != "diverged" else 1


if __name__ == "__main__":
    sys.exit(main())
