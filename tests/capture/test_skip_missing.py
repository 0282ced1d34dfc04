"""``skip_missing`` on a native capture: frames whose image and sweeps whose file is missing are left
out with one warning, instead of refusing the capture (whose refusal names the option)."""

from __future__ import annotations

import json

import pytest

from nurec_usd.capture import CaptureError, load_capture, validate_capture
from nurec_usd.capture.missing import MissingFiles, MissingFilesWarning


def _drop(capture_dir, image: int = 1, sweep: int = 2) -> tuple[str, str]:
    manifest = json.loads((capture_dir / "capture.json").read_text())
    image_rel = manifest["cameras"][0]["frames"][image]["image"]
    sweep_rel = manifest["lidars"][0]["sweeps"][sweep]["file"]
    (capture_dir / image_rel).unlink()
    (capture_dir / sweep_rel).unlink()
    return image_rel, sweep_rel


def test_refusal_names_each_file_and_the_option(capture_copy):
    image_rel, sweep_rel = _drop(capture_copy)
    with pytest.raises(CaptureError) as err:
        load_capture(capture_copy)
    assert [p.field for p in err.value.problems] == ["cameras[0].frames[1].image", "lidars[0].sweeps[2].file"]
    last = str(err.value).splitlines()[-1]
    assert last.startswith("hint: 2 files are missing; --skip-missing (skip_missing=True in Python)")
    assert {p.field for p in validate_capture(capture_copy)} == {"cameras[0].frames[1].image",
                                                                 "lidars[0].sweeps[2].file"}


def test_skip_missing_leaves_them_out_with_one_warning(capture_copy):
    full = load_capture(capture_copy)
    image_rel, sweep_rel = _drop(capture_copy)
    with pytest.warns(MissingFilesWarning) as record:
        cap = load_capture(capture_copy, skip_missing=True)
    (warning,) = record
    assert str(warning.message) == (f"--skip-missing: left out 1 frame and 1 sweep whose file is missing "
                                    f"({image_rel}, {sweep_rel})")
    first = next(iter(cap.cameras))
    assert len(cap.cameras[first].frames) == len(full.cameras[first].frames) - 1
    assert capture_copy / image_rel not in [f.image_path for f in cap.cameras[first].frames]
    lidar = next(iter(cap.lidars))
    assert len(cap.lidars[lidar].sweeps) == len(full.lidars[lidar].sweeps) - 1
    with pytest.warns(MissingFilesWarning):
        assert validate_capture(capture_copy, skip_missing=True) == []  # the rest decodes cleanly


def test_other_problems_are_not_skipped(capture_copy):
    manifest = json.loads((capture_copy / "capture.json").read_text())
    manifest["cameras"][0]["frames"][0]["image"] = "../outside.png"  # outside: a problem, never "missing"
    mask_owner = manifest["cameras"][0]["frames"][1]
    mask_owner["mask"] = "masks/none.png"  # a missing mask is a problem too (the frame has its image)
    (capture_copy / "capture.json").write_text(json.dumps(manifest))
    with pytest.raises(CaptureError) as err:
        load_capture(capture_copy, skip_missing=True)
    assert [p.field for p in err.value.problems] == ["cameras[0].frames[0].image", "cameras[0].frames[1].mask"]
    assert err.value.hint is None  # nothing --skip-missing would leave out


def test_messages_count_frames_and_sweeps():
    missing = MissingFiles(skip=True)
    assert missing.message() is None and missing.hint() is None
    for name in ("a.png", "b.png", "c.png", "d.png"):
        assert missing.drop(name)
    assert missing.drop("s.nrl", "sweep")
    assert missing.message() == "--skip-missing: left out 4 frames and 1 sweep whose file is missing " \
                                "(a.png, b.png, c.png, ...)"
    strict = MissingFiles(skip=False)
    assert not strict.drop("a.png") and strict.hint().startswith("hint: 1 file is missing; --skip-missing")
