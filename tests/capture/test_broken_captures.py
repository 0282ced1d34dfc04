"""Each way a capture can be broken gives a clear problem naming the file and the field,
from the Python API and from the CLI (exit 1, no traceback)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nurec_usd.capture import CaptureError, load_capture, validate_capture


def _edit_manifest(root: Path, edit) -> None:
    path = root / "capture.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))  # json.dumps writes NaN as the (non-standard) NaN literal


def _first_image(root: Path, cam: int = 0, frame: int = 0) -> Path:
    m = json.loads((root / "capture.json").read_text())
    return root / m["cameras"][cam]["frames"][frame]["image"]


def _first_sweep(root: Path) -> Path:
    m = json.loads((root / "capture.json").read_text())
    return root / m["lidars"][0]["sweeps"][0]["file"]


def missing_image(root: Path) -> None:
    _first_image(root).unlink()


def wrong_image_size(root: Path) -> None:
    Image.new("RGB", (100, 50)).save(_first_image(root, frame=1))


def nan_pose(root: Path) -> None:
    _edit_manifest(root, lambda m: m["rig"]["T_world_rig"][2][0].__setitem__(3, math.nan))


def non_monotonic_timestamps(root: Path) -> None:
    def edit(m):
        ts = m["rig"]["timestamps_us"]
        ts[3], ts[4] = ts[4], ts[3]
    _edit_manifest(root, edit)


def path_escaping(root: Path) -> None:
    (root.parent / "outside.png").write_bytes(_first_image(root).read_bytes())
    _edit_manifest(root, lambda m: m["cameras"][1]["frames"][0].__setitem__("image", "../outside.png"))


def absolute_path(root: Path) -> None:
    _edit_manifest(root, lambda m: m["cameras"][1]["frames"][0].__setitem__("image", str(_first_image(root))))


def symlink_outside(root: Path) -> None:
    outside = root.parent / "elsewhere.png"
    outside.write_bytes(_first_image(root).read_bytes())
    link = _first_image(root, cam=2, frame=2)
    link.unlink()
    link.symlink_to(outside)


def truncated_sweep(root: Path) -> None:
    path = _first_sweep(root)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])


def manifest_not_json(root: Path) -> None:
    (root / "capture.json").write_text('{"format": "nurec_usd.capture",\n  "version": 1,\n  oops\n}')


def unknown_camera_model(root: Path) -> None:
    _edit_manifest(root, lambda m: m["cameras"][2].__setitem__("model", "kannala_brandt_9"))


def non_orthonormal_rotation(root: Path) -> None:
    _edit_manifest(root, lambda m: m["cameras"][0]["T_rig_camera"][0].__setitem__(0, 1.5))


def negative_box_size(root: Path) -> None:
    _edit_manifest(root, lambda m: m["tracks"][1].__setitem__("size_m", [4.0, -1.0, 1.5]))


def frame_outside_rig_time(root: Path) -> None:
    _edit_manifest(root, lambda m: m["cameras"][0]["frames"][4].__setitem__(
        "timestamp_us", m["rig"]["timestamps_us"][-1] + 1))


def sweep_header_timestamp_mismatch(root: Path) -> None:
    _edit_manifest(root, lambda m: m["lidars"][0]["sweeps"][0].__setitem__(
        "timestamp_us", m["lidars"][0]["sweeps"][0]["timestamp_us"] + 5))


def missing_field(root: Path) -> None:
    _edit_manifest(root, lambda m: m["cameras"][1]["intrinsics"].pop("fy"))


# (break the capture, expected file, expected field, words expected in the message)
CASES = [
    (missing_image, "capture.json", "cameras[0].frames[0].image", "does not exist"),
    (wrong_image_size, "capture.json", "cameras[0].frames[1].image", "100x50"),
    (nan_pose, "capture.json", "rig.T_world_rig[2]", "non-finite"),
    (non_monotonic_timestamps, "capture.json", "rig.timestamps_us[4]", "strictly increase"),
    (path_escaping, "capture.json", "cameras[1].frames[0].image", "leaves the capture directory"),
    (absolute_path, "capture.json", "cameras[1].frames[0].image", "absolute"),
    (symlink_outside, "capture.json", "cameras[2].frames[2].image", "outside the capture directory"),
    (truncated_sweep, "lidar/top/", "header.point_count", "truncated"),
    (manifest_not_json, "capture.json", "line 3, column 3", "not valid JSON"),
    (unknown_camera_model, "capture.json", "cameras[2].model", "kannala_brandt_9"),
    (non_orthonormal_rotation, "capture.json", "cameras[0].T_rig_camera", "not orthonormal"),
    (negative_box_size, "capture.json", "tracks[1].size_m", "positive"),
    (frame_outside_rig_time, "capture.json", "cameras[0].frames[4].timestamp_us", "outside the rig poses' range"),
    (sweep_header_timestamp_mismatch, "lidar/top/", "header.base_timestamp_us", "differs"),
    (missing_field, "capture.json", "cameras[1].intrinsics", "'fy' is a required property"),
]


@pytest.mark.parametrize("breaker, file, field, words", CASES, ids=[c[0].__name__ for c in CASES])
def test_broken_capture_is_reported(capture_copy, breaker, file, field, words):
    breaker(capture_copy)
    problems = validate_capture(capture_copy)
    assert problems, "a broken capture must not validate"
    matching = [p for p in problems if p.file.startswith(file) and p.field == field and words in p.message]
    assert matching, f"no problem at {file}: {field} mentioning {words!r}; got:\n" + "\n".join(map(str, problems))
    with pytest.raises(CaptureError) as err:
        load_capture(capture_copy)
    assert field in str(err.value)


@pytest.mark.parametrize("breaker, file, field, words", CASES[:9], ids=[c[0].__name__ for c in CASES[:9]])
def test_cli_reports_without_traceback(capture_copy, breaker, file, field, words):
    breaker(capture_copy)
    for command in ("validate", "inspect"):
        run = subprocess.run([sys.executable, "-m", "nurec_usd", command, str(capture_copy)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr + run.stdout
        assert field in run.stderr and words in run.stderr


def test_every_problem_is_listed_not_just_the_first(capture_copy):
    missing_image(capture_copy)
    nan_pose(capture_copy)
    negative_box_size(capture_copy)
    truncated_sweep(capture_copy)
    fields = {p.field for p in validate_capture(capture_copy)}
    assert {"cameras[0].frames[0].image", "rig.T_world_rig[2]", "tracks[1].size_m", "header.point_count"} <= fields


def test_deep_validation_finds_a_corrupt_image(capture_copy):
    path = _first_image(capture_copy, cam=3, frame=1)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the header (and size) still read fine
    assert validate_capture(capture_copy, deep=False) == []
    problems = validate_capture(capture_copy, deep=True)
    assert any(p.file == path.relative_to(capture_copy).as_posix() for p in problems), problems


def test_deep_validation_finds_bad_sweep_contents(capture_copy):
    path = _first_sweep(capture_copy)
    from nurec_usd.capture.sweep_io import read_nrl, write_nrl

    sweep = read_nrl(path)
    channel = sweep.channel.copy()
    channel[0] = 99
    points = sweep.points.copy()
    points[1] = np.nan
    write_nrl(path, _sweep_ts(capture_copy), points, sweep.intensity, sweep.timestamps_us, channel)
    notes = []
    fields = {p.field for p in validate_capture(capture_copy, notes=notes)}
    assert "channel" in fields
    # a NaN point is what lidars write for a ray without a return: dropped when read, and noted
    assert "xyz" not in fields
    assert [n.field for n in notes] == ["xyz"] and "1 point with non-finite coordinates" in notes[0].message


def _sweep_ts(root: Path) -> int:
    m = json.loads((root / "capture.json").read_text())
    return m["lidars"][0]["sweeps"][0]["timestamp_us"]
