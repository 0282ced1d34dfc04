"""`raster-camera`: our Warp camera renderer against gsplat on identical inputs.

    python benchmarks/raster_camera.py --data PATH/garden/test_garden.npz [--reps 30] [--no-gsplat]

The four configurations of the performance notes: the garden points inside [-2, 2]^3
(111,785), tiled g x g with a 4 m pitch for more; scales U(1e-4, 0.02), random unit
quaternions, opacities U(0, 1), colours from the file, seed 0; the file's 3 cameras, with
intrinsics scaled to the resolution. Times are CUDA-event medians after warm-up, for the
whole forward (projection, binning, sorting, compositing) and forward + backward
(gradients for means, quaternions, scales, opacities, colours). Both render what gsplat's
default mode ("RGB") renders, colour and alpha: ours with ``RenderSettings(depth=False)``;
"ours fwd, with depth" is our forward with the depth image as well. gsplat samples pixels at
their centres (+0.5) and we follow OpenCV (centre of the top-left pixel at 0), so our
principal point is shifted by half a pixel to render the same function; the PSNR between
the two images checks that. "graph replay" is the same forward through
``GraphedCameraRenderer`` (poses copied in, one CUDA-graph launch: what a program that
renders one scene from many poses pays per frame); the anchor's calls are eager.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import host_ms, median_ms  # noqa: E402
from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras  # noqa: E402
from nurec_usd.ops.graphed import GraphedCameraRenderer  # noqa: E402

CONFIGS = [  # (grid g, cameras, scale of the 648x420 resolution)
    (1, 3, 1),
    (5, 3, 1),
    (5, 1, 3),
    (9, 1, 3),
]


def build_inputs(path: Path, g: int, device: torch.device):
    d = np.load(path)
    pts = torch.from_numpy(d["means3d"]).float()
    keep = (pts.abs() <= 2).all(-1)
    base = pts[keep]
    colors = torch.from_numpy(d["colors"][keep.numpy()]).float() / 255
    offsets = [(4.0 * (i - (g - 1) / 2), 4.0 * (j - (g - 1) / 2)) for i in range(g) for j in range(g)]
    means = torch.cat([base + torch.tensor([ox, oy, 0.0]) for ox, oy in offsets])
    colors = colors.repeat(len(offsets), 1)
    n = len(means)
    gen = torch.Generator().manual_seed(0)
    scales = torch.rand(n, 3, generator=gen) * (0.02 - 1e-4) + 1e-4
    quats = torch.nn.functional.normalize(torch.randn(n, 4, generator=gen), dim=-1)
    opacities = torch.rand(n, generator=gen)
    tensors = [t.to(device).contiguous() for t in (means, quats, scales, opacities, colors)]
    return tensors, torch.from_numpy(d["viewmats"]).float(), torch.from_numpy(d["Ks"]).float(), \
        int(d["width"]), int(d["height"])




def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = torch.mean((a.clamp(0, 1) - b.clamp(0, 1)) ** 2).item()
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def dump(folder: Path, name: str, ours: torch.Tensor, theirs: torch.Tensor, params, cams: CameraBatch) -> None:
    """PNGs of camera 0, ours and gsplat's (compare with a CPU render of the same inputs elsewhere)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for tag, img in (("ours", ours), ("gsplat", theirs)):
        pixels = (img.detach().clamp(0, 1).cpu().numpy() * 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{name}_{tag}.png")


def tune(args, device: torch.device) -> None:
    """Forward and forward+backward times of our renderer with the rasterizer built under
    several launch bounds (registers per thread against resident blocks per SM)."""
    import warp_kernels.camera_raster as kraster

    variants = [None, (256, 2), (256, 3), (256, 4)]
    built = {lb: kraster.make_raster_kernels(kraster.wp.float32, kraster.warp_sum_f32, kraster.warp_sum2_f32,
                                             kraster.warp_sum8_f32, lb) for lb in variants[1:]}
    print("| launch bounds | row | ours fwd | ours fwd+bwd |")
    print("|---|---|---|---|")
    for index in [int(i) for i in args.configs.split(",")]:
        g, ncam, res = CONFIGS[index]
        (means, quats, scales, opacities, colors), viewmats, Ks, w, h = build_inputs(args.data, g, device)
        Ks = Ks.clone()
        Ks[:, :2] *= res
        cams = CameraBatch.pinhole(viewmats[:ncam].to(device), Ks[:ncam].to(device), w * res, h * res)
        params = [means, quats, scales, opacities, colors]
        leaves = [p.clone().requires_grad_(True) for p in params]
        settings = RenderSettings(capacity=int(int(render_cameras(*params, cams).intersections) * 1.2), depth=False)
        names = ("rasterize_forward_f32", "rasterize_forward_nodepth_f32", "rasterize_backward_f32",
                 "rasterize_backward_nodepth_f32")
        default = tuple(getattr(kraster, name) for name in names)
        for lb in variants:
            for name, kernel in zip(names, default if lb is None else built[lb]):
                setattr(kraster, name, kernel)

            def fwd_bwd():
                o = render_cameras(*leaves, cams, settings=settings)
                o.rgb.sum().backward()

            f = median_ms(lambda: render_cameras(*params, cams, settings=settings), device, args.reps)
            fb = median_ms(fwd_bwd, device, args.reps)
            print(f"| {lb or 'default'} | {index} | {f:.2f} ms | {fb:.2f} ms |", flush=True)
        for name, kernel in zip(names, default):
            setattr(kraster, name, kernel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="garden/test_garden.npz")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-gsplat", action="store_true")
    ap.add_argument("--configs", default="0,1,2,3", help="which rows to run (indices)")
    ap.add_argument("--profile", action="store_true", help="also print the CUDA kernels of one forward+backward")
    ap.add_argument("--tune", action="store_true",
                    help="time our float32 rasterizer under several CUDA launch bounds (no gsplat), then exit")
    ap.add_argument("--dump", type=Path, help="write our, gsplat's and our CPU image of each row's camera 0 as PNGs here")
    args = ap.parse_args()
    device = torch.device("cuda:0")
    if args.tune:
        tune(args, device)
        return
    gsplat = None
    if not args.no_gsplat:
        import gsplat  # noqa: F811

    rows = []
    for index in [int(i) for i in args.configs.split(",")]:
        g, ncam, res = CONFIGS[index]
        (means, quats, scales, opacities, colors), viewmats, Ks, w, h = build_inputs(args.data, g, device)
        w, h = w * res, h * res
        Ks = Ks.clone()
        Ks[:, :2] *= res
        viewmats, Ks = viewmats[:ncam].to(device), Ks[:ncam].to(device)
        ours_K = Ks.clone()
        ours_K[:, 0, 2] -= 0.5
        ours_K[:, 1, 2] -= 0.5
        cams = CameraBatch.pinhole(viewmats, ours_K, w, h)
        params = [means, quats, scales, opacities, colors]
        leaves = [p.clone().requires_grad_(True) for p in params]

        out = render_cameras(*params, cams)
        capacity = int(int(out.intersections) * 1.2)
        # fixed capacity: no host sync inside a step; colour and alpha, as gsplat's "RGB" mode
        settings = RenderSettings(capacity=capacity, depth=False)
        with_depth = RenderSettings(capacity=capacity)

        def ours_fwd():
            return render_cameras(*params, cams, settings=settings)

        def ours_fwd_bwd():
            o = render_cameras(*leaves, cams, settings=settings)
            o.rgb.sum().backward()
            return o

        row = {"n": len(means), "views": f"{ncam} x {w}x{h}", "isect": int(out.intersections)}
        row["ours_fwd"] = median_ms(ours_fwd, device, args.reps)
        row["ours_fb"] = median_ms(ours_fwd_bwd, device, args.reps)
        row["ours_fwd_depth"] = median_ms(lambda: render_cameras(*params, cams, settings=with_depth), device, args.reps)
        row["host_fwd"] = host_ms(ours_fwd, device, args.reps)
        row["host_fb"] = host_ms(ours_fwd_bwd, device, args.reps)
        # the same forward replayed from a CUDA graph (new poses copied in, then one graph launch)
        graphed = GraphedCameraRenderer(*params, cams, capacity=capacity, depth=False)
        row["graph_fwd"] = median_ms(lambda: graphed.render(viewmats), device, args.reps)
        eager = render_cameras(*params, cams, settings=settings).rgb
        row["graph_err"] = (graphed.render(viewmats).rgb - eager).abs().max().item()  # printed with the row
        del graphed
        if gsplat is not None:
            def gs_fwd():
                return gsplat.rasterization(*params, viewmats, Ks, w, h)

            def gs_fwd_bwd():
                out = gsplat.rasterization(*leaves, viewmats, Ks, w, h)
                out[0].sum().backward()
                return out

            row["gs_fwd"] = median_ms(gs_fwd, device, args.reps)
            row["gs_fb"] = median_ms(gs_fwd_bwd, device, args.reps)
            ref, _, meta = gsplat.rasterization(*params, viewmats, Ks, w, h)
            row["gs_isect"] = int(meta["flatten_ids"].numel())
            mine = render_cameras(*params, cams, settings=settings).rgb
            row["psnr"] = psnr(mine, ref)
            if args.dump:
                dump(args.dump, f"row{index}", mine[0], ref[0], params, cams)
        rows.append(row)
        print(row, flush=True)
        if args.profile:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                ours_fwd_bwd()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
        del means, quats, scales, opacities, colors, params, leaves, out
        torch.cuda.empty_cache()

    print()
    print(f"raster-camera on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, median of {args.reps}")
    head = ("| Gaussians | views | intersections | ours fwd | ours fwd+bwd | ours fwd, with depth |"
            " host fwd / fwd+bwd | ours fwd, graph replay |")
    if gsplat is not None:
        head += (" gsplat intersections | gsplat fwd | gsplat fwd+bwd | fwd ratio | fwd+bwd ratio |"
                 " graph fwd ratio | PSNR vs gsplat |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        line = (f"| {r['n']:,} | {r['views']} | {r['isect']:,} | {r['ours_fwd']:.2f} ms | {r['ours_fb']:.2f} ms |"
                f" {r['ours_fwd_depth']:.2f} ms | {r['host_fwd']:.2f} / {r['host_fb']:.2f} ms |"
                f" {r['graph_fwd']:.2f} ms |")
        if gsplat is not None:
            line += (f" {r['gs_isect']:,} | {r['gs_fwd']:.2f} ms | {r['gs_fb']:.2f} ms | {r['ours_fwd'] / r['gs_fwd']:.2f}x |"
                     f" {r['ours_fb'] / r['gs_fb']:.2f}x | {r['graph_fwd'] / r['gs_fwd']:.2f}x |"
                     f" {r['psnr']:.1f} dB |")
        print(line)


if __name__ == "__main__":
    main()
