"""``build`` on imported captures written from ``samples/tiny``: camera-only COLMAP and nerfstudio,
and KITTI raw and NCore v4 with lidar (NCore with tracks).

The captures are written by the importer tests' own writers (``tests/capture/importers``),
loaded here by file path since the test folders are not packages. They have no lidar, so
the run must start from the SfM points the importers put in ``metadata["sfm_points"]``. Images
are shrunk 2x and the build is 30 steps: the point is that an imported capture goes through
every stage, reports finite held-out metrics and records its own description files in the
manifest, not the quality of such a short run.

KITTI and NCore convert their sweeps (NCore: the whole sequence) into the import cache under
``$XDG_CACHE_HOME/nurec_usd/imports``; each test points ``XDG_CACHE_HOME`` at its own tmp dir, so
the builds share no state with each other or with the user's ~/.cache, and the manifest must
list (and hash) the converted sweeps there.
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
# Captures with lidar start from ~38k lidar Gaussians, ~3 s a CPU step here: capped at 6k (and a
# sweep every other step, like test_build's QUICK), a build stays under a minute on two cores.
LIDAR_BUILD = dict(max_points=6000, lidar_every=2)


def _helpers(name: str):
    """The importer test module ``name`` (for its capture writer), under a private module name."""
    path = IMPORTER_TESTS / f"{name}.py"
    if str(IMPORTER_TESTS) not in sys.path:  # they import ``importer_helpers`` by name
        sys.path.insert(0, str(IMPORTER_TESTS))
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


def _build(root: Path, out: Path, **extra):
    from nurec_usd import build

    lines: list[str] = []
    result = build(root, out, log=lines.append, **BUILD, **extra)
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


def _check_lidar_run(result, out: Path, capture, held_out_frames: int, held_out_sweeps: int,
                     cache: Path) -> tuple[dict, dict]:
    """A completed run with lidar metrics, whose manifest hashes the converted sweeps in ``cache``."""
    assert result.status == "completed", result.message
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "completed" and m["steps"] == BUILD["steps"]
    assert m["held_out_frames"] == held_out_frames
    assert math.isfinite(m["psnr"]) and math.isfinite(m["baseline_psnr"])
    assert m["psnr"] > m["baseline_psnr"], (m["psnr"], m["baseline_psnr"])
    assert m["held_out_sweeps"] == held_out_sweeps
    assert math.isfinite(m["lidar_median_range_error_m"]), m["lidar_median_range_error_m"]
    assert math.isfinite(m["lidar_hit_accuracy"])

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    imports = (cache / "nurec_usd" / "imports").resolve()
    root = Path(manifest["inputs"]["root"])
    hashed = {}
    for row in manifest["inputs"]["files"]:
        path = Path(row["path"])
        hashed[(path if path.is_absolute() else root / path).resolve()] = row
    sweeps = [Path(s.path).resolve() for lidar in capture.lidars.values() for s in lidar.sweeps]
    assert sweeps and all(p.suffix == ".nrl" and p.is_relative_to(imports) for p in sweeps), sweeps
    for p in sweeps:
        assert p in hashed, f"{p} not in the manifest"
        assert hashed[p]["sha256"] == _sha256(p) and hashed[p]["bytes"] == p.stat().st_size
    return m, manifest


def test_build_runs_on_a_kitti_drive(native, tmp_path, monkeypatch):
    from nurec_usd.capture.importers import load_any

    cache = tmp_path / "xdg_cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    helpers = _helpers("test_kitti")
    drive = helpers.write_kitti(native, tmp_path / "kitti")["drive"]  # with oxts: poses as written
    out = tmp_path / "run"
    result, _ = _build(drive, out, **LIDAR_BUILD)
    capture = load_any(drive)  # the same cache: the sweeps build converted
    n_frames = sum(len(cam.frames) for cam in capture.cameras.values())
    n_sweeps = sum(len(lidar.sweeps) for lidar in capture.lidars.values())
    assert set(capture.cameras) == {"image_02", "image_03"} and n_sweeps == len(native.lidars["top"].sweeps)
    m, manifest = _check_lidar_run(result, out, capture, held_out_frames=n_frames // 5,
                                   held_out_sweeps=n_sweeps // 5, cache=cache)
    assert m["actor_gaussians"] == 0  # KITTI raw has no boxes

    # the drive's own pose files are hashed, and so is the calibration in the date folder above it
    hashed = {row["path"]: row for row in manifest["inputs"]["files"]}
    assert sum(p.startswith("oxts/data/") for p in hashed) == len(native.rig.timestamps_us)
    calib = [p for p in hashed if Path(p).name.startswith("calib_")]
    assert sorted(Path(p).name for p in calib) == ["calib_cam_to_cam.txt", "calib_imu_to_velo.txt",
                                                    "calib_velo_to_cam.txt"]


def test_build_runs_on_an_ncore_sequence(native, tmp_path, monkeypatch):
    pytest.importorskip("ncore", reason="the NCore importer needs nvidia-ncore (pip install nvidia-ncore)")
    from nurec_usd.capture.importers import load_any

    cache = tmp_path / "xdg_cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    helpers = _helpers("test_ncore")
    sequence = helpers.write_ncore(native, tmp_path / "ncore" / "tiny_ncore")
    out = tmp_path / "run"
    result, _ = _build(sequence, out, **LIDAR_BUILD)
    capture = load_any(sequence)  # the converted capture build used, from the same cache
    assert Path(capture.root).resolve().is_relative_to((cache / "nurec_usd" / "imports").resolve())
    assert set(capture.tracks) == set(native.tracks)
    n_cams = len(native.cameras)
    m, manifest = _check_lidar_run(result, out, capture, held_out_frames=2 * n_cams,
                                   held_out_sweeps=2, cache=cache)
    assert m["actor_gaussians"] > 0  # the fixture's two car tracks
    assert Path(manifest["inputs"]["root"]).resolve() == Path(capture.root).resolve()
    assert any(row["path"] == "capture.json" for row in manifest["inputs"]["files"])


def test_build_runs_on_a_nuscenes_scene(tmp_path, monkeypatch):
    from nurec_usd.capture.importers import load_any

    cache = tmp_path / "xdg_cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    helpers = _helpers("test_nuscenes")
    rig = helpers.synth_native(tmp_path / "rig")  # six pinhole cameras (nuScenes' CAM_* channels) and a lidar
    root = helpers.write_nuscenes(rig, tmp_path / "nuscenes", scenes=(("scene-0061", range(10)),))["root"]
    out = tmp_path / "run"
    result, _ = _build(root, out, load_options={"scene": "scene-0061"}, **LIDAR_BUILD)
    capture = load_any(root, scene="scene-0061")  # the same cache: the sweeps build converted
    assert len(capture.cameras) == 6 and len(capture.tracks) == len(rig.tracks) + 1  # the cars and a cone
    n_cams = len(capture.cameras)
    m, manifest = _check_lidar_run(result, out, capture, held_out_frames=2 * n_cams, held_out_sweeps=2, cache=cache)
    assert m["actor_gaussians"] > 0  # the annotated cars
    hashed = {row["path"] for row in manifest["inputs"]["files"]}
    assert {"scene.json", "sample_data.json", "ego_pose.json", "sample_annotation.json"} <= hashed  # the tables
    assert sum("/samples/CAM_" in p or "/sweeps/CAM_" in p for p in hashed) == 6 * len(rig.cameras["CAM_FRONT"].frames)
