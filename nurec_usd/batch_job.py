"""One run of a batch: build and export one capture into ``OUT/<name>``, or skip it when up to date.

This is what a batch worker does, in a local worker process or in a Ray task alike. A run is
up to date when ``OUT/<name>`` is a finished run (status completed or budget) whose key matches:
the key is a SHA-256 over the inputs' combined hash (``hash_inputs``, as the run's manifest.json
records it), the resolved configuration (its config.json, less the device: the same run on
another machine is the same run) and the build options that change the output (format, usdz,
collision). The run directory itself is the build's, written all or nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nurec_usd.pipeline import _json_default, _json_safe, build, hash_inputs

# A finished build with one of these statuses is a success; "diverged" and "interrupted" are not.
GOOD_BUILD_STATUSES = ("completed", "budget")
# The figures of metrics.json a batch reports for each run.
REPORTED_METRICS = ("psnr", "ssim", "baseline_psnr", "lidar_median_range_error_m", "lidar_hit_accuracy",
                    "gaussians")


@dataclass
class RunSpec:
    """Everything a worker needs for one run (plain values: it is pickled to worker processes and Ray)."""

    name: str
    capture: str
    run_dir: str
    log_path: str
    preset: str = "fast"
    budget_s: float | None = None
    device: str = "auto"
    format: str | None = None
    usdz: bool = False
    collision: bool = False
    force: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the resolved configuration (BuildConfig.to_dict())

    @property
    def build_options(self) -> dict[str, Any]:
        """The build's options besides its configuration that change what it writes (as its manifest records them)."""
        return {"format": self.format, "usdz": self.usdz, "collision": self.collision}


def canonical_config(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as config.json holds it: through the build's own JSON writer and back."""
    return json.loads(json.dumps(_json_safe(config), default=_json_default))


def run_key(inputs_sha256: str, config: dict[str, Any], build_options: dict[str, Any]) -> str:
    """The key that says two runs are the same: inputs, configuration (less the device) and build options."""
    config = {k: v for k, v in canonical_config(config).items() if k != "device"}
    text = json.dumps({"inputs": inputs_sha256, "config": config, "build_options": build_options},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class NotARunError(RuntimeError):
    """A folder where a run should be that was not written by ``build``."""


def finished_run(run_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """The key and manifest of the finished run in ``run_dir``; the key is None for a run written
    before builds recorded their build options (such a run is rebuilt)."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise NotARunError(f"{run_dir} exists and is not a run directory written by build ({err}); "
                           "move it away or choose another output folder") from err
    if manifest.get("format") != "nurec_usd.run":
        raise NotARunError(f"{run_dir / 'manifest.json'}: format: not a run manifest; move the folder away")
    options = manifest.get("build_options")
    if options is None:
        return None, manifest
    return run_key(manifest["inputs"]["combined_sha256"], config, options), manifest


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_record(spec: RunSpec, status: str, t0: float, **fields: Any) -> dict[str, Any]:
    """A run's entry in batch.json: status "built", "skipped" or "failed", and what is known of it."""
    record = {"name": spec.name, "capture": spec.capture, "run_dir": spec.run_dir, "log": spec.log_path,
              "status": status, "seconds": round(time.monotonic() - t0, 3), "host": socket.gethostname(),
              "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    record.update(fields)
    return record


def _finished_fields(run_dir: Path, key: str | None, manifest: dict[str, Any]) -> dict[str, Any]:
    """The record's fields read back from a finished run directory."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"key": key, "build_status": manifest.get("status"), "message": manifest.get("message"),
            "build_seconds": round(sum(manifest.get("stage_seconds", {}).values()), 3),
            "device": manifest.get("device"), "bytes": folder_bytes(run_dir),
            "metrics": {k: metrics.get(k) for k in REPORTED_METRICS}}


@contextlib.contextmanager
def _output_to(log_file):
    """Everything the process writes to its stdout and stderr (Python's and native code's) goes to
    ``log_file`` meanwhile: workers share the terminal with the batch's progress bar."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Build and export one capture into ``spec.run_dir``, or skip it when it is up to date.

    Never raises for a problem of the run itself (bad capture, failed build): that is a record with
    status "failed" and its error; the traceback goes to the run's log (``spec.log_path``, appended
    to by every attempt). KeyboardInterrupt and SystemExit pass through (the build leaves nothing).
    """
    t0 = time.monotonic()
    log_path = Path(spec.log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", buffering=1) as log_file, _output_to(log_file):
        print(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} run {spec.name}: {spec.capture} -> {spec.run_dir} "
              f"(pid {os.getpid()} on {socket.gethostname()}, "
              f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})", flush=True)
        try:
            record = _run(spec, t0)
        except (KeyboardInterrupt, SystemExit):
            print("== stopped", flush=True)
            raise
        except Exception as err:  # noqa: BLE001 - one run's failure must not stop the batch
            from nurec_usd.capture import CaptureError

            if not isinstance(err, CaptureError):  # a capture's problems say all there is to say
                traceback.print_exc()
            record = run_record(spec, "failed", t0, error=_error_text(err))
        print(f"== {record['status']} in {record['seconds']:.1f} s"
              + (f": {record['error']}" if record.get("error") else ""), flush=True)
    return record


def _error_text(err: BaseException) -> str:
    from nurec_usd.capture import CaptureError

    if isinstance(err, CaptureError):  # its message lists every problem, each naming its file and field
        return str(err)
    return f"{type(err).__name__}: {err}"


def _run(spec: RunSpec, t0: float) -> dict[str, Any]:
    from nurec_usd.capture.importers import load_any

    run_dir = Path(spec.run_dir)
    exists = run_dir.exists()
    if exists and not spec.force:
        key, manifest = finished_run(run_dir)
        if key is not None and manifest.get("status") in GOOD_BUILD_STATUSES:
            capture = load_any(spec.capture, format=spec.format)
            wanted = run_key(hash_inputs(capture)["combined_sha256"], spec.config, spec.build_options)
            if wanted == key:
                print(f"up to date: inputs and configuration match {run_dir} (key {key[:12]})", flush=True)
                return run_record(spec, "skipped", t0, **_finished_fields(run_dir, key, manifest))
            print("inputs or configuration changed since the finished run: rebuilding it", flush=True)
        else:
            print(f"the run in {run_dir} is not up to date (status {manifest.get('status')}): rebuilding it",
                  flush=True)
    elif exists:
        finished_run(run_dir)  # refuses a folder that is not a run before it is replaced

    def say(message: str) -> None:
        print(message, flush=True)

    result = build(spec.capture, run_dir, preset=spec.preset, budget_s=spec.budget_s, device=spec.device,
                   format=spec.format, overwrite=exists, progress=False, log=say, collision=spec.collision,
                   usdz=spec.usdz, **spec.options)
    key, manifest = finished_run(result.out_dir)
    fields = _finished_fields(result.out_dir, key, manifest)
    if result.status not in GOOD_BUILD_STATUSES:
        return run_record(spec, "failed", t0, error=f"build {result.status}: {result.message}", **fields)
    return run_record(spec, "built", t0, **fields)
