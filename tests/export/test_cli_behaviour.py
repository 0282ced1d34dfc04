"""The command line as users of other tools expect it: one message for an existing output, one
line (not a traceback) for a file that is not a stage, progress lines when output is a pipe,
and no Warp "CUDA driver" warning on a machine without a GPU.

Every command runs in a subprocess with stdout and stderr on pipes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("pxr")

from test_usd_export import exported, rig, scene  # noqa: E402,F401 (fixtures)

from nurec_usd.ops.warp_init import NO_DRIVER_WARNING, cuda_driver_present  # noqa: E402
from nurec_usd.util.progress import INTERVAL_ENV  # noqa: E402

NO_DRIVER = not cuda_driver_present()


def run(*args, env=None):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=full)


def assert_no_driver_warning(r) -> None:
    if NO_DRIVER:
        assert NO_DRIVER_WARNING not in r.stderr and "CUDA driver" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def run_dir(scene, tmp_path_factory):
    """A run folder holding only the synthetic scene's scene.pt (what export reads)."""
    out = tmp_path_factory.mktemp("run") / "run"
    out.mkdir()
    scene.save(out / "scene.pt")
    return out


# ---------------------------------------------------------------------------------------------
# The existing-output message


def _exists_line(command: str, out) -> str:
    return f"{command}: {out} exists; pass --overwrite to replace it"


def test_existing_output_message_is_the_same_on_every_command(exported, run_dir, handmade_capture, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    png = tmp_path / "front.png"
    png.write_bytes(b"")
    cases = {
        "build": ("build", handmade_capture, "-o", taken, "--device", "cpu"),
        "export": ("export", run_dir, "-o", taken),
        "render": ("render", exported, "--sensor", "front", "--time", "0", "-o", png, "--device", "cpu"),
        "render sequence": ("render", exported, "--sensor", "front", "--start", "0", "--end", "0.1", "-o", taken,
                            "--device", "cpu"),
        "synth": ("synth", "--preset", "tiny", "--out", taken, "--device", "cpu"),
    }
    for case, args in cases.items():
        r = run(*args)
        out = png if case == "render" else taken
        assert r.returncode == 2, (case, r.stderr)
        assert r.stderr == _exists_line(args[0], out) + "\n", (case, r.stderr)
        assert r.stdout == "", (case, r.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.png", "taken"]  # nothing else written
    assert not any(taken.iterdir()) and png.read_bytes() == b""


# ---------------------------------------------------------------------------------------------
# render of something that is not a stage


@pytest.mark.parametrize("name, content, reason", [
    ("notes.txt", b"a text file\n", "not a USD file"),
    ("root.usda", b"#usda 1.0\ndef Xform \"World\" {{{ garbage\n", "not a USD stage USD can read"),
    ("scene.usdc", bytes(range(256)) * 16, "not a USD stage USD can read"),
    ("scene.usdz", b"PK\x03\x04" + bytes(200), "not a USD stage USD can read"),
])
def test_replay_of_a_file_that_is_not_a_stage_says_so_in_one_line(tmp_path, name, content, reason):
    from nurec_usd.replay.stage import Replay, ReplayError

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ReplayError) as err:
        Replay(path)
    assert str(err.value).startswith(f"{path}: {reason}") and "\n" not in str(err.value)


def test_render_of_a_folder_whose_root_is_garbage_is_one_line(tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "root.usda").write_bytes(bytes(range(256)) * 16)
    r = run("render", tmp_path / "export", "--sensor", "front", "--time", "0", "-o", tmp_path / "out.png")
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"render: {tmp_path / 'export' / 'root.usda'}: not a USD stage USD can read " \
                       "(is not a valid usda layer)\n"
    assert not (tmp_path / "out.png").exists()


# ---------------------------------------------------------------------------------------------
# Progress lines on a pipe; no CUDA-driver warning


def test_render_of_many_frames_prints_progress_lines_on_a_pipe(exported, tmp_path):
    args = ("render", exported, "--sensor", "front", "--start", "0", "--end", "0.3", "--fps", "10", "--downscale", "4",
            "--device", "cpu")
    r = run(*args, "-o", tmp_path / "frames", env={INTERVAL_ENV: "0"})
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("render front: ")]
    assert [re.match(r"render front: (\d)/4 frames", line).group(1) for line in lines] == ["1", "2", "3", "4"]
    assert re.fullmatch(r"render front: 4/4 frames \(100%\); [\d.]+ frames/s; \d+s in all", lines[-1]), lines[-1]
    assert "\r" not in r.stderr  # no bar drawn into the pipe
    assert_no_driver_warning(r)
    quiet = run(*args, "-o", tmp_path / "quiet", "--no-progress", env={INTERVAL_ENV: "0"})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert len(list((tmp_path / "quiet").iterdir())) == 4


@pytest.mark.skipif(not NO_DRIVER, reason="a CUDA driver is present here")
def test_no_cuda_driver_warning_from_warp_commands(exported, tmp_path):
    r = run("render", exported, "--sensor", "top", "--time", "0.2", "-o", tmp_path / "top.ply", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    code = ("from nurec_usd.ops.warp_init import init_warp; init_warp(); import warp as wp; "
            "print(wp.get_device('cpu'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "cpu" and r.stderr == "", r.stderr
