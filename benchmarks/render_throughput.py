"""`render-throughput`: the Renderer's megapixels and lidar rays per second, and the garden rows
against gsplat's forward on identical inputs.

    python benchmarks/render_throughput.py --device cuda:0                      # synth + build drive30 first
    python benchmarks/render_throughput.py --device cuda:0 --scene RUN          # an existing run or export
    python benchmarks/render_throughput.py --device cpu --preset tiny --steps 4 --build-downscale 4 \\
        --downscale 4 --batches 1,2 --reps 2 --garden-downscale 8 --garden-configs 0      # smoke test

Scene rows: ``nurec_usd.replay.Renderer`` opened from the scene's USD renders every camera of the
rig (drive30: 6 x 1280x720) at B times per call (``--batches``), with the actors placed per
camera readout (``actor_time="readout"``: drive30's cameras have five readout times, so five
renders per time) and once per resolution (``"batch"``: one render of all six per time, as the
training forward does). Times are spread over the capture, on the device. Per call: CUDA events
around it from an idle device (``per call``) and over calls queued back to back (``streamed``:
an RL or simulation loop), medians after warm-up (the warm-up also sizes the intersection
buffers). MP/s counts output pixels: B x cameras x width x height per call. ``replay`` is the
per-view path the Renderer replaces (``Replay.render_camera``, one camera per call). Lidar rows:
every lidar of the rig at B times per call; M rays/s counts channels x columns per sweep.

Garden rows (``--garden``, default ``../shared/data/garden/test_garden.npz`` when present): the
four configurations of ``benchmarks/raster_camera.py`` (its inputs, seed 0), our forward as the
Renderer runs it per (time, resolution) group (``render_cameras`` under ``torch.no_grad`` with a
fixed capacity and no depth), the same through ``GraphedCameraRenderer``, and gsplat's
``rasterization`` forward with all cameras in one call, on identical inputs (our principal point
shifted by half a pixel, as there; the PSNR between the two images checks it). gsplat rows are
left out when gsplat is not importable. The last lines are rows for benchmarks/RESULTS.md.
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
from benchmarks.timing import median_ms, stream_ms  # noqa: E402

GARDEN = REPO.parent / "shared" / "data" / "garden" / "test_garden.npz"


def rate(x: float | None) -> str:
    """A rate as the table shows it: thousands separated on a GPU, three digits on a CPU smoke run."""
    if x is None or x != x:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def scene_rows(renderer, device, batches: list[int], reps: int, downscale: int) -> list[dict]:
    import torch

    cams, lidars = list(renderer.cameras), list(renderer.lidars)
    span = (renderer.start_s, renderer.end_s - max([lid.period_s for lid in renderer.lidars.values()], default=0.0))
    rows = []
    for b in batches:
        # B times spread over the capture, on the device (host values would be checked, and copied, per call)
        times = torch.linspace(span[0] + 0.05 * (span[1] - span[0]), span[1], b, dtype=torch.float64, device=device)
        pixels = sum((c.width // downscale) * (c.height // downscale) for c in renderer.cameras.values())
        for actor_time in ("readout", "batch"):
            def call():
                return renderer.render(times, cameras=cams, downscale=downscale, actor_time=actor_time)

            for _ in range(3):  # sizes the buffers, and grows them to what these poses need
                out = call()
            overflow = bool(out.overflow)
            per_call = median_ms(call, device, reps)
            streamed = stream_ms(call, device, calls=max(2, reps // 2))
            rows.append({"what": f"cameras, actor_time={actor_time}", "B": b, "views": b * len(cams),
                         "MP": b * pixels / 1e6, "ms": per_call, "stream_ms": streamed,
                         "MP/s": b * pixels / 1e3 / per_call, "MP/s streamed": b * pixels / 1e3 / streamed,
                         "overflow": overflow})
            print(rows[-1], flush=True)
        if lidars:
            rays = sum(lid.model.channels * lid.model.columns for lid in renderer.lidars.values())

            def sweep():
                return renderer.render(times, lidars=lidars)

            for _ in range(3):
                out = sweep()
            per_call = median_ms(sweep, device, reps)
            streamed = stream_ms(sweep, device, calls=max(2, reps // 2))
            rows.append({"what": "lidars", "B": b, "views": b * len(lidars), "Mrays": b * rays / 1e6, "ms": per_call,
                         "stream_ms": streamed, "Mrays/s": b * rays / 1e3 / per_call,
                         "Mrays/s streamed": b * rays / 1e3 / streamed, "overflow": bool(out.overflow)})
            print(rows[-1], flush=True)
        renderer.clear_buffers()
    # the per-view path the Renderer replaces: one camera per call, USD evaluated per call
    replay = renderer.replay
    t = float(span[0] + 0.5 * (span[1] - span[0]))
    cam = cams[0]
    ms = median_ms(lambda: replay.render_camera(cam, t, downscale), device, reps)
    c = renderer.cameras[cam]
    mp = (c.width // downscale) * (c.height // downscale) / 1e6
    rows.append({"what": f"replay, one view per call ({cam})", "B": 1, "views": 1, "MP": mp, "ms": ms,
                 "MP/s": mp * 1e3 / ms})
    print(rows[-1], flush=True)
    return rows


def garden_rows(path: Path, device, reps: int, configs: list[int], shrink: int, use_gsplat: bool) -> list[dict]:
    import torch

    from benchmarks.raster_camera import CONFIGS, build_inputs, psnr
    from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras
    from nurec_usd.ops.graphed import GraphedCameraRenderer

    gsplat = None
    if use_gsplat:
        try:
            import gsplat
        except ImportError:
            print("gsplat is not importable: garden rows without it")
    rows = []
    for index in configs:
        g, ncam, res = CONFIGS[index]
        (means, quats, scales, opacities, colors), viewmats, Ks, w, h = build_inputs(path, g, device)
        w, h = w * res // shrink, h * res // shrink
        Ks = Ks.clone()
        Ks[:, :2] *= res / shrink
        viewmats, Ks = viewmats[:ncam].to(device), Ks[:ncam].to(device)
        ours_K = Ks.clone()
        ours_K[:, 0, 2] -= 0.5
        ours_K[:, 1, 2] -= 0.5
        cams = CameraBatch.pinhole(viewmats, ours_K, w, h)
        params = [means, quats, scales, opacities, colors]
        with torch.no_grad():
            wanted = int(render_cameras(*params, cams, settings=RenderSettings(depth=False)).intersections)
            settings = RenderSettings(capacity=int(wanted * 2.0) + 1, depth=False)

            def ours():
                return render_cameras(*params, cams, settings=settings)

            mp = ncam * w * h / 1e6
            row = {"what": f"garden row {index}", "n": len(means), "views": f"{ncam} x {w}x{h}", "MP": mp,
                   "ours_ms": median_ms(ours, device, reps)}
            row["ours MP/s"] = mp * 1e3 / row["ours_ms"]
            graphed = GraphedCameraRenderer(*params, cams, capacity=settings.capacity, depth=False)
            row["graph_ms"] = median_ms(lambda: graphed.render(viewmats), device, reps)
            row["graph MP/s"] = mp * 1e3 / row["graph_ms"]
            del graphed
            if gsplat is not None:
                def theirs():
                    return gsplat.rasterization(*params, viewmats, Ks, w, h)

                row["gsplat_ms"] = median_ms(theirs, device, reps)
                row["gsplat MP/s"] = mp * 1e3 / row["gsplat_ms"]
                row["speedup"] = row["gsplat_ms"] / row["ours_ms"]
                row["graph speedup"] = row["gsplat_ms"] / row["graph_ms"]
                row["psnr"] = psnr(ours().rgb, theirs()[0])
        rows.append(row)
        print(row, flush=True)
        del means, quats, scales, opacities, colors, params
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--scene", type=Path, default=None,
                        help="a run folder, export folder or root.usda; default: synth --preset, then build it")
    parser.add_argument("--preset", default="drive30", help="synth preset when no --scene (default: drive30)")
    parser.add_argument("--steps", type=int, default=None, help="build steps (default: the preset's)")
    parser.add_argument("--build-downscale", type=int, default=1, help="build's training image downscale")
    parser.add_argument("--downscale", type=int, default=1, help="render the cameras this many times smaller")
    parser.add_argument("--batches", default="1,4,16", help="times per call (default: 1,4,16)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--garden", type=Path, default=GARDEN if GARDEN.is_file() else None,
                        help="garden/test_garden.npz (default: ../shared/data/garden when present)")
    parser.add_argument("--garden-configs", default="0,1,2,3", help="garden rows to run (raster_camera's indices)")
    parser.add_argument("--garden-downscale", type=int, default=1, help="garden images this many times smaller")
    parser.add_argument("--no-gsplat", action="store_true")
    parser.add_argument("--no-garden", action="store_true", help="scene rows only")
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    args = parser.parse_args()

    import torch

    from nurec_usd.replay.renderer import Renderer

    device = torch.device(args.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    work = None
    rows: list[dict] = []
    try:
        scene = args.scene
        if scene is None:
            from nurec_usd import build
            from nurec_usd.synth import generate, get_preset

            work = Path(tempfile.mkdtemp(prefix="render_bench_"))
            t0 = time.perf_counter()
            capture = generate(get_preset(args.preset), work / "capture", seed=0, groundtruth_dir=None,
                               device=args.device).capture_dir
            result = build(capture, work / "run", device=args.device, steps=args.steps,
                           downscale=args.build_downscale, progress=False, log=lambda _m: None)
            if result.status != "completed":
                print(f"build {result.status}: {result.message}")
                return 1
            print(f"synth + build of {args.preset}: {time.perf_counter() - t0:.1f} s")
            scene = work / "run"
        t0 = time.perf_counter()
        renderer = Renderer(scene, device=device)
        n = sum(len(x.means) for x in [renderer.replay.background, renderer.replay.actor_splats] if x is not None)
        cams = ", ".join(f"{k} {c.width}x{c.height}" for k, c in renderer.cameras.items())
        lids = ", ".join(f"{k} {v.model.channels}x{v.model.columns}" for k, v in renderer.lidars.items())
        print(f"opened {renderer.root} in {time.perf_counter() - t0:.2f} s: {n:,} Gaussians, "
              f"{len(renderer.actor_ids)} actors, cameras {cams}, lidars {lids}")
        batches = [int(b) for b in args.batches.split(",")]
        rows += scene_rows(renderer, device, batches, args.reps, args.downscale)
        del renderer
        if args.garden is not None and not args.no_garden:
            rows += garden_rows(args.garden, device, args.reps, [int(i) for i in args.garden_configs.split(",")],
                                args.garden_downscale, not args.no_gsplat)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    today, rev = datetime.date.today(), commit()
    label = args.scene.name if args.scene is not None else args.preset
    print()
    print(f"render-throughput on {gpu}, torch {torch.__version__}, median of {args.reps}")
    print("| date | device | commit | scene | what | times per call | views | ms per call | streamed ms | "
          "MP/s (M rays/s) | streamed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["what"].startswith("garden"):
            continue
        per, streamed = (r.get("MP/s", r.get("Mrays/s")), r.get("MP/s streamed", r.get("Mrays/s streamed")))
        stream = f"{r['stream_ms']:.2f}" if "stream_ms" in r else "-"
        print(f"| {today} | {gpu} | {rev} | {label} | {r['what']}{' (overflowed)' if r.get('overflow') else ''} | "
              f"{r['B']} | {r['views']} | {r['ms']:.2f} | {stream} | {rate(per)} | {rate(streamed)} |")
    garden = [r for r in rows if r["what"].startswith("garden")]
    if garden:
        print()
        print("| date | device | commit | row | Gaussians | views | ours fwd ms | ours MP/s | graph ms | "
              "gsplat fwd ms | gsplat MP/s | ours / gsplat speed | graph / gsplat | PSNR vs gsplat |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in garden:
            g = (f"{r['gsplat_ms']:.2f} | {rate(r['gsplat MP/s'])} | {r['speedup']:.2f}x | {r['graph speedup']:.2f}x | "
                 f"{r['psnr']:.1f} dB" if "gsplat_ms" in r else "- | - | - | - | -")
            print(f"| {today} | {gpu} | {rev} | {r['what']} | {r['n']:,} | {r['views']} | {r['ours_ms']:.2f} | "
                  f"{rate(r['ours MP/s'])} | {r['graph_ms']:.2f} | {g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
