"""Build and export a folder of captures through the Python API, one run directory per capture.

    python samples/batch_export.py CAPTURES_DIR OUT [--ray [ADDRESS]]
    python samples/batch_export.py samples runs/batch --steps 400 --downscale 2     # the bundled sample, on a CPU

Runs again continue where they stopped: finished runs are skipped. Each run directory holds the
optimised scene and its OpenUSD layers (RUN/usd/root.usda); OUT/batch.json lists every run.
"""

from __future__ import annotations

import argparse
import sys

import nurec_usd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", help="a folder of captures (or one capture, or a .txt list of them)")
    parser.add_argument("out", help="output folder")
    parser.add_argument("--ray", nargs="?", const=True, default=None, help="on Ray (a local one, or this address)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--downscale", type=int, default=None)
    args = parser.parse_args()

    result = nurec_usd.batch(args.captures, args.out, ray=args.ray, steps=args.steps, downscale=args.downscale)
    print(result.table())
    for run in result.runs:
        if run["status"] != "failed":
            print(f"{run['name']}: {run['run_dir']}/usd/root.usda")
    return 0 if result.ok else 1


if __name__ == "__main__":  # local batches start worker processes, which import this file again
    sys.exit(main())
