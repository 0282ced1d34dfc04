"""Registers, blocks, shared memory and occupancy of every kernel in one forward + backward (Nsight Compute).

    ncu --profile-from-start off --section LaunchStats --section Occupancy --csv --page details \\
        python benchmarks/kernel_resources.py run lidar > lidar.csv
    ncu --profile-from-start off --section LaunchStats --section Occupancy --csv --page details \\
        python benchmarks/kernel_resources.py run camera --data PATH/garden/test_garden.npz > camera.csv
    python benchmarks/kernel_resources.py table lidar.csv camera.csv

``run`` builds a scene, renders forward + backward three times (compilation, allocator
warm-up), then once more between ``cudaProfilerStart`` and ``cudaProfilerStop``, so that ncu
with ``--profile-from-start off`` profiles each kernel of one call once. ``lidar``: the
``raster_lidar.py`` street at ``--size`` Gaussians (5M by default), 128 x 2048 rays, its loss
(``raster_lidar.street_call``);
``camera``: a row of ``raster_camera.py`` (``--row``, 2 by default: 2.79M Gaussians, one
1944x1260 view), the sum of the image. ``table`` prints ncu's CSV as a Markdown table: a
row per kernel launch, in launch order.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

# ncu metric names -> column titles
COLUMNS = {"Registers Per Thread": "registers", "Block Size": "block", "Grid Size": "grid",
           "Static Shared Memory Per Block": "static smem (B)", "Dynamic Shared Memory Per Block": "dynamic smem (B)",
           "Waves Per SM": "waves", "Theoretical Occupancy": "theoretical occupancy (%)",
           "Achieved Occupancy": "achieved occupancy (%)"}


def camera_call(device: torch.device, data: Path, row: int):
    """A raster_camera.py row and its forward + backward (colour and alpha, as gsplat's RGB mode)."""
    from benchmarks.raster_camera import CONFIGS, build_inputs
    from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras

    g, ncam, res = CONFIGS[row]
    params, viewmats, Ks, w, h = build_inputs(data, g, device)
    Ks = Ks.clone()
    Ks[:, :2] *= res
    Ks[:, 0, 2] -= 0.5  # pixel centres as raster_camera.py passes them
    Ks[:, 1, 2] -= 0.5
    cams = CameraBatch.pinhole(viewmats[:ncam].to(device), Ks[:ncam].to(device), w * res, h * res)
    leaves = [p.clone().requires_grad_(True) for p in params]
    capacity = int(int(render_cameras(*params, cams).intersections) * 1.2)
    settings = RenderSettings(capacity=capacity, depth=False)

    def call():
        for p in leaves:
            p.grad = None
        render_cameras(*leaves, cams, settings=settings).rgb.sum().backward()
    return call


def run(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    if device.type != "cuda":
        raise SystemExit("kernel_resources.py run profiles CUDA kernels: pass --device cuda:N")
    if args.renderer == "lidar":
        from benchmarks.raster_lidar import street_call

        call = street_call(device, args.size).forward_backward  # raster_lidar.py's street and loss
    else:
        if args.data is None:
            raise SystemExit("kernel_resources.py run camera needs --data PATH/garden/test_garden.npz")
        call = camera_call(device, args.data, args.row)
    for _ in range(3):
        call()
    torch.cuda.synchronize(device)
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize(device)
    torch.cuda.profiler.stop()


def read_report(path: Path) -> list[tuple[str, dict[str, str]]]:
    """(kernel name, {metric: value}) per profiled launch of an ncu ``--csv --page details`` report."""
    text = path.read_text()
    header = text.find('"ID"')  # the program's own output and ncu's ==PROF== lines come first
    if header < 0:
        raise SystemExit(f"{path}: no ncu CSV table (expected a header row starting with \"ID\")")
    launches: dict[str, tuple[str, dict[str, str]]] = {}
    for row in csv.DictReader(io.StringIO(text[header:])):
        name, metrics = launches.setdefault(row["ID"], (row["Kernel Name"], {}))
        metrics[row["Metric Name"]] = row["Metric Value"]
    return [launches[k] for k in sorted(launches, key=int)]


def short_name(kernel: str) -> str:
    """Warp's kernels by their Python name; CUB's and torch's by their function's name (and functor)."""
    if "_cuda_kernel_" in kernel:
        return kernel.split("_cuda_kernel_")[0].split("__")[-1].rsplit("_", 1)[0]
    name = kernel.removeprefix("void ").split("<")[0].split("::")[-1]
    functor = re.search(r"(\w+Functor\w*)", kernel)
    return f"{name} ({functor.group(1)})" if functor else name


def table(paths: list[Path]) -> None:
    for path in paths:
        launches = read_report(path)
        print(f"\n{path.name}:")
        print("| kernel | " + " | ".join(COLUMNS.values()) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for name, metrics in launches:
            print(f"| {short_name(name)} | " + " | ".join(metrics.get(m, "-") for m in COLUMNS) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one forward + backward between cudaProfilerStart/Stop (run under ncu)")
    r.add_argument("renderer", choices=("lidar", "camera"))
    r.add_argument("--device", default="cuda:0")
    r.add_argument("--size", type=int, default=5_000_000, help="lidar: Gaussians")
    r.add_argument("--data", type=Path, default=None, help="camera: garden/test_garden.npz")
    r.add_argument("--row", type=int, default=2, help="camera: row of raster_camera.py's CONFIGS")
    t = sub.add_parser("table", help="ncu CSV reports as Markdown tables")
    t.add_argument("reports", type=Path, nargs="+")
    args = ap.parse_args()
    if args.command == "run":
        run(args)
    else:
        table(args.reports)


if __name__ == "__main__":
    main()
