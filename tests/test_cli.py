"""The command line on a good capture and on the bundled sample."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_help_lists_the_commands():
    r = run("--help")
    assert r.returncode == 0
    assert "inspect" in r.stdout and "validate" in r.stdout


def test_no_command_is_a_usage_error():
    r = run()
    assert r.returncode == 2 and "usage" in r.stderr


def test_inspect_summarises(handmade_capture):
    r = run("inspect", handmade_capture)
    assert r.returncode == 0, r.stderr
    for words in ("front_wide", "opencv_fisheye", "ftheta", "rolling top-to-bottom 20.0 ms", "5 frames at 10.0 Hz",
                  "16 ch x 360 col", "5 sweeps (nrl)", "tracks    2: 2 car", "0.60 s"):
        assert words in r.stdout, (words, r.stdout)


def test_inspect_json(handmade_capture):
    r = run("inspect", "--json", handmade_capture)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [c["model"] for c in summary["cameras"]] == ["pinhole", "opencv", "opencv_fisheye", "ftheta"]
    assert summary["lidars"][0]["channels"] == 16
    assert summary["tracks_by_class"] == {"car": 2}


def test_validate_clean_capture(handmade_capture):
    r = run("validate", handmade_capture)
    assert r.returncode == 0, r.stderr
    assert "valid" in r.stdout


def test_missing_directory(tmp_path):
    r = run("validate", tmp_path / "nope")
    assert r.returncode == 1 and "no such capture directory" in r.stderr and "Traceback" not in r.stderr


def test_bundled_sample_is_valid_and_up_to_date(tmp_path):
    """samples/tiny validates and is what `synth --preset tiny` (seed 0, CPU) writes today.

    Compared with tolerances for another machine's floating point: manifest numbers to 1e-9, images
    within 1 grey level (a stray pixel at a silhouette may flip: at most 0.1 %), sweeps point by point.
    """
    import numpy as np

    from nurec_usd.capture import load_capture
    from nurec_usd.synth import generate

    def _assert_json_close(a, b, path: str, msg: str) -> None:
        if isinstance(a, dict):
            assert isinstance(b, dict) and a.keys() == b.keys(), f"{path} {msg}"
            for k in a:
                _assert_json_close(a[k], b[k], f"{path}.{k}", msg)
        elif isinstance(a, list):
            assert isinstance(b, list) and len(a) == len(b), f"{path} {msg}"
            for i, (x, y) in enumerate(zip(a, b)):
                _assert_json_close(x, y, f"{path}[{i}]", msg)
        elif isinstance(a, float) or isinstance(b, float):
            assert abs(a - b) <= 1e-9 * max(1.0, abs(a)), f"{path}: {a} != {b}: {msg}"
        else:
            assert a == b, f"{path}: {a!r} != {b!r}: {msg}"

    sample = REPO / "samples" / "tiny"
    r = run("validate", sample)
    assert r.returncode == 0, r.stderr
    fresh = generate("tiny", tmp_path / "fresh", seed=0, device="cpu", groundtruth_dir=None).capture_dir
    stale = "differs from a fresh `synth --preset tiny` run: run `make sample`"
    _assert_json_close(json.loads((sample / "capture.json").read_text()),
                       json.loads((fresh / "capture.json").read_text()), "capture.json", stale)
    a, b = load_capture(sample), load_capture(fresh)
    for cam in a.cameras:
        for fa, fb in zip(a.cameras[cam].frames, b.cameras[cam].frames):
            diff = np.abs(fa.load_image().astype(int) - fb.load_image().astype(int)).max(axis=-1)
            assert (diff > 1).mean() <= 1e-3, f"{fa.image_path} {stale} (max diff {diff.max()})"
    for i in range(len(a.lidars["top"].sweeps)):
        sa, sb = a.lidars["top"].load_sweep(i), b.lidars["top"].load_sweep(i)
        assert abs(len(sa) - len(sb)) <= 0.002 * len(sa), f"sweep {i} {stale}"
        if len(sa) == len(sb):
            close = np.abs(sa.points - sb.points).max(axis=1) <= 1e-3
            assert close.mean() >= 0.998, f"sweep {i} {stale}"


def test_set_values_are_python_literals_or_text():
    from nurec_usd.cli import parse_option

    assert parse_option("lidar_every=2") == ("lidar_every", 2)
    assert parse_option("lidar_range_weight=0.5") == ("lidar_range_weight", 0.5)
    assert parse_option("refine_tracks=True") == ("refine_tracks", True)
    assert parse_option("voxel_m=1e-1") == ("voxel_m", 0.1)
    assert parse_option("name=fast") == ("name", "fast")  # not a literal: kept as text
    assert parse_option("name=a=b") == ("name", "a=b")  # split at the first '='


def test_build_set_refuses_malformed_unknown_and_repeated_options(handmade_capture, tmp_path):
    out = tmp_path / "run"
    r = run("build", handmade_capture, "-o", out, "--set", "lidar_every")
    assert r.returncode == 2 and "expected KEY=VALUE" in r.stderr, r.stderr
    r = run("build", handmade_capture, "-o", out, "--set", "lidar_range_weigth=1")
    assert r.returncode == 2 and "did you mean 'lidar_range_weight'?" in r.stderr, r.stderr
    assert "lidar_hit_weight" in r.stderr  # the options are listed
    r = run("build", handmade_capture, "-o", out, "--steps", "3", "--set", "steps=4")
    assert r.returncode == 2 and "--set steps repeats" in r.stderr, r.stderr
    r = run("build", handmade_capture, "-o", out, "--set", "steps=many")
    assert r.returncode == 2 and "--set steps='many': must be an integer >= 1" in r.stderr, r.stderr
    assert not out.exists()


def test_build_on_a_pipe_prints_progress_lines_and_its_sh_degree(handmade_capture, tmp_path):
    """stdout and stderr on pipes (a log file, CI): training and evaluation print plain progress
    lines (step, loss, PSNR, rate) rather than nothing; a run too short to raise the SH degree
    says so; Warp says nothing about a missing CUDA driver."""
    import os
    import re

    from nurec_usd.ops.warp_init import NO_DRIVER_WARNING, cuda_driver_present

    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "nurec_usd", "build", str(handmade_capture), "-o", str(out),
                        "--steps", "4", "--downscale", "2", "--device", "cpu", "--set", "log_interval=2",
                        "--set", "sh_step_fraction=0.9"],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NUREC_USD_PROGRESS_INTERVAL_S": "0"})
    assert r.returncode == 0, r.stderr
    train = [line for line in r.stderr.splitlines() if line.startswith("train: ")]
    assert len(train) == 2, r.stderr
    assert re.fullmatch(r"train: 2/4 steps \(50%\), loss \d\.\d{4}, psnr \d+\.\d\d, gaussians [\d,]+; "
                        r"[\d.]+ steps/s; \d+s left", train[0]), train[0]
    assert re.fullmatch(r"train: 4/4 steps \(100%\), loss \d\.\d{4}, psnr \d+\.\d\d, gaussians [\d,]+; "
                        r"[\d.]+ steps/s; \d+s in all", train[1]), train[1]
    evals = [line for line in r.stderr.splitlines() if line.startswith("eval: ")]
    assert evals and evals[-1].startswith("eval: 5/5 views (100%)"), r.stderr
    assert "note: the scene ends at SH degree 0 (view-independent colour), below the configured 1" in r.stderr
    assert "SH degree 0 (view-independent colour)" in r.stdout
    assert json.loads((out / "metrics.json").read_text())["sh_degree"] == 0
    assert "\r" not in r.stderr
    if not cuda_driver_present():
        assert NO_DRIVER_WARNING not in r.stderr
