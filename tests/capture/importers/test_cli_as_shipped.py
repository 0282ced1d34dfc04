"""The command line on captures as their datasets ship: trimmed copies (``--skip-missing``), a
Blender-style split scored on its own test frames, a three-frame capture, ``--scene`` misuse."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import importer_helpers as helpers  # noqa: E402
import test_nerfstudio as ns  # noqa: E402  (its dataset writers)

native = helpers.native
QUICK_BUILD = ("--steps", "2", "--downscale", "4", "--no-progress", "--device", "cpu")


def run(*args):
    return subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_inspect_and_validate_refuse_then_skip_missing_images(native, tmp_path):
    root = tmp_path / "ngp"
    ns.write_instant_ngp(native, root, drop=(3, 8))
    for command in ("inspect", "validate"):
        r = run(command, root)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "frames[3].file_path: image file images/0004.jpg does not exist" in r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("hint: 2 files are missing; --skip-missing")
        r = run(command, root, "--skip-missing")
        assert r.returncode == 0, r.stderr
        assert "warning: --skip-missing: left out 2 frames whose file is missing (images/0004.jpg, " \
               "images/0009.jpg)" in r.stderr
    assert "8 frames at 10.0 Hz" in run("inspect", root, "--skip-missing").stdout


def test_native_validate_skip_missing(tmp_path):
    root = tmp_path / "tiny"
    shutil.copytree(helpers.SAMPLE, root)
    manifest = json.loads((root / "capture.json").read_text())
    (root / manifest["cameras"][1]["frames"][6]["image"]).unlink()
    r = run("validate", root, "--quick")
    assert r.returncode == 1 and "--skip-missing" in r.stderr.strip().splitlines()[-1]
    r = run("validate", root, "--quick", "--skip-missing")
    assert r.returncode == 0 and "left out 1 frame whose file is missing" in r.stderr, r.stderr


def test_scene_is_refused_on_other_formats(tmp_path):
    for command in ("inspect", "validate"):
        r = run(command, helpers.SAMPLE, "--scene", "scene-0061")
        assert r.returncode == 2 and "--scene applies to nuscenes captures only" in r.stderr, r.stderr


def test_build_is_scored_on_the_datasets_test_split(native, tmp_path):
    """A Blender-style split whose copy lacks a training image: refused without --skip-missing; with
    it, built (a couple of steps: the split is the point) and scored on the two test frames."""
    from nurec_usd.capture.importers import load_any

    root = tmp_path / "lego"
    ns.write_blender(native, root)
    (root / "train" / "r_2.png").unlink()
    r = run("build", root, "-o", tmp_path / "refused", *QUICK_BUILD)
    assert r.returncode == 1 and "--skip-missing" in r.stderr and not (tmp_path / "refused").exists()
    out = tmp_path / "run"
    r = run("build", root, "-o", out, "--skip-missing", *QUICK_BUILD)
    assert r.returncode == 0, r.stderr
    assert "warning: --skip-missing: left out 1 frame whose file is missing (train/r_2.png)" in r.stderr
    assert "loaded lego: 5 training / 2 held-out frames" in r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["held_out_frames"] == 2 and math.isfinite(m["psnr"])
    with pytest.warns(UserWarning):
        cap = load_any(root, skip_missing=True)
    cam = cap.cameras["camera_0"]
    assert sorted(cam.frames[f["frame"]].image_path.relative_to(root).as_posix() for f in m["frames"]) == \
        ["test/r_0.png", "test/r_1.png"]


def test_build_of_three_frames_holds_one_out(native, tmp_path):
    """Three timestamps: the index rule (4 mod 8) finds none; the middle one is held out instead,
    so the build reports real metrics rather than NaN over an empty set."""
    root = tmp_path / "three"
    meta = ns.write_instant_ngp(native, root)
    meta["frames"] = meta["frames"][:3]
    (root / "transforms.json").write_text(json.dumps(meta))
    out = tmp_path / "run"
    r = run("build", root, "-o", out, *QUICK_BUILD)
    assert r.returncode == 0, r.stderr
    assert "loaded three: 2 training / 1 held-out frames" in r.stderr and "no held-out frames" not in r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["held_out_frames"] == 1 and [f["frame"] for f in m["frames"]] == [1]
    assert math.isfinite(m["psnr"]) and math.isfinite(m["ssim"])
    assert len(list((out / "eval").iterdir())) > 0
