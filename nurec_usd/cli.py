"""``python -m nurec_usd``: the command line.

Commands print what a user needs and exit 0 on success, 1 when the input has problems
(each listed, naming its file and field), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nurec_usd import __version__


def _cmd_inspect(args: argparse.Namespace) -> int:
    from nurec_usd.capture import CaptureError, capture_summary, format_summary, load_capture

    try:
        capture = load_capture(args.capture)
    except CaptureError as err:
        print(err, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(capture_summary(capture), indent=2))
    else:
        print(format_summary(capture))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from nurec_usd.capture import validate_capture

    def progress(it, total):
        return tqdm(it, total=total, desc="decoding images and sweeps", unit="file",
                    disable=None, leave=False, file=sys.stderr)

    problems = validate_capture(args.capture, deep=not args.quick, workers=args.workers, progress=progress)
    if problems:
        count = len(problems)
        print(f"{args.capture}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    depth = "manifest, files and headers" if args.quick else "manifest, files, every image and every sweep"
    print(f"{args.capture}: valid ({depth} checked)")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    import warp as wp

    wp.config.log_level = 30  # warnings only (LOG_WARNING): progress goes to stderr, stdout keeps the results
    from tqdm import tqdm

    from nurec_usd.capture import CaptureError
    from nurec_usd.synth import generate, get_preset

    preset = get_preset(args.preset)
    gt = None if args.no_groundtruth else (args.gt_out if args.gt_out is not None else "auto")
    total = preset.frames * (len(preset.cameras) + 1)
    try:
        with tqdm(total=total, desc=f"synth {preset.name}", unit="frame", disable=None, leave=False,
                  file=sys.stderr) as bar:
            result = generate(preset, args.out, seed=args.seed, groundtruth_dir=gt, device=args.device,
                              overwrite=args.overwrite, spp=args.spp, progress=bar.update)
    except FileExistsError as err:
        print(f"synth: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # unknown device, bad spp
        print(f"synth: {err}", file=sys.stderr)
        return 2
    except CaptureError as err:  # the written capture did not validate: a generator bug
        print(f"synth: the generated capture does not validate:\n{err}", file=sys.stderr)
        return 1
    print(f"capture      {result.capture_dir}")
    if result.groundtruth_dir is not None:
        print(f"ground truth {result.groundtruth_dir}")
    print("seconds      " + ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items()))
    if args.contact_sheet is not None:
        from nurec_usd.synth.contact_sheet import write_contact_sheet

        sheet = write_contact_sheet(result.capture_dir, args.contact_sheet, groundtruth_dir=result.groundtruth_dir)
        print(f"contact sheet {sheet}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m nurec_usd``."""
    parser = argparse.ArgumentParser(
        prog="python -m nurec_usd",
        description="Turn multi-sensor driving captures into simulation-ready OpenUSD scenes of time-varying "
                    "3D Gaussians.",
    )
    parser.add_argument("--version", action="version", version=f"nurec_usd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", help="summarise a capture: sensors, time span, frames, sweeps, tracks",
                       description="Load a capture (checking it) and print a readable summary.")
    p.add_argument("capture", type=Path, help="capture directory (or its capture.json)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("validate", help="check a capture; exit 0 when clean, 1 with every problem listed",
                       description="Check a capture against the format (docs/capture-format.md): the manifest's "
                                   "schema and meaning, every file, and (unless --quick) every image and sweep.")
    p.add_argument("capture", type=Path, help="capture directory (or its capture.json)")
    p.add_argument("--quick", action="store_true",
                   help="skip decoding images and reading sweeps (headers and sizes are still checked)")
    p.add_argument("--workers", type=int, default=8, help="threads for decoding (default: 8)")
    p.set_defaults(func=_cmd_validate)

    from nurec_usd.synth.presets import PRESETS

    presets = "; ".join(f"{name}: {pr.description}" for name, pr in PRESETS.items())
    p = sub.add_parser(
        "synth", help="generate a synthetic driving capture with ground truth (procedural street, Warp ray casting)",
        description="Render a procedural street (buildings, trees, parked and moving cars, pedestrians) with Warp "
                    "ray casting into a capture in the native format, plus ground truth beside it: "
                    "OUT_groundtruth/cameras/<camera>/<t_us>.npz (depth = float32 ray distance in metres from the "
                    "camera centre through the pixel centre, 0 = sky or outside the lens; actor = int16 index into "
                    "groundtruth.json 'actors', -1 = static) and OUT_groundtruth/lidar/<lidar>/<t_us>.npz "
                    "(range_clean, points_clean, actor, column per returned point, in the sweep file's order; "
                    "range_grid / actor_grid per ray). The same seed gives byte-identical files on one device. "
                    f"Presets: {presets}.")
    p.add_argument("--preset", required=True, choices=list(PRESETS), help="what to generate (see above)")
    p.add_argument("--out", required=True, type=Path, help="capture directory to create")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--gt-out", type=Path, default=None,
                   help="ground-truth folder (default: OUT_groundtruth beside the capture)")
    p.add_argument("--no-groundtruth", action="store_true", help="write the capture only")
    p.add_argument("--device", default=None,
                   help="Warp device, e.g. cpu or cuda:0 (default: cuda:0 when available, else cpu)")
    p.add_argument("--spp", type=int, choices=(1, 5), default=None,
                   help="samples per pixel: 1 = pixel centre, 5 = centre + rotated grid (default: the preset's)")
    p.add_argument("--overwrite", action="store_true", help="replace existing output folders")
    p.add_argument("--contact-sheet", type=Path, default=None, metavar="PNG",
                   help="also write a contact sheet of a few frames (and depth, actors, lidar) to this PNG")
    p.set_defaults(func=_cmd_synth)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
