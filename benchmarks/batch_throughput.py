"""Batch throughput: runs per hour for N synthetic captures with 1 worker and with 2 workers.

    python benchmarks/batch_throughput.py                            # 8 `small` captures, fast preset, 1 and 2 workers
    python benchmarks/batch_throughput.py --captures 8 --workers 1,2 --ray     # the same through a local Ray
    python benchmarks/batch_throughput.py --synth tiny --captures 2 --device cpu --steps 3 --downscale 4
                                                                     # a smoke check on a CPU

Generates the captures once with ``synth`` (seeds 0..N-1, no ground truth; each in its own process,
so this one never holds a GPU), builds one of them first so that Warp's kernel cache is warm for
every measured batch, then runs ``nurec_usd.batch`` over all of them into a fresh folder for each
worker count. Local workers take the visible GPUs round-robin: on one GPU, 2 workers share it; with
several, 2 workers get one GPU each. Through Ray (``--ray``) each run asks for one GPU and
``--workers`` caps the runs in flight. Prints per run its wall time (in its worker, imports and
kernel loading included) and build time; per batch the wall time, runs per hour and, where
nvidia-smi exists, each GPU's utilisation sampled every 0.5 s during the batch. The last lines are
rows for benchmarks/RESULTS.md; ``--json FILE`` also writes everything measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.provenance import commit  # noqa: E402
from nurec_usd.cli import parse_option  # noqa: E402


class GpuSampler:
    """``nvidia-smi``'s utilisation and memory per GPU every 0.5 s, in a thread, while in a ``with``."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, float, float]] = []  # (time, gpu index, util %, memory MiB)
        self.available = shutil.which("nvidia-smi") is not None
        self._proc = None

    def __enter__(self) -> "GpuSampler":
        if self.available:
            self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                                           "--format=csv,noheader,nounits", "-lms", "500"],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.monotonic(), int(parts[0]), float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._thread.join(5)

    def summary(self) -> dict[int, dict[str, float]]:
        """Per GPU: mean and median utilisation (%), share of samples above 0 %, peak memory (MiB)."""
        out = {}
        for gpu in sorted({s[1] for s in self.samples}):
            util = [s[2] for s in self.samples if s[1] == gpu]
            mem = [s[3] for s in self.samples if s[1] == gpu]
            out[gpu] = {"util_mean": statistics.fmean(util), "util_median": statistics.median(util),
                        "busy_share": sum(u > 0 for u in util) / len(util), "memory_peak_mib": max(mem),
                        "samples": len(util)}
        return out


def make_captures(root: Path, preset: str, count: int, device: str | None) -> list[Path]:
    """``count`` synth captures (seeds 0..count-1) under ``root``, generated where missing."""
    captures = []
    for seed in range(count):
        path = root / f"{preset}_seed{seed}"
        if not (path / "capture.json").is_file():
            cmd = [sys.executable, "-m", "nurec_usd", "synth", "--preset", preset, "--out", str(path), "--seed",
                   str(seed), "--no-groundtruth", "--overwrite"]
            if device is not None:
                cmd += ["--device", device]
            t0 = time.monotonic()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            print(f"generated {path.name} in {time.monotonic() - t0:.1f} s", flush=True)
        captures.append(path)
    return captures


def measure(captures: list[Path], out: Path, workers: int, ray: bool, device: str, options: dict) -> dict:
    """One batch into a fresh ``out``: its wall time, runs per hour, per-run times and GPU utilisation."""
    import nurec_usd

    shutil.rmtree(out, ignore_errors=True)
    with GpuSampler() as gpus:
        t0 = time.monotonic()
        result = nurec_usd.batch(captures, out, workers=workers, ray=True if ray else None, device=device,
                                 progress=True, **options)
        wall = time.monotonic() - t0
    ok = [r for r in result.runs if r["status"] == "built"]
    failed = [r for r in result.runs if r["status"] != "built"]
    for r in failed:
        print(f"  {r['name']}: {r['status']}: {r.get('error')}", flush=True)
    saved = json.loads(result.batch_json.read_text())
    return {"workers": workers, "ray": ray, "slots": saved["workers"], "runs": len(result.runs), "built": len(ok),
            "wall_s": wall, "runs_per_hour": len(ok) / wall * 3600 if wall > 0 else 0.0,
            "run_wall_s": [r["seconds"] for r in ok], "run_build_s": [r.get("build_seconds") for r in ok],
            "run_devices": sorted({str(r.get("cuda_visible_devices")) for r in ok}),
            "psnr": [r["metrics"]["psnr"] for r in ok], "gpus": gpus.summary() if gpus.available else None,
            "table": result.table()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synth", default="small", help="synth preset of the captures (default: small)")
    parser.add_argument("--captures", type=int, default=8, help="how many captures (default: 8)")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, comma-separated (default: 1,2)")
    parser.add_argument("--ray", action="store_true", help="through a local Ray, one task per run")
    parser.add_argument("--device", default="auto", help="auto (default), cuda or cpu")
    parser.add_argument("--dir", type=Path, default=REPO / "runs" / "batch_throughput",
                        help="captures and outputs go here (default: runs/batch_throughput)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the fast preset's)")
    parser.add_argument("--downscale", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=parse_option,
                        help="any other training or init option (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements to this file")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    options = {k: v for k, v in {"steps": args.steps, "downscale": args.downscale, **dict(args.set)}.items()
               if v is not None}
    from nurec_usd.train.config import make_config

    try:
        make_config("fast", **options)
    except ValueError as err:
        parser.error(str(err))

    synth_device = "cpu" if args.device == "cpu" else None
    captures = make_captures(args.dir / "captures", args.synth, args.captures, synth_device)
    import nurec_usd

    print("warm-up: one build, so that every measured batch finds the kernels compiled", flush=True)
    warm = nurec_usd.batch(captures[:1], args.dir / "warmup", workers=1, device=args.device, force=True,
                           progress=False, **options)
    if not warm.ok:
        print(warm.table())
        return 1

    rows = []
    for workers in counts:
        print(f"\n== {workers} worker{'s' if workers > 1 else ''}{' on Ray' if args.ray else ''}", flush=True)
        m = measure(captures, args.dir / f"out_w{workers}{'_ray' if args.ray else ''}", workers, args.ray,
                    args.device, options)
        print(m["table"])
        per_run = m["run_wall_s"]
        print(f"wall {m['wall_s']:.1f} s for {m['built']}/{m['runs']} runs: {m['runs_per_hour']:.1f} runs/hour; "
              f"per run {statistics.fmean(per_run):.1f} s mean, {statistics.median(per_run):.1f} s median, "
              f"{max(per_run):.1f} s max (build alone {statistics.fmean(m['run_build_s']):.1f} s mean); "
              f"slots {m['slots']}" if per_run else f"wall {m['wall_s']:.1f} s: no run built")
        if m["gpus"]:
            for gpu, g in m["gpus"].items():
                print(f"GPU {gpu}: utilisation {g['util_mean']:.0f}% mean, {g['util_median']:.0f}% median, busy "
                      f"{100 * g['busy_share']:.0f}% of {g['samples']} samples; "
                      f"memory peak {g['memory_peak_mib']:.0f} MiB")
        elif m["gpus"] is None:
            print("GPU utilisation: no nvidia-smi here")
        rows.append(m)

    base = rows[0]["runs_per_hour"] if rows and rows[0]["runs_per_hour"] else None
    print(f"\nRESULTS.md rows ({datetime.date.today()}, commit {commit()}, {args.captures} {args.synth} captures, "
          f"options {options or 'fast preset'}):")
    print("| workers | mode | slots | runs/hour | speed-up | per-run wall s (mean) | GPU util % (mean per GPU) |")
    print("|---|---|---|---|---|---|---|")
    for m in rows:
        util = ", ".join(f"{g['util_mean']:.0f}" for g in (m["gpus"] or {}).values()) or "-"
        speedup = f"{m['runs_per_hour'] / base:.2f}x" if base else "-"
        mean_run = f"{statistics.fmean(m['run_wall_s']):.1f}" if m["run_wall_s"] else "-"
        print(f"| {m['workers']} | {'ray' if m['ray'] else 'local'} | {m['slots']} | {m['runs_per_hour']:.1f} | "
              f"{speedup} | {mean_run} | {util} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"commit": commit(), "synth": args.synth, "captures": args.captures,
                                         "options": options, "device": args.device,
                                         "rows": [{k: v for k, v in m.items() if k != "table"} for m in rows]},
                                        indent=2, default=str) + "\n")
    return 0 if all(m["built"] == m["runs"] for m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
