"""Build ``drive30`` with the USD export (and a ``.usdz``), then replay it from the USD alone on the GPU.

    python benchmarks/replay_drive30.py --device cuda:0
    python benchmarks/replay_drive30.py --preset small --device cpu --steps 20 --downscale 4   # smoke test

Reports the export (stage seconds, size of every file), how long opening the stage takes, and for
every held-out camera frame and lidar sweep: the PSNR between the USD replay and the in-memory
render of the same frame (the bar is 50 dB), and the time per view of the replay and of the
in-memory render (CUDA events around a second render of each view, past the first ``--warmup``
views; medians). The last lines are rows for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402
from benchmarks.timing import median_ms  # noqa: E402


def _profile(replay, camera: str, times: list[float], downscale: int) -> None:
    """Where a camera replay's time goes: torch profiler over a few views (CPU and CUDA time per op)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for t in times:
            replay.render_camera(camera, t, downscale)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="drive30", help="synth preset (default: drive30)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--downscale", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3, help="untimed replay frames per sensor first")
    parser.add_argument("--profile", action="store_true",
                        help="also print where one camera replay's time goes (torch profiler)")
    args = parser.parse_args()

    import torch

    from nurec_usd import build
    from nurec_usd.capture.loader import load_capture
    from nurec_usd.render.scene_renderer import SceneRenderer
    from nurec_usd.replay.stage import Replay
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.synth import generate, get_preset
    from nurec_usd.train.data import CaptureData
    from nurec_usd.train.metrics import psnr

    work = Path(tempfile.mkdtemp(prefix="replay_bench_"))
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    try:
        capture = generate(get_preset(args.preset), work / "capture", seed=0, groundtruth_dir=None,
                           device=args.device).capture_dir
        t0 = time.perf_counter()
        result = build(capture, work / "run", device=args.device, steps=args.steps, downscale=args.downscale,
                       usdz=True, progress=False)
        wall = time.perf_counter() - t0
        usd_dir = work / "run" / "usd"
        sizes = {str(p.relative_to(usd_dir)): p.stat().st_size for p in sorted(usd_dir.rglob("*")) if p.is_file()}
        print(f"build {wall:.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in result.stage_seconds.items()))
        for name, size in sizes.items():
            if not name.startswith("actors/"):
                print(f"  {name:<18} {size / 1e6:9.1f} MB")
        actor_mb = sum(v for k, v in sizes.items() if k.startswith("actors/")) / 1e6
        print(f"  actors/*.usdc      {actor_mb:9.1f} MB ({sum(k.startswith('actors/') for k in sizes)} files)")

        t0 = time.perf_counter()
        replay = Replay(usd_dir / "root.usda", device=args.device)
        open_s = time.perf_counter() - t0
        print(f"replay: opened the stage in {open_s:.2f} s")
        scene = Scene.load(work / "run" / "scene.pt", device=args.device)
        renderer = SceneRenderer(scene)
        data = CaptureData(load_capture(capture), args.device, downscale=args.downscale)
        rows = []
        with torch.no_grad():
            for kind, refs in (("camera", data.eval_frames), ("lidar", data.eval_sweeps)):
                times, model_times, scores = [], [], []
                for i, ref in enumerate(refs):
                    if kind == "camera":
                        sensor = data.cameras[ref.camera].id
                        want = renderer.camera(data.camera_view(ref)).image.clamp(0, 1)
                        render = lambda: replay.render_camera(sensor, ref.time_s, args.downscale)  # noqa: E731
                        in_memory = lambda: renderer.camera(data.camera_view(ref))  # noqa: E731
                        got = render().clamp(0, 1)
                    else:
                        sensor = data.lidars[ref.lidar].id
                        batch, t = data.lidar_batch(ref)
                        scale = data.lidars[ref.lidar].template.max_range
                        want = (renderer.lidar(batch, t).range / scale).clamp(0, 1)
                        render = lambda: replay.render_lidar(sensor, ref.time_s)  # noqa: E731
                        in_memory = lambda: renderer.lidar(batch, t)  # noqa: E731
                        got = (render().range / scale).clamp(0, 1)
                    scores.append(float(psnr(got, want)))
                    if i >= args.warmup:  # the first views of a kind compile and allocate
                        times.append(median_ms(render, torch.device(args.device), reps=1, warmup=0))
                        model_times.append(median_ms(in_memory, torch.device(args.device), reps=1, warmup=0))
                if scores:
                    med = statistics.median(times) if times else float("nan")
                    med_model = statistics.median(model_times) if model_times else float("nan")
                    rows.append((kind, len(scores), min(scores), statistics.median(scores), med, med_model))
                    print(f"{kind}: {len(scores)} held-out views; replay vs model PSNR min {min(scores):.1f} dB, "
                          f"median {statistics.median(scores):.1f} dB; replay {med:.1f} ms per view, in-memory "
                          f"render {med_model:.1f} ms (medians)")
            if args.profile and data.eval_frames:
                _profile(replay, data.cameras[data.eval_frames[0].camera].id,
                         [f.time_s for f in data.eval_frames[:5]], args.downscale)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    today, rev = datetime.date.today(), commit()
    total_mb = sum(v for k, v in sizes.items() if k != "scene.usdz") / 1e6
    print(f"| {today} | {gpu} | {rev} | {args.preset} | export {result.stage_seconds.get('export', 0):.1f} s | "
          f"USD {total_mb:.1f} MB | usdz {sizes.get('scene.usdz', 0) / 1e6:.1f} MB | open {open_s:.2f} s |")
    for kind, n, lo, mid, ms, ms_model in rows:
        print(f"| {today} | {gpu} | {rev} | {args.preset} {kind} | {n} | {lo:.1f} | {mid:.1f} | {ms:.1f} | "
              f"{ms_model:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
