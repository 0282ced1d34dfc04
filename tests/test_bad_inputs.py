"""Bad inputs and faults against the command line, table-driven.

For every case: the exit code (1: bad input or a failed write, 2: a usage error, 130 / 143:
Ctrl-C / SIGTERM), a message naming the file or the option, no traceback, and nothing left in
the output folder (neither the output nor a hidden staging folder beside it). Most cases run
in this process through ``nurec_usd.cli.main`` (an exception escaping it is a traceback); the
ones about exit codes and signals run as real processes. The fuzzed cases (capture.json and
importer files) come from a seeded generator, so every run checks the same few hundred inputs.
"""

from __future__ import annotations

import copy
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from nurec_usd.cli import main

# --------------------------------------------------------------------------------------------
# Helpers


def cli(capsys, *argv) -> tuple[int, str]:
    """Run the command line in this process; (exit code, stderr). argparse's usage errors exit
    through SystemExit, as from a shell; any other exception escaping is a traceback (a failure)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exit_:
        rc = exit_.code
    captured = capsys.readouterr()
    return rc, captured.err


def leftovers(out: Path) -> list[Path]:
    """The output and any hidden staging folder or temporary file of it beside it."""
    out = Path(out)
    if not out.parent.is_dir():
        return []
    return sorted(p for p in out.parent.iterdir() if p.name == out.name or p.name.startswith(f".{out.name}."))


def assert_refused(rc: int, err: str, code: int, words: list[str], out: Path | None = None) -> None:
    assert rc == code, f"exit {rc}, expected {code}:\n{err}"
    assert "Traceback" not in err, err
    for w in words:
        assert w in err, f"{w!r} not in:\n{err}"
    if out is not None:
        assert leftovers(out) == [], f"left behind: {leftovers(out)}"


def edit_manifest(root: Path, edit) -> None:
    path = root / "capture.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))


def linked_copy(src: Path, dst: Path) -> Path:
    """A copy of a capture whose data files are hard links (cheap); the manifest is a real copy."""
    shutil.copytree(src, dst, copy_function=os.link)
    manifest = dst / "capture.json"
    text = manifest.read_text()
    manifest.unlink()
    manifest.write_text(text)
    return dst


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` without touching the file it may be a hard link of."""
    path.unlink()
    path.write_bytes(data)


def sweep_file(root: Path, index: int = 0) -> Path:
    return root / json.loads((root / "capture.json").read_text())["lidars"][0]["sweeps"][index]["file"]


def image_file(root: Path, cam: int = 0, frame: int = 0) -> Path:
    return root / json.loads((root / "capture.json").read_text())["cameras"][cam]["frames"][frame]["image"]


def rewrite_sweep(root: Path, index: int, change) -> None:
    """Rewrite an .nrl sweep with ``change(points, intensity, times, channel)`` applied (in place)."""
    from nurec_usd.capture.sweep_io import read_nrl, write_nrl

    path = sweep_file(root, index)
    base = json.loads((root / "capture.json").read_text())["lidars"][0]["sweeps"][index]["timestamp_us"]
    s = read_nrl(path)
    pts, inten, times, ch = s.points.copy(), s.intensity.copy(), s.timestamps_us.copy(), s.channel.copy()
    change(pts, inten, times, ch)
    path.unlink()
    write_nrl(path, base, pts, inten, times, ch)


def sweep_as_ply(root: Path, index: int = 0) -> Path:
    """Sweep ``index`` rewritten as a binary PLY (x y z intensity time_offset_us channel); the manifest points to it."""
    from nurec_usd.capture.sweep_io import read_nrl

    nrl = sweep_file(root, index)
    m = json.loads((root / "capture.json").read_text())
    base = m["lidars"][0]["sweeps"][index]["timestamp_us"]
    s = read_nrl(nrl)
    fields = [("x", "<f4", "float"), ("y", "<f4", "float"), ("z", "<f4", "float"),
              ("intensity", "<f4", "float"), ("time_offset_us", "<i4", "int"), ("channel", "<i4", "int")]
    table = np.zeros(len(s), dtype=[(name, dtype) for name, dtype, _ in fields])
    table["x"], table["y"], table["z"] = s.points.T
    table["intensity"], table["time_offset_us"], table["channel"] = s.intensity, s.timestamps_us - base, s.channel
    header = (f"ply\nformat binary_little_endian 1.0\nelement vertex {len(s)}\n"
              + "".join(f"property {kind} {name}\n" for name, _, kind in fields) + "end_header\n")
    ply = nrl.with_suffix(".ply")
    ply.write_bytes(header.encode("ascii") + table.tobytes())
    edit_manifest(root, lambda mm: mm["lidars"][0]["sweeps"][index].__setitem__("file", str(ply.relative_to(root))))
    return ply


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def small_run(handmade_capture, tmp_path_factory) -> Path:
    """A two-step build of the hand-made capture (a run folder with usd/). Do not modify it."""
    from nurec_usd import build

    out = tmp_path_factory.mktemp("hardening") / "run"
    result = build(handmade_capture, out, steps=2, progress=False, log=lambda _m: None)
    assert result.status == "completed", result.message
    return out


@pytest.fixture
def fresh(tmp_path) -> Path:
    """A folder for this case's outputs."""
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture
def cap(handmade_capture, tmp_path) -> Path:
    """A private (hard-linked) copy of the hand-made capture that a case may break."""
    return linked_copy(handmade_capture, tmp_path / "capture")


# --------------------------------------------------------------------------------------------
# Option values: a usage error (exit 2) naming the option and its range, before any work

BUILD_OPTIONS = [
    ("max_gaussians_0", ["--max-gaussians", "0"], ["--max-gaussians", "an integer from 1 to"]),
    ("steps_negative", ["--steps", "-5"], ["--steps", "an integer >= 1", "-5"]),
    ("steps_huge_text", ["--steps", "1e999"], ["--steps", "an integer >= 1"]),
    ("steps_not_a_number", ["--steps", "many"], ["--steps", "'many'"]),
    ("voxel_0", ["--voxel", "0"], ["--voxel", "a number from 0.001 to 100"]),
    ("eval_every_negative", ["--eval-every", "-3"], ["--eval-every", "0 or an integer >= 2"]),
    ("eval_every_1", ["--eval-every", "1"], ["--eval-every", "0 or an integer >= 2"]),
    ("budget_negative", ["--budget-s", "-5"], ["--budget-s", "a number > 0"]),
    ("budget_infinite", ["--budget-s", "inf"], ["--budget-s", "a number > 0"]),
    ("budget_nan", ["--budget-s", "nan"], ["--budget-s", "a number > 0"]),
    ("downscale_1000", ["--downscale", "1000"], ["--downscale", "an integer from 1 to 64"]),
    ("downscale_0", ["--downscale", "0"], ["--downscale", "an integer from 1 to 64"]),
    ("seed_negative", ["--seed", "-1"], ["--seed", "an integer from 0 to 4294967295"]),
    ("device_banana", ["--device", "banana"], ["--device", "auto, cpu, cuda or cuda:N", "'banana'"]),
    ("device_cuda_x", ["--device", "cuda:x"], ["--device", "'cuda:x'"]),
    ("set_range_weight_negative", ["--set", "lidar_range_weight=-1"],
     ["--set lidar_range_weight=-1", "a number from 0 to 1000"]),
    ("set_range_weight_1e999", ["--set", "lidar_range_weight=1e999"], ["--set lidar_range_weight=inf", "a number"]),
    ("set_nan_text", ["--set", "lr_means=nan"], ["--set lr_means='nan'", "a number from 0 to 10"]),
    ("set_opacity_1", ["--set", "opacity=1.0"], ["--set opacity=1.0", "a number > 0 and < 1"]),
    ("set_sh_degree_4", ["--set", "sh_degree=4"], ["--set sh_degree=4", "an integer from 0 to 3"]),
    ("set_lidar_every_negative", ["--set", "lidar_every=-1"], ["--set lidar_every=-1", "an integer >= 0"]),
    ("set_max_points_0", ["--set", "max_points=0"], ["--set max_points=0", "an integer from 1 to"]),
    ("set_grow_factor_shrinks", ["--set", "grow_factor=0.5"], ["--set grow_factor=0.5", "a number from 1 to 10"]),
    ("set_refine_every_fraction_0", ["--set", "refine_every_fraction=0"],
     ["--set refine_every_fraction=0", "a number > 0 and <= 1"]),
    ("set_lr_batch_scale", ["--set", "lr_batch_scale=cubic"], ["--set lr_batch_scale='cubic'", "one of 'none', 'sqrt', 'linear'"]),
    ("set_refine_stop_over_1", ["--set", "refine_stop_fraction=1.5"], ["--set refine_stop_fraction=1.5"]),
    ("set_bool_as_int", ["--set", "refine_tracks=1"], ["--set refine_tracks=1", "True or False"]),
    ("set_int_as_float", ["--set", "log_interval=2.5"], ["--set log_interval=2.5", "an integer >= 1"]),
    ("set_downscale_0", ["--set", "downscale=0"], ["--set downscale=0", "an integer from 1 to 64"]),
    ("set_unknown", ["--set", "lidar_range_weigth=1"], ["did you mean 'lidar_range_weight'"]),
    ("set_ego_mask_maybe", ["--set", "ego_mask=maybe"], ["--set ego_mask='maybe'", "one of 'auto', 'on', 'off'"]),
    ("set_ego_box_five", ["--set", "ego_box=1,2,3,4,5"], ["--set ego_box='1,2,3,4,5'", "six numbers"]),
    ("set_ego_box_inverted", ["--set", "ego_box=1,0,0,0,1,1"], ["--set ego_box='1,0,0,0,1,1'", "x0 < x1"]),
    ("set_frame_appearance_curves", ["--set", "frame_appearance=curves"],
     ["--set frame_appearance='curves'", "one of 'off', 'gain_bias', 'affine'"]),
    ("set_lr_frame_appearance_negative", ["--set", "lr_frame_appearance=-1"],
     ["--set lr_frame_appearance=-1", "a number from 0 to 10"]),
    ("set_frame_appearance_reg_huge", ["--set", "frame_appearance_reg=1e6"],
     ["--set frame_appearance_reg=1000000.0", "a number from 0 to 1000"]),
    ("set_ego_mask_dir_number", ["--set", "ego_mask_dir=3"], ["--set ego_mask_dir=3", "a folder path"]),
]


@pytest.mark.parametrize("flags, words", [c[1:] for c in BUILD_OPTIONS], ids=[c[0] for c in BUILD_OPTIONS])
def test_build_refuses_an_option_value_outside_its_range(handmade_capture, fresh, capsys, flags, words):
    out = fresh / "run"
    started = time.monotonic()
    rc, err = cli(capsys, "build", handmade_capture, "-o", out, "--no-progress", *flags)
    assert_refused(rc, err, 2, words, out)
    assert time.monotonic() - started < 30  # refused, not run (a hang would time out the suite instead)


def test_build_refuses_a_downscale_too_large_for_a_camera(handmade_capture, fresh, capsys):
    """In its range, but too large for the capture's 160x96 cameras: named with the camera."""
    out = fresh / "run"
    rc, err = cli(capsys, "build", handmade_capture, "-o", out, "--no-progress", "--downscale", "10")
    assert_refused(rc, err, 2, ["--downscale 10", "camera 'front' (160x96 pixels)", "at most 6"], out)
    rc, err = cli(capsys, "build", handmade_capture, "-o", out, "--no-progress", "--set", "downscale=7")
    assert_refused(rc, err, 2, ["--set downscale=7", "camera 'front'"], out)


OTHER_OPTIONS = [
    ("validate_workers_0", ["validate", "{cap}", "--workers", "0"], ["--workers", "an integer from 1 to 256"]),
    ("synth_seed_negative", ["synth", "--preset", "tiny", "--out", "{out}", "--seed", "-1"], ["--seed"]),
    ("synth_device_banana", ["synth", "--preset", "tiny", "--out", "{out}", "--device", "banana"], ["--device"]),
    ("export_device_banana", ["export", "{run}", "-o", "{out}", "--device", "banana"], ["--device", "'banana'"]),
    ("render_fps_0", ["render", "{run}", "--sensor", "front", "--start", "0", "--end", "0.2", "--fps", "0", "-o",
                      "{out}"], ["--fps", "a number > 0 and <= 1000"]),
    ("render_fps_negative", ["render", "{run}", "--sensor", "front", "--start", "0", "--end", "0.2", "--fps", "-1",
                             "-o", "{out}"], ["--fps"]),
    ("render_frame_negative", ["render", "{run}", "--sensor", "front", "--frame", "-1", "-o", "{out}.png"],
     ["--frame", "an integer >= 0"]),
    ("render_time_nan", ["render", "{run}", "--sensor", "front", "--time", "nan", "-o", "{out}.png"],
     ["--time", "a finite number"]),
    ("render_time_infinite", ["render", "{run}", "--sensor", "front", "--time", "inf", "-o", "{out}.png"],
     ["--time", "a finite number"]),
    ("render_downscale_0", ["render", "{run}", "--sensor", "front", "--time", "0.1", "--downscale", "0", "-o",
                            "{out}.png"], ["--downscale", "an integer from 1 to 64"]),
    ("render_downscale_too_large", ["render", "{run}", "--sensor", "front", "--time", "0.1", "--downscale", "10",
                                    "-o", "{out}.png"], ["--downscale 10", "camera 'front'"]),
    ("render_end_before_start", ["render", "{run}", "--sensor", "front", "--start", "0.3", "--end", "0.1", "-o",
                                 "{out}"], ["--end 0.1 is before --start 0.3"]),
    ("render_device_banana", ["render", "{run}", "--sensor", "front", "--time", "0.1", "--device", "banana", "-o",
                              "{out}.png"], ["--device"]),
]


@pytest.mark.parametrize("argv, words", [c[1:] for c in OTHER_OPTIONS], ids=[c[0] for c in OTHER_OPTIONS])
def test_other_commands_refuse_option_values_outside_their_range(handmade_capture, small_run, fresh, capsys,
                                                                 argv, words):
    out = fresh / "result"
    args = [a.format(cap=handmade_capture, run=small_run, out=out) for a in argv]
    rc, err = cli(capsys, *args)
    assert_refused(rc, err, 2, words, out)
    assert leftovers(Path(f"{out}.png")) == []


def test_every_option_declares_a_range():
    """A new build option must say which values it takes (``nurec_usd.util.options.option``): the CLI's
    ``--set`` and ``nurec_usd.build`` refuse values outside it before any work."""
    import dataclasses

    from nurec_usd.util.options import declared_range
    from nurec_usd.scene.init import InitConfig
    from nurec_usd.train.config import BuildConfig, TrainConfig

    missing = [f"{cls.__name__}.{f.name}" for cls in (TrainConfig, InitConfig)
               for f in dataclasses.fields(cls) if declared_range(cls, f.name) is None]
    missing += [f"BuildConfig.{name}" for name in ("budget_s",) if declared_range(BuildConfig, name) is None]
    assert not missing, f"options without a declared range (declare one with nurec_usd.util.options.option): {missing}"
    for cls in (TrainConfig, InitConfig):  # and each default lies in its own range
        for f in dataclasses.fields(cls):
            declared_range(cls, f.name).check(f.name, f.default)


def test_every_numeric_flag_declares_a_range():
    """No command-line flag takes a bare int or float: each checks a declared range while parsing."""
    import argparse

    from nurec_usd.cli import build_parser

    bare = []
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():  # noqa: SLF001 - argparse has no public walk
        for action in sub._actions:  # noqa: SLF001
            if isinstance(action, argparse._StoreAction) and action.type in (int, float) and not action.choices:
                bare.append(f"{sub.prog} {action.option_strings}")
    assert not bare, f"numeric flags without a declared range (use nurec_usd.util.options.flag_type): {bare}"


def test_the_api_refuses_the_same_values_by_name(handmade_capture, fresh):
    from nurec_usd import build
    from nurec_usd.util.options import OptionError

    for kw, words in ((dict(max_gaussians=0), "max_gaussians"), (dict(steps=-5), "steps"),
                      (dict(budget_s=-5.0), "budget_s"), (dict(device="banana"), "device"),
                      (dict(lidar_range_weight=float("inf")), "lidar_range_weight")):
        with pytest.raises(OptionError, match=words):
            build(handmade_capture, fresh / "run", progress=False, log=lambda _m: None, **kw)
        assert leftovers(fresh / "run") == []


def test_downsampling_to_a_cap_ends(tmp_path):
    """The loop that hung on a cap of 0: refused below 1; a cap of 1 ends (one voxel keeps one
    point); non-finite points that can never merge end with an error instead of a hang."""
    import torch

    from nurec_usd.scene.init import _downsample_to

    pts = torch.rand(1000, 3, dtype=torch.float64) * 50
    with pytest.raises(ValueError, match="positive cap"):
        _downsample_to(pts, 0.1, 0)
    (kept,), voxel = _downsample_to(pts, 0.1, 1)
    assert kept.shape[0] == 1 and voxel > 50
    bad = torch.cat([pts, torch.full((3, 3), float("nan"), dtype=torch.float64)])
    bad[-1] = torch.tensor([float("inf"), 0.0, 0.0])
    with pytest.raises(ValueError, match="non-finite"):
        _downsample_to(bad, 0.1, 1)


# --------------------------------------------------------------------------------------------
# Captures: validate and build catch the same things, naming the file and the field


def ply_truncated(root: Path) -> None:
    ply = sweep_as_ply(root)
    data = ply.read_bytes()
    replace_file(ply, data[: len(data) - 1000])


def ply_declares_a_million_points(root: Path) -> None:
    ply = sweep_as_ply(root)
    data = ply.read_bytes()
    head, body = data.split(b"end_header\n", 1)
    import re

    head = re.sub(rb"element vertex \d+", b"element vertex 1000000", head)
    replace_file(ply, head + b"end_header\n" + body[:2000])


def ply_random_bytes(root: Path) -> None:
    ply = sweep_as_ply(root)
    replace_file(ply, np.random.default_rng(1).bytes(4096))


def ply_ascii_short(root: Path) -> None:
    ply = sweep_file(root).with_suffix(".ply")
    ply.write_text("ply\nformat ascii 1.0\nelement vertex 1000\nproperty float x\nproperty float y\n"
                   "property float z\nend_header\n1 2 3\n4 5 6\n")
    edit_manifest(root, lambda m: m["lidars"][0]["sweeps"][0].__setitem__("file", str(ply.relative_to(root))))


def lidar_columns_1e12(root: Path) -> None:
    edit_manifest(root, lambda m: m["lidars"][0].__setitem__("columns", 10 ** 12))


def lidar_table_too_large(root: Path) -> None:  # each in range, together too many rays for memory
    edit_manifest(root, lambda m: m["lidars"][0].__setitem__("columns", 4_000_000))


def principal_point_1e9(root: Path) -> None:
    edit_manifest(root, lambda m: m["cameras"][0]["intrinsics"].__setitem__("cx", 1e9))


def focal_length_tiny(root: Path) -> None:
    edit_manifest(root, lambda m: m["cameras"][1]["intrinsics"].__setitem__("fy", 1e-6))


def channel_999(root: Path) -> None:
    rewrite_sweep(root, 0, lambda p, i, t, c: c.__setitem__(0, 999))


def point_times_outside_the_rig(root: Path) -> None:
    rewrite_sweep(root, 1, lambda p, i, t, c: t.__setitem__(slice(0, 5), t[0] + 30_000_000))


def nan_intensity(root: Path) -> None:
    rewrite_sweep(root, 2, lambda p, i, t, c: i.__setitem__(3, np.nan))


def truncated_png(root: Path) -> None:
    img = image_file(root, cam=2, frame=3)
    data = img.read_bytes()
    replace_file(img, data[: len(data) // 2])


def image_not_an_image(root: Path) -> None:
    replace_file(image_file(root, cam=1, frame=1), b"\x89PNG\r\n\x1a\n" + bytes(200))


# (break the capture, words of the message (file, field), caught by validate --quick too)
CAPTURE_FAULTS = [
    (ply_truncated, ["1700000000000000.ply", "header.element vertex", "truncated"], True),
    (ply_declares_a_million_points, ["1700000000000000.ply", "1,000,000 points"], True),
    (ply_random_bytes, ["1700000000000000.ply", "not a PLY file"], True),
    (ply_ascii_short, ["1700000000000000.ply", "1,000 points", "2 rows"], False),
    (lidar_columns_1e12, ["lidars[0].columns", "1000000000000 is greater than the maximum of 4194304"], True),
    (lidar_table_too_large, ["lidars[0].columns", "rays per sweep"], True),
    (principal_point_1e9, ["cameras[0].intrinsics.cx", "principal point"], True),
    (focal_length_tiny, ["cameras[1].intrinsics.fy", "focal length"], True),
    (channel_999, ["1700000000000000.nrl", "channel", "999"], False),
    (point_times_outside_the_rig, ["1700000000100000.nrl", "time_offset_us", "outside the rig poses' range"], False),
    (nan_intensity, ["1700000000200000.nrl", "intensity", "non-finite"], False),
    (truncated_png, ["left_fisheye/1700000000300000.png"], False),
    (image_not_an_image, ["front_wide/1700000000100000.png"], True),
]


@pytest.mark.parametrize("breaker, words, quick", CAPTURE_FAULTS, ids=[c[0].__name__ for c in CAPTURE_FAULTS])
def test_validate_and_build_refuse_the_same_captures(cap, fresh, capsys, breaker, words, quick):
    breaker(cap)
    rc, err = cli(capsys, "validate", cap)
    assert_refused(rc, err, 1, words)
    rc, err = cli(capsys, "validate", "--quick", cap)
    if quick:
        assert_refused(rc, err, 1, words)
    else:
        assert rc == 0 and "Traceback" not in err, err
    out = fresh / "run"
    started = time.monotonic()
    rc, err = cli(capsys, "build", cap, "-o", out, "--no-progress", "--steps", "3")
    assert_refused(rc, err, 1, words, out)
    assert "initial scene" not in err  # refused while loading, before any work on it
    assert time.monotonic() - started < 60


def test_a_16_bit_png_decodes_to_its_own_grey_levels(cap, capsys):
    """A 16-bit grey PNG is read by its top 8 bits (PIL's own conversion made it all white)."""
    from nurec_usd.capture import load_capture

    img = image_file(cap, cam=0, frame=2)
    grey8 = np.asarray(Image.open(img).convert("L"))
    grey16 = grey8.astype(np.uint16) * 257 + 3  # the full 16-bit range, low bits set
    img.unlink()
    Image.fromarray(grey16).save(img)
    assert Image.open(img).mode.startswith("I;16")
    rc, err = cli(capsys, "validate", cap)
    assert rc == 0, err
    rgb = load_capture(cap).cameras["front"].frames[2].load_image()
    assert rgb.dtype == np.uint8 and rgb.shape == (*grey8.shape, 3)
    assert np.array_equal(rgb[..., 0], grey8) and np.array_equal(rgb[..., 2], grey8)


def test_nan_points_are_dropped_with_one_note_and_the_same_count_in_validate_and_build(cap, fresh, capsys):
    """Lidars write NaN for rays without a return: dropped, said once with the count, by both."""
    from nurec_usd import build

    rewrite_sweep(cap, 1, lambda p, i, t, c: p.__setitem__(slice(0, 7), np.nan))
    rewrite_sweep(cap, 3, lambda p, i, t, c: p.__setitem__(slice(10, 15), np.inf))
    rc, err = cli(capsys, "validate", cap)
    assert rc == 0, err
    assert err.count("non-finite") == 1 and "12 points with non-finite coordinates" in err and "2 sweeps" in err
    said = []
    result = build(cap, fresh / "run", steps=1, progress=False, log=said.append)
    assert result.status == "completed"
    notes = [m for m in said if "non-finite" in m]
    assert len(notes) == 1 and "12 lidar points" in notes[0] and "2 sweeps" in notes[0], said


# --------------------------------------------------------------------------------------------
# Imported formats: validate decodes the images as build does


def _pinhole_frames(capture_dir: Path):
    """The hand-made capture's pinhole camera: (camera, [(image path, T_world_camera)])."""
    import torch

    from nurec_usd.capture import load_capture

    native = load_capture(capture_dir)
    cam = native.cameras["front"]
    rig = native.rig_trajectory()
    frames = []
    for f in cam.frames:
        T = rig.at(torch.tensor([float(native.seconds(f.timestamp_us))], dtype=torch.float64))[0].numpy()
        frames.append((f.image_path, T @ cam.T_rig_camera))
    return cam, frames


def write_nerfstudio(capture_dir: Path, root: Path) -> Path:
    """A nerfstudio transforms.json of the hand-made pinhole camera, with JPEG images."""
    cam, frames = _pinhole_frames(capture_dir)
    (root / "images").mkdir(parents=True)
    i = cam.intrinsics
    meta = {"w": cam.width, "h": cam.height, "fl_x": i["fx"], "fl_y": i["fy"], "cx": i["cx"] + 0.5,
            "cy": i["cy"] + 0.5, "camera_model": "OPENCV", "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0, "frames": []}
    for k, (image, T) in enumerate(frames):
        name = f"images/frame_{k:05d}.jpg"
        Image.open(image).convert("RGB").save(root / name, quality=95)
        meta["frames"].append({"file_path": name, "transform_matrix": (T @ np.diag([1.0, -1, -1, 1])).tolist()})
    (root / "transforms.json").write_text(json.dumps(meta, indent=1))
    return root


def write_colmap_text(capture_dir: Path, root: Path) -> Path:
    """A COLMAP text model (sparse/0) of the hand-made pinhole camera, with PNG images."""
    import torch

    from nurec_usd.sensors.se3 import matrix_to_quat

    cam, frames = _pinhole_frames(capture_dir)
    (root / "images").mkdir(parents=True)
    model = root / "sparse" / "0"
    model.mkdir(parents=True)
    i = cam.intrinsics
    (model / "cameras.txt").write_text(f"# cameras\n1 PINHOLE {cam.width} {cam.height} {i['fx']} {i['fy']} "
                                       f"{i['cx'] + 0.5} {i['cy'] + 0.5}\n")
    lines = ["# images"]
    for k, (image, T) in enumerate(frames):
        name = f"frame_{k:05d}.png"
        shutil.copyfile(image, root / "images" / name)
        T_cw = np.linalg.inv(T)
        w, x, y, z = matrix_to_quat(torch.from_numpy(T_cw[:3, :3])).tolist()
        tx, ty, tz = T_cw[:3, 3]
        lines += [f"{k + 1} {w} {x} {y} {z} {tx} {ty} {tz} 1 {name}", ""]
    (model / "images.txt").write_text("\n".join(lines) + "\n")
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(50, 3)) * 5 + [10.0, 0.0, 1.0]
    (model / "points3D.txt").write_text("# points\n" + "".join(
        f"{n + 1} {p[0]} {p[1]} {p[2]} 128 128 128 0.5\n" for n, p in enumerate(pts)))
    return root


def test_validate_decodes_an_imported_formats_images(handmade_capture, tmp_path, fresh, capsys):
    """A JPEG truncated to part of its size passed validate and stopped build; now validate finds it
    (--quick checks what the importer reads: the header still opens)."""
    ns = write_nerfstudio(handmade_capture, tmp_path / "ns")
    rc, err = cli(capsys, "validate", ns)
    assert rc == 0, err
    jpeg = ns / "images" / "frame_00003.jpg"
    data = jpeg.read_bytes()
    jpeg.write_bytes(data[: len(data) * 2 // 3])
    rc, err = cli(capsys, "validate", ns)
    assert_refused(rc, err, 1, ["frame_00003.jpg", "truncated"])
    rc, err = cli(capsys, "validate", "--quick", ns)
    assert rc == 0, err
    rc, err = cli(capsys, "build", ns, "-o", fresh / "run", "--no-progress", "--steps", "2")
    assert_refused(rc, err, 1, ["frame_00003.jpg"], fresh / "run")


# --------------------------------------------------------------------------------------------
# Outputs: a file where a folder should be, missing parents, a read-only folder, a full disk


def test_an_output_under_a_file_is_named(handmade_capture, small_run, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for argv in (["build", handmade_capture, "-o", afile / "run", "--no-progress", "--steps", "2"],
                 ["build", handmade_capture, "-o", afile / "run", "--no-progress", "--steps", "2", "--overwrite"],
                 ["export", small_run, "-o", afile / "usd"],
                 ["render", small_run, "--sensor", "front", "--time", "0.1", "-o", afile / "x" / "f.png"]):
        rc, err = cli(capsys, *argv)
        assert_refused(rc, err, 1, [f"{afile}: is a file, not a folder"])
        assert "--overwrite" not in err
    assert afile.read_text() == "not a folder"


def test_render_creates_missing_parent_folders(small_run, tmp_path, capsys):
    out = tmp_path / "a" / "b" / "c.png"
    rc, err = cli(capsys, "render", small_run, "--sensor", "front", "--time", "0.1", "-o", out)
    assert rc == 0, err
    assert Image.open(out).size == (160, 96)
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.png"]


def test_render_of_a_stage_with_a_truncated_layer_fails(small_run, tmp_path, capsys):
    stage = tmp_path / "usd"
    shutil.copytree(small_run / "usd", stage)
    background = stage / "background.usdc"
    data = background.read_bytes()
    background.write_bytes(data[: len(data) // 2])
    out = tmp_path / "front.png"
    rc, err = cli(capsys, "render", stage, "--sensor", "front", "--time", "0.1", "-o", out)
    assert_refused(rc, err, 1, [str(background), "cannot be opened", "truncated"], out)


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: a read-only one for an ordinary user; for
    root (whom file modes do not stop), a folder of sysfs, where the kernel refuses new files."""
    if os.geteuid() != 0:
        folder = tmp_path / "readonly"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    probe = Path("/sys/kernel")
    try:
        (probe / "nurec_usd_probe").mkdir()
    except OSError:
        return probe
    (probe / "nurec_usd_probe").rmdir()
    pytest.skip("no folder here refuses writes to this process")


@pytest.mark.parametrize("command", ["build", "export", "render", "render_sequence"])
def test_an_unwritable_output_is_one_line(handmade_capture, small_run, tmp_path, capsys, command):
    folder = _unwritable_folder(tmp_path)
    try:
        out = folder / "result"
        argv = {"build": ["build", handmade_capture, "-o", out, "--no-progress", "--steps", "2"],
                "export": ["export", small_run, "-o", out],
                "render": ["render", small_run, "--sensor", "front", "--time", "0.1", "-o", f"{out}.png"],
                "render_sequence": ["render", small_run, "--sensor", "front", "--start", "0", "--end", "0.2",
                                    "-o", out]}[command]
        rc, err = cli(capsys, *argv)
        lines = [line for line in err.splitlines() if line.startswith(f"{command.split('_')[0]}: ")]
        assert_refused(rc, err, 1, [str(folder)])
        assert len(lines) == 1 and ("permission" in lines[0].lower() or "not permitted" in lines[0]
                                    or "read-only" in lines[0]), err
        assert not out.exists() and not Path(f"{out}.png").exists()
    finally:
        if folder.is_relative_to(tmp_path):
            folder.chmod(0o755)


class _FileSizeLimit:
    """The kernel's limit on the size of a file this process writes (RLIMIT_FSIZE), lowered for a
    block: writes past it fail with EFBIG, as on a full disk (Python ignores SIGXFSZ). Only the
    soft limit moves, so it can be put back."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        self.previous = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, self.previous[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, self.previous)


def test_a_full_disk_during_build_is_one_line_naming_the_file(handmade_capture, small_run, fresh, capsys):
    out = fresh / "run"
    with _FileSizeLimit(1_000_000):  # scene.pt is about 5 MB
        rc, err = cli(capsys, "build", handmade_capture, "-o", out, "--no-progress", "--steps", "2")
    assert_refused(rc, err, 1, [f"{out}/scene.pt", "File too large", "write the output to another disk"], out)
    assert "unexpected pos" not in err
    assert len([line for line in err.splitlines() if line.startswith("build: ")]) == 1


def test_a_full_disk_during_export_is_one_line_naming_the_file(small_run, fresh, capsys):
    out = fresh / "usd"
    with _FileSizeLimit(300_000):  # background.usdc is about 1.6 MB
        rc, err = cli(capsys, "export", small_run, "-o", out)
    assert_refused(rc, err, 1, [f"{out}/background.usdc", "File too large"], out)
    assert len([line for line in err.splitlines() if line.startswith("export: ")]) == 1


def test_display_names_and_messages_of_file_errors():
    import errno

    from nurec_usd.util.io_errors import describe_os_error, display_path

    assert display_path("/a/.run.123-0123456789ab.partial/usd/root.usda") == "/a/run/usd/root.usda"
    assert display_path("/x/.c.png.tmp") == "/x/c.png" and display_path("/x/.drive.tmp.mp4") == "/x/drive.mp4"
    full = describe_os_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/.run.9-aaaaaaaaaaaa.partial/x"))
    assert full.startswith("/r/run/x: the disk is full (No space left on device); free some space")
    assert "read-only" in describe_os_error(OSError(errno.EROFS, os.strerror(errno.EROFS), "/m/x"))
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device"), output="runs/x").startswith(
        "while writing runs/x: the disk is full")


# --------------------------------------------------------------------------------------------
# Staging folders of killed runs


def _dead_pid() -> int:
    """The id of a process that has ended (and was reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_an_atomic_file_replaces_whole_or_not_at_all(tmp_path):
    from nurec_usd.util.staging import atomic_file

    path = tmp_path / "metrics.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as tmp:
            assert tmp.parent == tmp_path and tmp.name == ".metrics.json.tmp"
            tmp.write_text("half")
            raise RuntimeError("the writer failed")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
    with atomic_file(path, keep_suffix=True) as tmp:
        assert tmp.name == ".metrics.tmp.json"
        tmp.write_text("new")
        assert path.read_text() == "old"  # in place only once the block ends
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_stale_partials_are_removed_only_when_their_writer_is_gone(tmp_path):
    from nurec_usd.util.staging import OWNER_FILE, StagedDirectory

    out = tmp_path / "run"
    host = socket.gethostname()

    def partial(pid: int, owner_host: str | None = host, suffix: str = ".partial") -> Path:
        p = tmp_path / f".run.{pid}-{os.urandom(6).hex()}{suffix}"
        p.mkdir()
        (p / "scene.pt").write_bytes(b"x" * 100)
        if owner_host is not None:
            (p / OWNER_FILE).write_text(json.dumps({"pid": pid, "host": owner_host}))
        return p

    dead = _dead_pid()
    stale = partial(dead)
    ownerless = partial(dead, owner_host=None)  # killed between mkdir and the owner file
    live = partial(os.getppid())  # a process that is running
    elsewhere = partial(dead, owner_host=host + "-other")  # another host's writer on a shared disk
    old_without_out = partial(dead, suffix=".partial.old")  # a commit cut short: the previous run, kept
    unrelated = tmp_path / f".runs.{dead}-{os.urandom(6).hex()}.partial"  # another output's
    unrelated.mkdir()
    staged = StagedDirectory(out)
    assert sorted(staged.removed_stale) == sorted([stale, ownerless])
    assert live.is_dir() and elsewhere.is_dir() and old_without_out.is_dir() and unrelated.is_dir()
    staged.abort()


def test_a_killed_build_leaves_a_partial_that_the_next_run_removes(handmade_capture, tmp_path):
    """kill -9 during a real build leaves its staging folder; the next run of the same output removes it."""
    from nurec_usd.util.staging import StagedDirectory

    out = tmp_path / "run"
    proc = _start("build", handmade_capture, "-o", out, "--no-progress", "--steps", "500")
    stderr = _Stderr(proc)
    stderr.wait_for("loaded handmade")
    proc.kill()
    stderr.finish()
    left = [p for p in leftovers(out) if p.name.endswith(".partial")]
    assert len(left) == 1 and f".run.{proc.pid}-" in left[0].name
    staged = StagedDirectory(out)
    assert staged.removed_stale == left and not left[0].exists()
    staged.abort()
    assert leftovers(out) == []


# --------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM, through real processes


class _Stderr:
    """A process's stderr, read line by line in a thread."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self._seen = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # in chunks: a progress bar rewrites its line without ending it
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            with self._seen:
                self.lines.append(chunk.decode(errors="replace"))
                self._seen.notify_all()
        with self._seen:
            self.lines.append(None)  # the end
            self._seen.notify_all()

    def wait_for(self, words: str, timeout: float = 120.0) -> None:
        """Until the output holds ``words`` (AssertionError if the process ends first or time runs out)."""
        def found():
            return None in self.lines or words in self.text()

        with self._seen:
            assert self._seen.wait_for(found, timeout) and words in self.text(), self.text()

    def finish(self, timeout: float = 180.0) -> str:
        """Wait for the process to end; all of its stderr."""
        self.proc.wait(timeout=timeout)
        self._thread.join(timeout=30)
        return self.text()

    def text(self) -> str:
        return "".join(line for line in self.lines if line is not None)


def _start(*argv, capture_stdout: bool = False, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nurec_usd", *map(str, argv)], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL, cwd=REPO,
                            env=None if env is None else {**os.environ, **env})


def test_sigterm_during_training_keeps_the_last_finished_step(handmade_capture, tmp_path):
    out = tmp_path / "run"
    proc = _start("build", handmade_capture, "-o", out, "--no-progress", "--steps", "5000", "--set",
                  "checkpoint_interval=100000", capture_stdout=True)
    stderr = _Stderr(proc)
    stderr.wait_for("initial scene")
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    stdout = proc.stdout.read().decode()
    err = stderr.finish()
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "status       interrupted" in stdout
    assert "build: training was stopped by SIGTERM" in err
    manifest = json.loads((out / "manifest.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert manifest["status"] == "interrupted"
    # the state kept is the in-memory one at the last finished step (no checkpoint was ever taken)
    assert f"kept the state of step {metrics['steps']}" in manifest["message"]
    assert [p.name for p in leftovers(out)] == ["run"]


def test_an_interrupt_in_training_keeps_every_finished_step(handmade_capture):
    """Ctrl-C arriving after step 3 (raised where the loop reports its progress) keeps the state
    of step 3, not the last checkpoint (none here after step 0): the scene has moved from its start."""
    import torch

    from nurec_usd.capture.importers import load_any
    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.data import CaptureData
    from nurec_usd.train.trainer import Trainer

    config = make_config("fast", steps=50, log_interval=1, checkpoint_interval=1000, downscale=2)
    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu", downscale=2)
    scene = initial_scene(cap, data, config.init)
    start = scene.static.means.detach().clone()

    class StopAfter3:  # what a Ctrl-C at that moment does: KeyboardInterrupt in the training loop
        n = 0

        def update(self, k):
            self.n += k
            if self.n >= 3:
                raise KeyboardInterrupt

        def set_postfix(self, **_kw):
            pass

    result = Trainer(scene, data, config.train).run(progress=StopAfter3())
    assert result.status == "interrupted" and result.steps == 3, result.message
    assert result.message == "interrupted after step 3; kept the state of step 3"
    assert not torch.equal(scene.static.means.detach(), start)
    assert bool(torch.isfinite(scene.static.means).all())


def test_ctrl_c_during_initialisation_leaves_nothing(handmade_capture, tmp_path):
    # a camera-only copy starting from many random points: its initialisation takes a while
    cap = linked_copy(handmade_capture, tmp_path / "capture")
    edit_manifest(cap, lambda m: m.__setitem__("lidars", []))
    out = tmp_path / "run"
    proc = _start("build", cap, "-o", out, "--no-progress", "--steps", "5", "--set", "random_points=3000000")
    stderr = _Stderr(proc)
    stderr.wait_for("loaded handmade")
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = stderr.finish()
    assert "initial scene" not in err, "the interrupt came too late to test the initialisation"
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"build: stopped by Ctrl-C (SIGINT); nothing was written to {out}"
    assert leftovers(out) == []


def test_ctrl_c_during_export_leaves_nothing(small_run, tmp_path):
    out = tmp_path / "usd"
    # the mesh takes a while; a progress line after its first view (not only every 10 s) times the signal
    proc = _start("export", small_run, "-o", out, "--collision", "--device", "cpu",
                  env={"NUREC_USD_PROGRESS_INTERVAL_S": "0"})
    stderr = _Stderr(proc)
    stderr.wait_for("collision mesh: 1/")
    proc.send_signal(signal.SIGINT)
    err = stderr.finish()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"export: stopped by Ctrl-C (SIGINT); nothing was written to {out}")
    assert leftovers(out) == []


def test_ctrl_c_after_the_output_was_moved_into_place_says_so(small_run, tmp_path, monkeypatch, capsys):
    import nurec_usd.cli as cli

    def written_then_interrupted(args):
        Path(args.out).mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_export", written_then_interrupted)
    out = tmp_path / "usd"
    assert cli.main(["export", str(small_run), "-o", str(out)]) == 130
    assert capsys.readouterr().err.strip() == f"export: stopped by Ctrl-C (SIGINT); {out} had already been written"


def test_a_usage_error_exits_2_from_a_real_process(handmade_capture, tmp_path):
    r = subprocess.run([sys.executable, "-m", "nurec_usd", "build", str(handmade_capture), "-o",
                        str(tmp_path / "run"), "--max-gaussians", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "argument --max-gaussians: must be an integer from 1" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------
# Fuzzed inputs from a seeded generator: every outcome is a clean 0 or a 1 naming a file

_WEIRD = [None, "", "x", -1, 0, 1, 2.5, -1e308, 1e308, 10 ** 30, True, [], {}, [[1, 2], [3]], "../outside.png",
          "/etc/passwd", float("nan"), float("inf"), "ñ" * 300, {"a": 1}, [0] * 17]


def _paths(doc, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    for p in path[:-1]:
        doc = doc[p]
    if value is _DELETE:
        doc.pop(path[-1])
    else:
        doc[path[-1]] = value


_DELETE = object()


def mutate_json(doc, rng: random.Random, count: int):
    """``doc`` with ``count`` random mutations: a value replaced by an odd one, a key or item
    deleted, a list emptied or grown, a number scaled or negated."""
    doc = copy.deepcopy(doc)
    for _ in range(count):
        paths = [p for p, _ in _paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        current = parent[path[-1]]
        kind = rng.random()
        if kind < 0.35:
            _set(doc, path, copy.deepcopy(rng.choice(_WEIRD)))
        elif kind < 0.55:
            _set(doc, path, _DELETE)
        elif kind < 0.7 and isinstance(current, list):
            _set(doc, path, [] if rng.random() < 0.5 else current + copy.deepcopy(current[:1]) * rng.randint(1, 3))
        elif isinstance(current, (int, float)) and not isinstance(current, bool):
            _set(doc, path, rng.choice([-current, current * 1e6, current + 1, current - 1, 0, current * 1e-9]))
        elif isinstance(current, str):
            _set(doc, path, rng.choice([current + "x", current[: len(current) // 2], current.upper(), ""]))
        else:
            _set(doc, path, copy.deepcopy(rng.choice(_WEIRD)))
    return doc


def _as_text(doc, rng: random.Random) -> str:
    text = json.dumps(doc)
    if rng.random() < 0.08:  # not JSON at all: cut short or with bytes thrown in
        cut = rng.randint(0, len(text))
        text = text[:cut] + (rng.choice(["", "}", "\x00\x01", "{{{"]))
    return text


def _check_clean_outcome(rc: int, err: str, root: Path) -> None:
    assert rc in (0, 1), f"exit {rc}:\n{err}"
    assert "Traceback" not in err
    if rc == 1:
        # names a file of the capture (or the capture itself, for a manifest that is not one)
        assert str(root) in err or "capture.json" in err or "transforms.json" in err or ".txt" in err, err


FUZZ_MANIFESTS = 300


def test_fuzzed_manifests(handmade_capture, tmp_path, capsys):
    """Seeded mutations of a valid capture.json: validate and inspect agree; a capture they refuse,
    build refuses too (exit 1, nothing left); none of them is a traceback."""
    rng = random.Random(40)
    original = json.loads((handmade_capture / "capture.json").read_text())
    root = linked_copy(handmade_capture, tmp_path / "capture")
    outcomes = {0: 0, 1: 0}
    out = tmp_path / "run"
    for case in range(FUZZ_MANIFESTS):
        doc = mutate_json(original, rng, rng.choice([1, 1, 2, 3]))
        (root / "capture.json").write_text(_as_text(doc, rng))
        quick = case % 4 != 0  # every fourth case decodes every image and sweep
        rc, err = cli(capsys, "validate", *(["--quick"] if quick else []), root)
        _check_clean_outcome(rc, err, root)
        rc_inspect, err_inspect = cli(capsys, "inspect", root)
        _check_clean_outcome(rc_inspect, err_inspect, root)
        if quick:
            assert rc_inspect == rc, f"case {case}: validate --quick {rc}, inspect {rc_inspect}:\n{err}{err_inspect}"
        if rc == 1:  # build refuses it too, leaving nothing
            rc_build, err_build = cli(capsys, "build", root, "-o", out, "--no-progress", "--steps", "1")
            assert rc_build == 1, f"case {case}: validate refused, build gave {rc_build}:\n{err}\n{err_build}"
            assert "Traceback" not in err_build and leftovers(out) == []
        outcomes[rc] += 1
    assert outcomes[1] > FUZZ_MANIFESTS // 2  # the generator does break things


def _mutate_text_lines(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        words = lines[i].split()
        kind = rng.random()
        if kind < 0.3 and words:
            words[rng.randrange(len(words))] = rng.choice(["nan", "inf", "-1", "x", "1e999", "0", "99999999999",
                                                           "../../outside.png", "/etc/passwd"])
            lines[i] = " ".join(words)
        elif kind < 0.5 and words:
            lines[i] = " ".join(words[: rng.randrange(len(words))])
        elif kind < 0.65:
            lines.insert(i, lines[i])
        elif kind < 0.8:
            del lines[i]
        else:
            lines[i] = lines[i] + " " + " ".join(rng.choice(["1", "a", "0.5"]) for _ in range(rng.randint(1, 4)))
    return "\n".join(lines) + ("\n" if rng.random() < 0.8 else "")


FUZZ_IMPORTS = 200


def test_fuzzed_importer_files(handmade_capture, tmp_path, capsys):
    """Seeded mutations of a nerfstudio transforms.json and of a COLMAP text model (and of its
    images): each validates cleanly or is refused with a message naming a file; never a traceback."""
    rng = random.Random(46)
    ns = write_nerfstudio(handmade_capture, tmp_path / "ns")
    colmap = write_colmap_text(handmade_capture, tmp_path / "colmap")
    for root in (ns, colmap):
        rc, err = cli(capsys, "validate", root)
        assert rc == 0, err
    ns_doc = json.loads((ns / "transforms.json").read_text())
    model = colmap / "sparse" / "0"
    texts = {name: (model / name).read_text() for name in ("cameras.txt", "images.txt", "points3D.txt")}
    image_bytes = {p: p.read_bytes() for p in (colmap / "images").iterdir()}
    refused = 0
    for case in range(FUZZ_IMPORTS):
        if case % 2 == 0:
            (ns / "transforms.json").write_text(_as_text(mutate_json(ns_doc, rng, rng.choice([1, 2])), rng))
            root = ns
        else:
            for name, text in texts.items():
                (model / name).write_text(text)
            for p, data in image_bytes.items():
                p.write_bytes(data)
            if rng.random() < 0.15:  # an image cut short or overwritten
                p = rng.choice(sorted(image_bytes))
                data = image_bytes[p]
                p.write_bytes(data[: rng.randint(0, len(data) - 1)] if rng.random() < 0.5 else rng.randbytes(200))
            else:
                name = rng.choice(sorted(texts))
                (model / name).write_text(_mutate_text_lines(texts[name], rng))
            root = colmap
        rc, err = cli(capsys, "validate", *(["--quick"] if case % 3 else []), root)
        _check_clean_outcome(rc, err, root)
        refused += rc == 1
    assert refused > FUZZ_IMPORTS // 4
