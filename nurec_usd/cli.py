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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
