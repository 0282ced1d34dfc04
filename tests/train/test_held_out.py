"""Which frames a build holds out: the index rule, its floor for tiny captures, and a dataset's own split."""

from __future__ import annotations

import json
import shutil

import numpy as np
from PIL import Image

from conftest import REPO
from nurec_usd.train.data import CaptureData, held_out


def test_tiny_sensors_still_hold_one_out():
    assert [i for i in range(20) if held_out(i, 8, 20)] == [4, 12]  # the usual rule
    for count, expected in ((1, []), (2, []), (3, [1]), (4, [2]), (5, [4]), (10, [4])):
        assert [i for i in range(count) if held_out(i, 8, count)] == expected, count
    assert [i for i in range(3) if held_out(i, 4, 3)] == [2]  # index 2 = 4 // 2 occurs: the rule itself
    assert not any(held_out(i, 0, 3) for i in range(3))  # 0 still means none


def _three_frames(root):
    """A camera-only capture of three frames (instant-ngp style transforms.json)."""
    (root / "images").mkdir(parents=True)
    frames = []
    for k in range(3):
        Image.new("RGB", (32, 24), (40 * k, 80, 120)).save(root / "images" / f"{k}.png")
        T = np.eye(4)
        T[0, 3] = 0.5 * k
        frames.append({"file_path": f"images/{k}.png", "transform_matrix": T.tolist()})
    (root / "transforms.json").write_text(json.dumps({"fl_x": 30.0, "w": 32, "h": 24, "frames": frames}))
    return root


def test_a_three_frame_capture_is_scored(tmp_path):
    from nurec_usd.capture.importers import load_any

    data = CaptureData(load_any(_three_frames(tmp_path / "three")), "cpu", eval_every=8)
    assert [f.frame for f in data.eval_frames] == [1] and [f.frame for f in data.train_frames] == [0, 2]


def test_frames_with_a_held_out_flag_follow_it(tmp_path):
    import dataclasses

    from nurec_usd.capture import load_capture

    shutil.copytree(REPO / "samples" / "tiny", tmp_path / "tiny")
    capture = load_capture(tmp_path / "tiny")
    cam_id = next(iter(capture.cameras))
    cam = capture.cameras[cam_id]
    flagged = tuple(dataclasses.replace(f, held_out=k in (0, 7)) for k, f in enumerate(cam.frames))
    capture.cameras[cam_id] = dataclasses.replace(cam, frames=flagged)
    data = CaptureData(capture, "cpu", eval_every=8, downscale=4)
    held = sorted((data.cameras[f.camera].id, f.frame) for f in data.eval_frames)
    others = [(c, 4) for c in list(capture.cameras)[1:]]  # the unflagged cameras keep the index rule
    assert held == sorted([(cam_id, 0), (cam_id, 7), *others])
