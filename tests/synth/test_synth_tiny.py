"""The tiny preset end to end on the CPU: validation, determinism, ground truth, the CLI.

The capture is generated once per test session (``tiny_outputs``, shared with
test_synth_lidar_vs_depth.py through this module's cache).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_CACHE: dict[str, object] = {}


def tiny_outputs(tmp_path_factory) -> tuple[Path, Path]:
    """(capture dir, ground-truth dir) of ``synth --preset tiny --seed 0`` on the CPU, made once per session."""
    if "tiny" not in _CACHE:
        from nurec_usd.synth import generate

        root = tmp_path_factory.mktemp("synth_tiny")
        result = generate("tiny", root / "tiny", seed=0, device="cpu")
        _CACHE["tiny"] = (result.capture_dir, result.groundtruth_dir)
        _CACHE["timings"] = result.timings
    return _CACHE["tiny"]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    return tiny_outputs(tmp_path_factory)


def run_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_tiny_validates(tiny):
    from nurec_usd.capture import validate_capture

    capture, _ = tiny
    assert validate_capture(capture) == []
    assert set(_CACHE["timings"]) >= {"scene", "compile", "bvh", "rays", "cameras", "lidar", "writing", "total"}


def test_tiny_contents(tiny):
    from nurec_usd.capture import load_capture

    capture, _ = tiny
    cap = load_capture(capture)
    assert {c.model for c in cap.cameras.values()} == {"pinhole", "opencv", "opencv_fisheye", "ftheta"}
    assert all(len(c.frames) == 10 for c in cap.cameras.values())
    assert any(c.rolling_shutter.direction != "global" for c in cap.cameras.values())
    lidar = cap.lidars["top"]
    assert len(lidar.sweeps) == 10
    sweep = lidar.load_sweep(3)
    assert len(sweep) > 0.6 * lidar.channels * lidar.columns, "most rays return"
    assert len(sweep) < 0.98 * lidar.channels * lidar.columns, "some returns are dropped"
    assert 0.0 <= sweep.intensity.min() and sweep.intensity.max() <= 1.0 and sweep.intensity.std() > 0.05
    # each column fires at its own time across the sweep
    spread = (sweep.timestamps_us.max() - sweep.timestamps_us.min()) * 1e-6
    assert spread == pytest.approx(1.0 / lidar.scan_rate_hz, rel=0.02)
    # world coordinates carry a geodetic-like offset that the loader removes
    assert np.linalg.norm(cap.world_offset_m) > 1e5
    np.testing.assert_allclose(cap.rig.T_world_rig[0], np.eye(4), atol=1e-6)


def test_actors_appear_and_leave(tiny):
    from nurec_usd.capture import load_capture

    cap = load_capture(tiny[0])
    assert len(cap.tracks) == 2
    starts = [t.timestamps_us[0] for t in cap.tracks.values()]
    ends = [t.timestamps_us[-1] for t in cap.tracks.values()]
    assert any(s > cap.start_us for s in starts), "one actor appears mid-capture"
    assert any(e < cap.end_us for e in ends), "one actor leaves mid-capture"
    for track in cap.tracks.values():
        assert track.label == "car"
        # moving: the box travels several metres while it exists
        assert np.linalg.norm(track.T_world_box[-1, :3, 3] - track.T_world_box[0, :3, 3]) > 2.0


def test_ground_truth_layout(tiny):
    from nurec_usd.capture import load_capture
    from nurec_usd.synth import load_groundtruth

    capture, gt_dir = tiny
    assert gt_dir == capture.parent / "tiny_groundtruth"
    gt = load_groundtruth(gt_dir)
    cap = load_capture(capture)
    assert [a["track_id"] for a in gt.actors] == list(cap.tracks)
    seen = set()
    for cam in cap.cameras.values():
        for frame in cam.frames:
            depth, actor = gt.camera_frame(cam.id, frame.timestamp_us)
            assert depth.shape == (cam.height, cam.width) and depth.dtype == np.float32
            assert actor.shape == (cam.height, cam.width) and actor.dtype == np.int16
            assert (depth >= 0).all() and (depth > 0).mean() > 0.4
            # nothing is seen where the actor image says "nothing"
            assert not ((depth == 0) & (actor >= 0)).any()
            seen |= set(np.unique(actor).tolist())
    assert {0, 1} <= seen, "both moving actors are seen by some camera"
    # the f-theta camera's corners are outside its lens: black, no depth
    ft = cap.cameras["right_ftheta"]
    depth, _ = gt.camera_frame(ft.id, ft.frames[0].timestamp_us)
    assert depth[0, 0] == 0 and depth[-1, -1] == 0
    assert (ft.frames[0].load_image()[0, 0] == 0).all()
    lidar = cap.lidars["top"]
    for i, sf in enumerate(lidar.sweeps):
        sweep = lidar.load_sweep(i)
        g = gt.sweep("top", sf.timestamp_us)
        n = len(sweep)
        assert g["range_clean"].shape == (n,) and g["points_clean"].shape == (n, 3) and g["actor"].shape == (n,)
        assert g["range_grid"].shape == (lidar.columns, lidar.channels)
        # the noisy point lies on the clean point's ray
        cos = np.einsum("ij,ij->i", sweep.points, g["points_clean"]) / (
            np.linalg.norm(sweep.points, axis=1) * np.linalg.norm(g["points_clean"], axis=1))
        assert cos.min() > 1 - 1e-6


def test_same_seed_gives_identical_files_via_cli(tiny, tmp_path):
    """`synth --preset tiny` again with the same seed: byte-identical capture and ground truth."""
    capture, gt_dir = tiny
    out = tmp_path / "again"
    r = run_cli("synth", "--preset", "tiny", "--out", out, "--seed", "0", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert str(out) in r.stdout and "Traceback" not in r.stderr
    a, b = _files(capture), _files(out)
    assert a.keys() == b.keys()
    different = [k for k in a if a[k] != b[k]]
    assert not different, f"files differ between two runs with one seed: {different[:5]}"
    ga, gb = _files(gt_dir), _files(tmp_path / "again_groundtruth")
    assert ga.keys() == gb.keys() and all(ga[k] == gb[k] for k in ga)


def test_cli_usage_errors(tiny, tmp_path):
    r = run_cli("synth", "--preset", "huge", "--out", tmp_path / "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "tiny" in r.stderr
    r = run_cli("synth", "--out", tmp_path / "x")
    assert r.returncode == 2 and "--preset" in r.stderr
    # an existing output is never replaced without --overwrite
    r = run_cli("synth", "--preset", "tiny", "--out", tiny[0], "--device", "cpu")
    assert r.returncode == 2 and r.stderr == f"synth: {tiny[0]} exists; pass --overwrite to replace it\n"
    r = run_cli("synth", "--preset", "tiny", "--out", tmp_path / "y", "--device", "tpu:7")
    assert r.returncode == 2 and "device" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--help")
    assert r.returncode == 0 and "synth" in r.stdout


def test_contact_sheet(tiny, tmp_path):
    from PIL import Image

    from nurec_usd.synth.contact_sheet import write_contact_sheet

    capture, gt_dir = tiny
    out = write_contact_sheet(capture, tmp_path / "sheet.png", groundtruth_dir=gt_dir, tile_width=160)
    with Image.open(out) as im:
        # 4 cameras x (3 frames + depth + actors) and a lidar row
        assert im.size == (5 * 160, 5 * 90)
