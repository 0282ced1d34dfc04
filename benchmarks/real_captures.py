"""Build every real capture in ../shared/data and print one table of their held-out figures.

    python benchmarks/real_captures.py --device cuda:0                       # the fast preset, as a user runs it
    python benchmarks/real_captures.py --device cpu --steps 30 --downscale 8 --set voxel_m=0.5 \\
        --set max_gaussians=30000                                            # a small CPU run (not GPU figures)
    python benchmarks/real_captures.py --device cuda:0 --set frame_appearance=gain_bias --json real.json

The captures (each skipped, with a line saying so, when absent): ``kitti_udacity`` (a 2 s KITTI
drive, moving ego, held out with ``--eval-every 4``) and ``tri_dgp`` (a DGP scene of 3
timestamps, static ego, ``--eval-every 2``). Each row is one ``nurec_usd.build`` into a
temporary folder: held-out PSNR, SSIM, the mean-colour baseline PSNR, the lidar median range
error and hit accuracy, what the ego options found (the lidar box, the points dropped, the
largest share of a camera masked) and the wall time of the whole build (load to export).
``--json`` writes the rows with the settings and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402
from nurec_usd.cli import parse_option  # noqa: E402

DATA = REPO.parent / "shared" / "data"
# name: (path under the data folder, eval_every)
CAPTURES = {"kitti_udacity": ("kitti_udacity/2011_09_26", 4), "tri_dgp": ("tri_dgp/scene_dataset_v1.0.json", 2)}


def run_one(path: Path, eval_every: int, args: argparse.Namespace, options: dict, sheet_as: Path | None = None) -> dict:
    """One build of a capture; returns its row. ``sheet_as``: where to keep its held-out contact sheet."""
    from nurec_usd import build

    with tempfile.TemporaryDirectory(prefix="real_capture_") as tmp:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the importers' notes on what the source lacks
            result = build(path, Path(tmp) / "run", preset=args.preset, device=args.device, steps=args.steps,
                           downscale=args.downscale, eval_every=eval_every, progress=False,
                           log=(lambda m: print(f"  {m}", file=sys.stderr)) if args.verbose else (lambda _m: None),
                           **options)
        wall = time.perf_counter() - started
        m = json.loads((Path(tmp) / "run" / "metrics.json").read_text())
        sheet = Path(tmp) / "run" / "eval_sheet.png"
        if sheet_as is not None and sheet.is_file():
            sheet_as.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(sheet, sheet_as)
    ego = m.get("ego", {})
    shares = [c.get("share", 0.0) for c in ego.get("cameras", {}).values()]
    return {"status": result.status, "steps": m.get("steps"), "held_out_frames": m.get("held_out_frames"),
            "held_out_sweeps": m.get("held_out_sweeps"), "psnr": m.get("psnr"), "ssim": m.get("ssim"),
            "baseline_psnr": m.get("baseline_psnr"), "lidar_median_range_error_m": m.get("lidar_median_range_error_m"),
            "lidar_hit_accuracy": m.get("lidar_hit_accuracy"), "ego_box": ego.get("box"),
            "ego_dropped_lidar_points": ego.get("dropped_lidar_points"),
            "ego_max_mask_share": max(shares) if shares else 0.0, "gaussians": m.get("gaussians"), "wall_s": wall}


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--preset", default="fast")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the preset's)")
    parser.add_argument("--downscale", type=int, default=1, help="shrink the images by this factor")
    parser.add_argument("--set", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                        help="a build option for every capture, as build --set takes it (repeatable)")
    parser.add_argument("--captures", default=",".join(CAPTURES), help="comma-separated: " + ", ".join(CAPTURES))
    parser.add_argument("--data", type=Path, default=DATA, help="the real data folder (default: ../shared/data)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--verbose", action="store_true", help="print the builds' messages")
    parser.add_argument("--sheets", type=Path, default=None,
                        help="keep each build's held-out contact sheet here, as CAPTURE.png")
    args = parser.parse_args(argv)
    options = dict(args.set)
    names = [c for c in args.captures.split(",") if c]
    unknown = [n for n in names if n not in CAPTURES]
    if unknown:
        parser.error(f"unknown capture(s) {', '.join(unknown)}; known: {', '.join(CAPTURES)}")
    print(f"preset {args.preset}, device {args.device}, steps {args.steps or 'preset'}, downscale {args.downscale}"
          + (", " + " ".join(f"{k}={v}" for k, v in options.items()) if options else "") + f", commit {commit()}")
    print(f"{'capture':<14} {'eval':>4} {'steps':>5} {'PSNR':>6} {'SSIM':>6} {'base':>6} {'lidar m':>8} "
          f"{'hit':>5} {'ego box':>26} {'dropped':>8} {'mask':>5} {'wall s':>7}")
    rows = {}
    for name in names:
        rel, eval_every = CAPTURES[name]
        path = args.data / rel
        if not path.exists():
            print(f"{name:<14} not found under {args.data}; skipped")
            continue
        r = run_one(path, eval_every, args, options, None if args.sheets is None else args.sheets / f"{name}.png")
        rows[name] = {"eval_every": eval_every, **r}
        print(f"{name:<14} {eval_every:>4} {r['steps']:>5} {_f(r['psnr'], '.2f'):>6} {_f(r['ssim'], '.3f'):>6} "
              f"{_f(r['baseline_psnr'], '.2f'):>6} {_f(r['lidar_median_range_error_m'], '.3f'):>8} "
              f"{_f(r['lidar_hit_accuracy'], '.3f'):>5} {r['ego_box'] or 'none':>26} "
              f"{_f(r['ego_dropped_lidar_points'], ','):>8} {r['ego_max_mask_share']:>5.1%} {r['wall_s']:>7.1f}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"date": datetime.date.today().isoformat(), "commit": commit(),
                                         "preset": args.preset, "device": args.device, "steps": args.steps,
                                         "downscale": args.downscale, "options": options, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
