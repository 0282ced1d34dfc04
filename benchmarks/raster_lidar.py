"""`raster-lidar`: the Warp lidar renderer on a street, 128 channels x 2048 columns, 1M and 5M Gaussians.

    python benchmarks/raster_lidar.py [--device cuda:0] [--sizes 1000000,5000000] [--reps 30]
                                      [--registers] [--profile] [--min-blocks N] [--block-warps 4] [--tile-rays 128]
                                      [--accumulate-grads] [--stream N] [--moving 0.2]
    python benchmarks/raster_lidar.py --device cpu --small        # smoke run, seconds

First a correctness check on the device against the pure-torch twin (a small lidar and a few
thousand street Gaussians, and the tests' opaque shells, where most rays stop on T_MIN; forward
and every gradient, float32 and float64, with chunked tiles too: the warp-level walks and
reductions only exist on CUDA, so this is where they are checked). Then, per size: the
Gaussians of ``street_scene`` (road, facades, cars, poles, trees; flat, a few cm each, closing
the surfaces) around a 10 Hz lidar with realistic channel elevations (-25..+15 degrees, ~0.1
degree apart at the horizon) driving at 10 m/s; CUDA-event medians
after warm-up, in fixed-capacity mode (capacity = 1.2 x the exact count of a first render,
so no host synchronisation inside a render), of

* bin: projection, binning, sort and work items alone (``bin_lidar``);
* forward: the whole ``render_lidar``;
* forward + backward: ``render_lidar`` and the gradients of range, hit probability,
  intensity and median range for means, quaternions, scales, opacities and intensities (the
  leaves' gradients set to None before each backward, as ``Trainer.step`` does; with
  ``--accumulate-grads`` added into the previous ones instead, five Gaussian-sized adds);

as times and rays per second (C x W rays per sweep). Each of those calls is timed from an
idle GPU (``benchmarks.timing.median_ms``), so it includes the device's wait for the call's first
kernel. Then forward + backward as training issues it: ``--stream N`` (on CUDA 100 by default,
0 to skip) calls queued back to back, per call (``benchmarks.timing.stream_ms``), where the host
queues a call while the device runs the one before. The forward + backward target (100 M
rays/s) is read on that stream, the throughput of training's renders; the per-call figure,
which adds the host's latency to the first kernel, is printed beside it. Then the work balance in Gaussian-ray
evaluations: the busiest tile against the mean tile (what the tiling alone leaves), and the
busiest rasterizer work item (a chunk of a tile's list) against the mean tile. ``--moving F``
gives a fraction F of the Gaussians a motion over the sweep (up to 1.5 m, as actors have; the
projection then places each where it is when its column fires).
``--registers`` compiles the lidar modules for the device's architecture into a folder
(``$OUT`` when set) and prints each kernel's registers and stack frame from the cubins
(the same figures as ``cuobjdump --dump-resource-usage`` on them).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.timing import host_ms, median_ms, stream_ms  # noqa: E402

# imported in main(), after --min-blocks, --block-warps and --tile-rays have set the kernels' budget and blocks
LidarRenderSettings = bin_lidar = render_lidar = tile_work = render_lidar_reference = None
cubin_resources = make_lidar = opaque_shells = street_lidar = street_scene = None


def _import_renderer() -> None:
    global LidarRenderSettings, bin_lidar, render_lidar, tile_work, render_lidar_reference
    global cubin_resources, make_lidar, opaque_shells, street_lidar, street_scene
    from nurec_usd.ops.lidar import LidarRenderSettings, bin_lidar, render_lidar, tile_work  # noqa: F811
    from nurec_usd.ops.reference import render_lidar_reference  # noqa: F811
    from ops.test_lidar_render import (cubin_resources, make_lidar, opaque_shells, street_lidar,  # noqa: F811
                                          street_scene)


FIELDS = ("range_sum", "intensity_sum", "hit_prob", "median_range")
PARAM_NAMES = ("means", "quats", "scales", "opacities", "intensities")


def street_motion(n: int, fraction: float, dtype: torch.dtype = torch.float32, seed: int = 3) -> torch.Tensor:
    """A motion over the sweep for a ``fraction`` of n Gaussians, up to 1.5 m along each axis (as
    actors have at 10 Hz), zero for the rest.  Returns: [n, 3] on the CPU"""
    g = torch.Generator().manual_seed(seed)
    motion = (torch.rand(n, 3, generator=g, dtype=torch.float64) * 2 - 1) * 1.5
    motion[torch.rand(n, generator=g) >= fraction] = 0
    return motion.to(dtype)


@dataclass
class StreetCall:
    """The benchmark's street at one size and its forward + backward (``street_call``)."""

    lidar: object  # LidarBatch
    params: list  # the Gaussians (no gradient)
    leaves: list  # copies of them that take gradients
    settings: object  # LidarRenderSettings: fixed capacity, 1.2x the intersections of a first render
    intersections: int  # of that first render
    motion: torch.Tensor | None
    forward_backward: Callable[[], object]  # render_lidar on the leaves and the benchmark's loss, backward


def street_call(device: torch.device, n: int, channels: int = 128, columns: int = 2048, band_rows="auto",
                chunk: int | None = None, moving: float = 0.0, accumulate_grads: bool = False) -> StreetCall:
    """The street of ``n`` Gaussians (``moving``: the fraction given a motion over the sweep) around the
    benchmark's lidar, in fixed-capacity mode (no host synchronisation inside a render). Its forward +
    backward sets the leaves' gradients to None first, as training does, unless ``accumulate_grads``."""
    if render_lidar is None:
        _import_renderer()
    lidar = street_lidar(channels, columns, device=device, band_rows=band_rows)
    params = [p.to(device) for p in street_scene(n, seed=0)]
    leaves = [p.clone().requires_grad_(True) for p in params]
    motion = street_motion(n, moving).to(device) if moving > 0 else None
    wanted = int(render_lidar(*params, lidar, motion=motion).intersections)
    settings = LidarRenderSettings(capacity=int(wanted * 1.2) + 1024, chunk=chunk)

    def forward_backward():
        if not accumulate_grads:
            for p in leaves:  # as training does (zero_grad(set_to_none=True)): no add into older gradients
                p.grad = None
        o = render_lidar(*leaves, lidar, settings=settings, motion=motion)
        (o.range_sum.sum() + o.hit_prob.sum() + o.intensity_sum.sum() + o.median_range.sum()).backward()
        return o

    return StreetCall(lidar, params, leaves, settings, wanted, motion, forward_backward)




def _twin_scenes(device: torch.device, n: int, dtype: torch.dtype):
    """(name, lidar, Gaussians, motion) of the twin check: a street of n Gaussians, opaque shells (the
    tests' saturated scene: most rays stop on T_MIN, where the kernels' warps walk to their furthest
    ray and each lane must leave out the entries behind its own stop), and the street with a third of
    its Gaussians moving up to 1.5 m during the sweep (actors seen when their column fires)."""
    street = [p.to(device) for p in street_scene(n, seed=1, dtype=dtype, half_length=15.0)]
    yield "street", street_lidar(16, 256, dtype=dtype, device=device), street, None
    yield "shells", make_lidar(dtype).to(device=device), [p.to(device) for p in opaque_shells(dtype)], None
    yield "moving", street_lidar(16, 256, dtype=dtype, device=device), street, \
        street_motion(n, 1 / 3, dtype).to(device)


def check_against_twin(device: torch.device, n: int) -> bool:
    """Forward and backward of the kernels against the twin, on ``device``; prints the errors."""
    ok = True
    for dtype, tol_fwd, tol_grad in ((torch.float32, 2e-4, 1e-3), (torch.float64, 1e-9, 1e-9)):
        for scene, lidar, params, motion, chunk in [(*s, c) for s in _twin_scenes(device, n, dtype)
                                                    for c in (None, 16)]:
            leaves = [p.clone().requires_grad_(True) for p in params]
            out = render_lidar(*leaves, lidar, settings=LidarRenderSettings(chunk=chunk), motion=motion)
            ref = render_lidar_reference(*leaves, lidar, motion=motion)
            g = torch.Generator(device=device).manual_seed(0)
            # the sums, the hit probability and the median, and the expected range and intensity
            # (the merge's divisions and their gradients, lidar_output_grads)
            fields = FIELDS + ("range", "intensity")
            w = [torch.randn(out.hit_prob.shape, generator=g, device=device, dtype=dtype) for _ in fields]
            loss = sum((getattr(out, f) * wi).sum() for f, wi in zip(fields, w))
            loss_ref = sum((ref[f] * wi).sum() for f, wi in zip(fields, w))
            grads = torch.autograd.grad(loss, leaves)
            grads_ref = torch.autograd.grad(loss_ref, leaves)
            # ranges are tens of metres: compare relative to the largest value. The median range is
            # discrete (which Gaussian takes T across 0.5): with float32 rounding (fast-math exp on
            # CUDA) a ray on the fence may pick a neighbour, so count the rays that disagree instead
            fwd = max(float(((getattr(out, f) - ref[f]).abs().max() / ref[f].abs().max().clamp_min(1)).detach())
                      for f in FIELDS[:3] + ("range", "intensity"))
            off = float(((out.median_range - ref["median_range"]).abs() > 1e-3).double().mean())
            line = (f"{str(dtype):14s} {scene:6s} chunk={str(chunk):4s}: max relative |out - twin| = {fwd:.1e}, "
                    f"median ranges off by > 1 mm: {100 * off:.3f}%; grads")
            ok &= fwd < tol_fwd and off < (1e-3 if dtype == torch.float32 else 1e-12)
            for name, a, b in zip(PARAM_NAMES, grads, grads_ref):
                err = float((a - b).norm() / b.norm().clamp_min(1e-30))
                line += f" {name} {err:.1e}"
                ok &= err < tol_grad
            print(line, flush=True)
    print("correctness vs twin:", "PASSED" if ok else "FAILED", flush=True)
    return ok


def print_registers(device: torch.device, folder: Path) -> None:
    """Compile the lidar modules for the device's architecture and print each kernel's resources."""
    import warp as wp

    from nurec_usd.ops.warp_torch import init_warp
    from warp_kernels import lidar_binning, lidar_project, lidar_raster

    init_warp()
    arch = 90
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        arch = 10 * major + minor
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nlidar kernels, sm_{arch} (cubins in {folder}; check with cuobjdump --dump-resource-usage):")
    print("| module | kernel | precision | registers | stack frame (B) |")
    print("|---|---|---|---|---|")
    # Warp modules (the float64 kernels, the projection's backward and the ray masks compile in
    # modules of their own, warp_kernels.modules) and the Python modules that define their kernels
    for name_of_module, module in (("warp_kernels.lidar_project", lidar_project),
                                   ("warp_kernels.lidar_project_backward", lidar_project),
                                   ("warp_kernels.lidar_project_backward_moving", lidar_project),
                                   ("warp_kernels.lidar_binning", lidar_binning),
                                   ("warp_kernels.lidar_binning_masks", lidar_binning),
                                   ("warp_kernels.lidar_raster", lidar_raster)):
        paths = wp.compile_aot_module(name_of_module, arch=arch, module_dir=folder)
        cubins = [p for p in paths if p.suffix == ".cubin"]
        if not cubins:
            print(f"| {name_of_module} | (no cubin: {paths}) | | | |")
            continue
        res = cubin_resources(cubins[0])
        kernels = {name: k for name, k in vars(module).items()
                   if isinstance(k, wp.Kernel) and k.module.name == name_of_module}
        for name, k in sorted(kernels.items()):
            for direction in ("forward", "backward"):
                r = res.get(f"{k.get_mangled_name()}_cuda_kernel_{direction}")
                if r is None:
                    continue
                prec = "f64" if name.endswith("_f64") else ("f32" if name.endswith("_f32") else "-")
                label = name if direction == "forward" else f"{name} (Warp adjoint)"
                print(f"| {name_of_module.split('.')[-1]} | {label} | {prec} | {r.get('REGCOUNT')} |"
                      f" {r.get('FRAME_SIZE', 0)} |")


def add_street_options(ap: argparse.ArgumentParser) -> None:
    """The benchmark's device and street options (shared with benchmarks/lidar_work.py)."""
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--sizes", default="1000000,5000000", help="Gaussian counts, comma-separated")
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--columns", type=int, default=2048)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_street_options(ap)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--small", action="store_true", help="smoke mode: 32 x 512 rays, 20k Gaussians, 3 reps")
    ap.add_argument("--band-rows", default="auto", help="'auto' or channels per band (4, 8, 16, 32)")
    ap.add_argument("--check-n", type=int, default=3000, help="Gaussians of the correctness check (0: skip)")
    ap.add_argument("--registers", action="store_true", help="print the lidar kernels' registers from their cubins")
    ap.add_argument("--cubin-dir", type=Path, default=None,
                    help="where --registers writes cubins (default: $OUT/lidar_cubins, or a temp dir)")
    ap.add_argument("--profile", action="store_true", help="print the kernels of one forward+backward (torch profiler)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="Gaussians per work item, fixed (default: the renderer's adaptive length)")
    ap.add_argument("--accumulate-grads", action="store_true",
                    help="add each repetition's gradients into the last ones' (the measure before 2026-12-01) "
                         "instead of setting them to None first, as training does")
    ap.add_argument("--min-blocks", type=int, default=None,
                    help="launch bounds of the float32 raster kernels: blocks per SM, for both (default: 36 "
                         "warps' worth for the forward, <= 56 registers, 32 for the backward, <= 64; 0: none)")
    ap.add_argument("--block-warps", type=int, default=None, choices=(1, 2, 4, 8),
                    help="CUDA warps per block of the raster kernels (default: the renderer's, 4)")
    ap.add_argument("--tile-rays", type=int, default=None, choices=(64, 128, 256),
                    help="rays per tile (default: the renderer's, 128: a list per 4-warp block)")
    ap.add_argument("--moving", type=float, default=0.0,
                    help="fraction of the Gaussians given a motion over the sweep (up to 1.5 m, as actors; "
                         "default 0: a static street)")
    ap.add_argument("--stream", type=int, default=None,
                    help="also time this many forward + backward calls queued back to back, per call "
                         "(the throughput of a stream of renders; median of three rounds; 0: skip; "
                         "default 100 on CUDA, 0 on the CPU)")
    args = ap.parse_args()
    if args.min_blocks is not None:
        os.environ["NUREC_LIDAR_MIN_BLOCKS"] = str(args.min_blocks)
    if args.block_warps is not None:
        os.environ["NUREC_LIDAR_BLOCK_WARPS"] = str(args.block_warps)
    if args.tile_rays is not None:
        os.environ["NUREC_LIDAR_TILE_RAYS"] = str(args.tile_rays)
    _import_renderer()
    from warp_kernels.lidar_binning import TILE_RAYS
    from warp_kernels.lidar_raster import BLOCK_WARPS, LAUNCH_BOUNDS_BACKWARD_F32, LAUNCH_BOUNDS_WALK_F32
    device = torch.device(args.device)
    if args.small:
        args.sizes, args.channels, args.columns, args.reps = "20000", 32, 512, min(args.reps, 3)
        args.check_n = min(args.check_n, 1500)
    if args.stream is None:
        args.stream = 100 if device.type == "cuda" else 0
    band_rows = args.band_rows if args.band_rows == "auto" else int(args.band_rows)
    def measure(fn, reps):
        return median_ms(fn, device, reps)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"

    check_ok = check_against_twin(device, args.check_n) if args.check_n > 0 else None
    if args.registers:
        folder = args.cubin_dir
        if folder is None:
            folder = Path(os.environ["OUT"]) / "lidar_cubins" if os.environ.get("OUT") else \
                Path(tempfile.mkdtemp(prefix="lidar_cubins_"))
        print_registers(device, folder)

    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        street = street_call(device, n, args.channels, args.columns, band_rows, args.chunk, args.moving,
                             args.accumulate_grads)
        lidar, params, settings, motion, wanted = (street.lidar, street.params, street.settings, street.motion,
                                                   street.intersections)
        rays = lidar.channels * lidar.columns
        out = render_lidar(*params, lidar, settings=settings, motion=motion)
        assert not bool(out.overflow)
        work = tile_work(lidar, out.tile_ranges, out.work_items, out.num_items)
        visible = int((out.extents[:, 0] > 0).sum())
        hit = float((out.hit_prob > 0.5).float().mean())

        def bin_only():
            return bin_lidar(*params, lidar, settings, motion=motion)

        def fwd():
            return render_lidar(*params, lidar, settings=settings, motion=motion)

        fwd_bwd = street.forward_backward

        row = {"n": n, "visible": visible, "isect": wanted, "items": work["items"], "hit": hit,
               "tile_ratio": work["max_tile_ratio"], "item_ratio": work["max_item_ratio"],
               "bin": measure(bin_only, args.reps), "fwd": measure(fwd, args.reps), "fb": measure(fwd_bwd, args.reps)}
        row["host_fwd"], row["host_fb"] = host_ms(fwd, device, args.reps), host_ms(fwd_bwd, device, args.reps)
        row["fwd_rays"] = rays / (row["fwd"] * 1e-3)
        row["fb_rays"] = rays / (row["fb"] * 1e-3)
        if args.stream > 0:
            row["fb_stream"] = stream_ms(fwd_bwd, device, args.stream)
            row["fb_stream_rays"] = rays / (row["fb_stream"] * 1e-3)
        rows.append(row)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        if args.profile:
            activity = torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else \
                torch.profiler.ProfilerActivity.CPU
            with torch.profiler.profile(activities=[activity]) as prof:
                fwd_bwd()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            print(prof.key_averages().table(sort_by="self_cuda_time_total" if device.type == "cuda"
                                            else "self_cpu_time_total", row_limit=16, max_name_column_width=70))
        del street, params, fwd_bwd, out
        if device.type == "cuda":
            torch.cuda.empty_cache()

    print()
    print(f"raster-lidar on {name}, torch {torch.__version__}, {args.channels} channels x {args.columns} columns "
          f"({args.channels * args.columns:,} rays), bands {band_rows}, tiles of {TILE_RAYS} rays, "
          + (f"{100 * args.moving:.0f}% of the Gaussians moving, " if args.moving > 0 else "") +
          f"blocks of {BLOCK_WARPS} warps, launch bounds {LAUNCH_BOUNDS_WALK_F32} (forward) and "
          f"{LAUNCH_BOUNDS_BACKWARD_F32} (backward), median of {args.reps}"
          + ("" if check_ok is None else f"; correctness vs twin {'PASSED' if check_ok else 'FAILED'}"))
    head = ("| Gaussians | visible | intersections | work items | bin | forward | fwd rays/s | fwd+bwd | "
            "fwd+bwd rays/s | host fwd / fwd+bwd | busiest tile / mean | busiest item / mean | rays hit |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(f"| {r['n']:,} | {r['visible']:,} | {r['isect']:,} | {r['items']:,} | {r['bin']:.2f} ms | "
              f"{r['fwd']:.2f} ms | {r['fwd_rays'] / 1e6:.1f} M | {r['fb']:.2f} ms | {r['fb_rays'] / 1e6:.1f} M | "
              f"{r['host_fwd']:.2f} / {r['host_fb']:.2f} ms | "
              f"{r['tile_ratio']:.1f}x | {r['item_ratio']:.2f}x | {100 * r['hit']:.0f}% |")
    if args.stream > 0:
        print(f"\nforward + backward, {args.stream} calls queued back to back (no synchronisation between them; "
              "per call, median of three rounds):")
        print("| Gaussians | fwd+bwd per call | fwd+bwd rays/s |")
        print("|---|---|---|")
        for r in rows:
            print(f"| {r['n']:,} | {r['fb_stream']:.2f} ms | {r['fb_stream_rays'] / 1e6:.1f} M |")
    print("\ntargets: forward+backward >= 100 M rays/s over a stream of calls (as training issues them; "
          "each call from an idle GPU is in the first table); no work item above 4x the mean tile's work "
          "(Gaussian-ray evaluations: list length x rays).")


if __name__ == "__main__":
    main()
