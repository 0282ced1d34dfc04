"""``build`` on camera-only imported captures: COLMAP and nerfstudio, written from ``samples/tiny``.

The captures are written by the importer tests' own writers (``tests/capture/importers``),
loaded here by file path since the test folders are not packages. They have no lidar, so
the run must start from the SfM points the importers put in ``metadata["sfm_points"]``. Images
are shrunk 2x and the build is 30 steps: the point is that an imported capture goes through
every stage, reports finite held-out metrics and records its own description files in the
manifest, not the quality of such a short run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
IMPORTER_TESTS = HERE.parent / "capture" / "importers"
REPO = HERE.parents[1]

# eval_every=4: frames 2 and 6 of each camera's 10 are held out.
BUILD = dict(steps=30, downscale=2, eval_every=4, progress=False)


def _helpers(name: str):
    """The importer test module ``name`` (for its capture writer), under a private module name."""
    path = IMPORTER_TESTS / f"{name}.py"
    mod_name = f"_build_imported_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def native():
    from nurec_usd.capture import load_capture

    return load_capture(REPO / "samples" / "tiny")


def _true_colours(native, xyz_abs: np.ndarray) -> np.ndarray:
    """uint8 colours of absolute world points, seen in a few native frames (as SfM points carry)."""
    import torch

    from nurec_usd.scene.init import colour_points

    frames = [(cam, fi) for cam in native.cameras for fi in (0, 5)]
    pts = torch.from_numpy(xyz_abs - native.world_offset_m)
    rgb, _ = colour_points(native, frames, pts, [], [], torch.device("cpu"))
    return (rgb.clamp(0, 1) * 255).round().to(torch.uint8).numpy()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(root: Path, out: Path):
    from nurec_usd import build

    lines: list[str] = []
    result = build(root, out, log=lines.append, **BUILD)
    return result, lines


def _check_run(result, lines: list[str], out: Path, n_points: int, held_out: int) -> dict:
    assert result.status == "completed", result.message
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "completed" and m["steps"] == BUILD["steps"]
    assert m["held_out_frames"] == held_out
    assert math.isfinite(m["psnr"]) and math.isfinite(m["baseline_psnr"])
    assert m["psnr"] > m["baseline_psnr"]
    assert m["actor_gaussians"] == 0  # no tracks in a camera-only capture
    # initialised from the importer's SfM points, not from random points in the frusta
    sfm = [line for line in lines if "SfM points" in line]
    assert sfm and not any("random points" in line for line in lines), lines
    assert sfm[0].startswith("no lidar: ")
    n_init = int(sfm[0].split()[2].replace(",", ""))
    assert 0 < n_init <= n_points
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    return manifest


def test_build_runs_on_a_colmap_capture(native, tmp_path, monkeypatch):
    helpers = _helpers("test_colmap")
    real = _true_colours(native, helpers.world_points(native))
    monkeypatch.setattr(helpers, "colours", lambda n: real)  # the writer's own are a pattern, for its round trip
    root = tmp_path / "scene"
    truth = helpers.write_workspace(native, root, binary=True)  # COLMAP's default output
    out = tmp_path / "run"
    result, lines = _build(root, out)
    n_cams = len(helpers.CAMERAS)
    manifest = _check_run(result, lines, out, len(truth["xyz"]), held_out=2 * n_cams)

    hashed = {row["path"]: row for row in manifest["inputs"]["files"]}
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        assert hashed[f"sparse/0/{name}"]["sha256"] == _sha256(root / "sparse" / "0" / name)
    assert sum(p.startswith("images/") for p in hashed) == len(truth["images"])


def test_build_runs_on_a_nerfstudio_capture(native, tmp_path):
    helpers = _helpers("test_nerfstudio")
    root = tmp_path / "scene"
    variant = helpers.VARIANTS["per_frame"]  # three cameras (pinhole, opencv, fisheye) in one file
    truth = helpers.write_dataset(native, root, **variant)
    # the writer's colours are a pattern, for its round trip: points with their true colours instead
    helpers.write_ply_binary(root / "sparse_pc.ply", truth["xyz"], _true_colours(native, truth["xyz"]))
    out = tmp_path / "run"
    result, lines = _build(root, out)
    manifest = _check_run(result, lines, out, len(truth["xyz"]), held_out=2 * len(variant["cameras"]))

    hashed = {row["path"]: row for row in manifest["inputs"]["files"]}
    assert hashed["transforms.json"]["sha256"] == _sha256(root / "transforms.json")
    assert sum(p.startswith("images/") for p in hashed) == len(truth["frames"])


def test_manifest_hashes_the_nerfstudio_points(native, tmp_path):
    from nurec_usd.capture.importers import load_any
    from nurec_usd.pipeline import hash_inputs

    helpers = _helpers("test_nerfstudio")
    root = tmp_path / "scene"
    helpers.write_dataset(native, root, **helpers.VARIANTS["per_frame"])
    hashed = {row["path"] for row in hash_inputs(load_any(root))["files"]}
    assert "transforms.json" in hashed
    assert "sparse_pc.ply" in hashed
