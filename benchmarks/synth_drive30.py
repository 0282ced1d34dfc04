"""Time the synthetic generator end to end, per stage: ``drive30`` on the GPU.

    python benchmarks/synth_drive30.py --device cuda:0                 # the benchmark (drive30)
    python benchmarks/synth_drive30.py --preset small --device cpu     # smoke test on a CPU
    python benchmarks/synth_drive30.py --device cuda:0 --runs 2        # cold (compiles) then warm

Stages come from ``nurec_usd.synth.generate``'s timer, which synchronises the device
(``wp.synchronize_device``) before closing each stage and reads ``time.perf_counter``:
scene build (host), kernel compile/load, BVH build (upload + ``wp.Mesh``), camera ray set-up,
camera rendering (kernels + device-to-host copies), lidar (kernels, copies, point compaction),
encoding/writing (what is left of the JPEG/PNG/.nrl/.npz writer threads once rendering is done,
plus the capture's validation). Writers run concurrently with rendering; ``writer_wait`` is how
long rendering was held up by them. The output goes to a temporary folder (deleted afterwards
unless ``--keep``); the table ends with a line to paste into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402

STAGES = [
    ("scene", "scene build (host: traffic, street, meshes)"),
    ("compile", "kernel compile / module load"),
    ("bvh", "BVH build + scene upload"),
    ("rays", "camera ray set-up"),
    ("cameras", "camera rendering (+ copies to host)"),
    ("lidar", "lidar (+ copies, compaction)"),
    ("writing", "encoding/writing (drain) + validation"),
]


def _du(path: Path | None) -> float:
    if path is None or not path.exists():
        return 0.0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="drive30", help="preset to generate (default: drive30)")
    parser.add_argument("--device", default="cuda:0", help="Warp device (default: cuda:0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spp", type=int, choices=(1, 5), default=None, help="override the preset's samples/pixel")
    parser.add_argument("--runs", type=int, default=1, help="generate this many times (the first may compile)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a temporary one)")
    parser.add_argument("--no-groundtruth", action="store_true", help="skip the ground truth")
    parser.add_argument("--keep", action="store_true", help="keep the generated output")
    args = parser.parse_args(argv)

    import warp as wp

    wp.config.log_level = 30
    import torch

    from nurec_usd.synth import get_preset
    from nurec_usd.synth.generator import generate, resolve_device

    preset = get_preset(args.preset)
    device = resolve_device(args.device)
    name = wp.get_device(device).name
    spp = args.spp or preset.spp
    n_cam_samples = preset.frames * sum(c.width * c.height for c in preset.cameras) * spp
    n_lidar_rays = preset.frames * preset.lidar.channels * preset.lidar.columns
    print(f"synth {preset.name} on {device} ({name}); warp {wp.config.version}, torch {torch.__version__}, "
          f"commit {commit()}")
    print(f"  {preset.frames} frames x {len(preset.cameras)} cameras ({n_cam_samples / 1e9:.2f} G camera samples, "
          f"spp {spp}), {preset.frames} sweeps x {preset.lidar.channels}x{preset.lidar.columns} "
          f"({n_lidar_rays / 1e6:.1f} M lidar rays), {len(preset.roles)} moving actors")
    root = args.out or Path(tempfile.mkdtemp(prefix="synth_bench_"))
    results = []
    try:
        for run in range(args.runs):
            out = root / f"{preset.name}_run{run}"
            gt = None if args.no_groundtruth else "auto"
            start = time.perf_counter()
            result = generate(preset, out, seed=args.seed, device=device, overwrite=True, spp=args.spp,
                              groundtruth_dir=gt)
            wall = time.perf_counter() - start
            results.append((result, wall, _du(result.capture_dir), _du(result.groundtruth_dir)))
            if not args.keep:
                shutil.rmtree(result.capture_dir, ignore_errors=True)
                if result.groundtruth_dir is not None:
                    shutil.rmtree(result.groundtruth_dir, ignore_errors=True)
    finally:
        if args.out is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    header = f"{'stage':48s}" + "".join(f"{f'run {i}':>10s}" for i in range(len(results)))
    print()
    print(header)
    print("-" * len(header))
    for key, label in STAGES:
        print(f"{label:48s}" + "".join(f"{r.timings.get(key, 0.0):10.2f}" for r, *_ in results))
    print(f"{'(rendering held up by writers)':48s}" + "".join(f"{r.timings.get('writer_wait', 0.0):10.2f}"
                                                          for r, *_ in results))
    print("-" * len(header))
    print(f"{'total (end to end)':48s}" + "".join(f"{wall:10.2f}" for _, wall, *_ in results))
    print()
    for i, (r, wall, cap_mb, gt_mb) in enumerate(results):
        cams = r.timings.get("cameras", 0.0)
        lid = r.timings.get("lidar", 0.0)
        print(f"run {i}: camera {n_cam_samples / max(cams, 1e-9) / 1e6:.0f} M samples/s incl. copies, "
              f"lidar {n_lidar_rays / max(lid, 1e-9) / 1e6:.0f} M rays/s incl. compaction; "
              f"capture {cap_mb:.0f} MB, ground truth {gt_mb:.0f} MB")
    best = min(wall for _, wall, *_ in results)
    today = datetime.date.today().isoformat()
    print()
    print("RESULTS.md line:")
    print(f"| {today} | {name} | {commit()} | `python benchmarks/synth_drive30.py --preset {preset.name} --device "
          f"{args.device}{' --runs ' + str(args.runs) if args.runs > 1 else ''}` | synth {preset.name}: "
          f"{best:.1f} s end to end (best of {len(results)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
