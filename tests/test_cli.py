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
    """samples/tiny validates and is what samples/make_sample.py writes today."""
    import numpy as np

    from nurec_usd.capture import load_capture
    from nurec_usd.capture.handmade import write_handmade_capture

    sample = REPO / "samples" / "tiny"
    r = run("validate", sample)
    assert r.returncode == 0, r.stderr
    fresh = write_handmade_capture(tmp_path / "fresh")
    assert json.loads((sample / "capture.json").read_text()) == json.loads((fresh / "capture.json").read_text())
    a, b = load_capture(sample), load_capture(fresh)
    for cam in a.cameras:
        for fa, fb in zip(a.cameras[cam].frames, b.cameras[cam].frames):
            diff = np.abs(fa.load_image().astype(int) - fb.load_image().astype(int)).max()
            assert diff <= 1, f"{fa.image_path} differs from a fresh render by {diff}: run `make sample`"
    for i in range(len(a.lidars["top"].sweeps)):
        sa, sb = a.lidars["top"].load_sweep(i), b.lidars["top"].load_sweep(i)
        assert len(sa) == len(sb)
        np.testing.assert_allclose(sa.points, sb.points, atol=1e-4)
