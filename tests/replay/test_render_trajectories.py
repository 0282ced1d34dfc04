"""``render`` along novel trajectories and with edited actors: the trajectory files (CSV and JSON) and
their errors, the frames, depth PNGs, lidar sweeps and videos written, and the actor options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from actor_box import returns_in_box
from conftest import QUICK

pytest.importorskip("pxr")

from nurec_usd.replay.trajectory import COLUMNS, TrajectoryError, read_trajectory, write_trajectory_csv  # noqa: E402

K = QUICK["downscale"]
HEADER = ",".join(COLUMNS)


def _quat(R: np.ndarray) -> np.ndarray:  # [3, 3] -> (w, x, y, z)
    from nurec_usd.export.usd_layers import matrix_to_quat

    return matrix_to_quat(R[None])[0]


def csv_file(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# Trajectory files (no scene needed)


def test_csv_and_json_layouts_read_the_same(tmp_path):
    rows = ["0.0,1,2,3,1,0,0,0", "0.5,2,2,3,0.7071068,0,0,0.7071068"]
    a = read_trajectory(csv_file(tmp_path / "a.csv", ["# a comment", *rows, ""]))
    poses = [dict(zip(COLUMNS, map(float, r.split(",")))) for r in rows]
    (tmp_path / "b.json").write_text(json.dumps({"poses": poses}))
    b = read_trajectory(tmp_path / "b.json")
    np.testing.assert_array_equal(a.times_s, [0.0, 0.5])
    np.testing.assert_allclose(a.T_world, b.T_world, atol=0)
    np.testing.assert_allclose(a.T_world[1, :3, :3], [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-6)
    np.testing.assert_allclose(a.T_world[1, :3, 3], [2, 2, 3])
    # columns in any order; a CSV written by write_trajectory_csv reads back
    c = read_trajectory(csv_file(tmp_path / "c.csv", ["1,2,3,1,0,0,0,0.0"], "tx,ty,tz,qw,qx,qy,qz,t_s"))
    np.testing.assert_allclose(c.T_world[0], a.T_world[0])
    write_trajectory_csv(tmp_path / "d.csv", a.times_s, a.T_world)
    d = read_trajectory(tmp_path / "d.csv")
    np.testing.assert_allclose(d.T_world, a.T_world, atol=1e-7)


@pytest.mark.parametrize("rows, header, message", [
    (["0.0,0,0,0,1,0,0,0", "0.1,nan,0,0,1,0,0,0"], HEADER, r"row 2 \(line 3\): tx: must be finite, got nan"),
    (["0.0,0,0,0,1,0,0,0", "0.1,0,0,0,1.2,0,0,0"], HEADER,
     r"row 2 \(line 3\): qw,qx,qy,qz: the quaternion has length 1\.2, not 1"),
    (["0.0,0,0,0,1,0,0,0", "0.1,0,0,0,0,0,0,0"], HEADER, r"row 2 \(line 3\): qw,qx,qy,qz: the quaternion has length 0"),
    (["0.0,0,0,0,1,0,0,0", "7.5,0,0,0,1,0,0,0"], HEADER,
     r"row 2 \(line 3\): t_s: 7\.5 s is outside the scene's span \[0, 1\] s"),
    (["0.0,0,0,0,1,0,0"], "t_s,tx,ty,tz,qw,qx,qy", r"line 1: header: missing column qz"),
    (["0.2,0,0,0,1,0,0,0", "0.1,0,0,0,1,0,0,0"], HEADER, r"row 2 \(line 3\): t_s: 0\.1 s does not come after"),
    (["0.0,0,0,0,1,0,0,0,9"], HEADER + ",speed", r"line 1: header: unknown column 'speed'"),
    (["0.0,0,0,zero,1,0,0,0"], HEADER, r"row 1 \(line 2\): tz: not a number \('zero'\)"),
    (["0.0,0,0,0,1,0,0"], HEADER, r"row 1 \(line 2\): 7 values, expected 8"),
])
def test_bad_csv_files_are_named_with_row_and_field(tmp_path, rows, header, message):
    path = csv_file(tmp_path / "path.csv", rows, header)
    with pytest.raises(TrajectoryError, match=rf"path\.csv: {message}"):
        read_trajectory(path, span_s=(0.0, 1.0))


@pytest.mark.parametrize("data, message", [
    ({"poses": [{"t_s": 0.0, "tx": 0, "ty": 0, "tz": 0, "qw": 1, "qx": 0, "qy": 0}]}, r"poses\[0\]\.qz: missing"),
    ({"poses": [{c: 0.0 for c in COLUMNS} | {"qw": "1"}]}, r"poses\[0\]\.qw: expected a number, got \"1\""),
    ({"poses": [{c: 0.0 for c in COLUMNS} | {"qw": 1.0, "t_s": -2.0}]}, r"poses\[0\]\.t_s: -2 s is outside"),
    ([{c: 0.0 for c in COLUMNS}], r"poses: expected an object with a list \"poses\""),
])
def test_bad_json_files_are_named_with_pose_and_field(tmp_path, data, message):
    path = tmp_path / "path.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TrajectoryError, match=rf"path\.json: {message}"):
        read_trajectory(path, span_s=(0.0, 1.0))


def test_files_that_are_not_trajectories(tmp_path):
    with pytest.raises(TrajectoryError, match="no such file"):
        read_trajectory(tmp_path / "none.csv")
    (tmp_path / "x.txt").write_text("t_s")
    with pytest.raises(TrajectoryError, match=r"x\.txt: unknown layout '\.txt'"):
        read_trajectory(tmp_path / "x.txt")
    (tmp_path / "e.csv").write_text("# nothing\n")
    with pytest.raises(TrajectoryError, match=r"e\.csv: empty"):
        read_trajectory(tmp_path / "e.csv")
    (tmp_path / "h.csv").write_text(HEADER + "\n")
    with pytest.raises(TrajectoryError, match=r"h\.csv: no poses"):
        read_trajectory(tmp_path / "h.csv")
    (tmp_path / "j.json").write_text("{")
    with pytest.raises(TrajectoryError, match=r"j\.json: not valid JSON"):
        read_trajectory(tmp_path / "j.json")


# ---------------------------------------------------------------------------------------------
# The render command


@pytest.fixture(scope="module")
def renderer(usd_only):
    from nurec_usd.replay.renderer import Renderer

    return Renderer(usd_only)


def render(*args) -> int:
    from nurec_usd.cli import main

    return main(["render", *map(str, args), "--device", "cpu", "--no-progress"])


def recorded_csv(renderer, path: Path, times, lateral: float = 0.0) -> Path:
    from nurec_usd.replay.renderer import rig_offset_transform

    T = renderer.rig_pose(times, rig_offset=rig_offset_transform(lateral_m=lateral)).numpy()
    return write_trajectory_csv(path, np.asarray(times), T)


def test_trajectory_frames_depth_and_sweeps(usd_only, renderer, tmp_path, capsys):
    """--trajectory: per pose a frame and a 16-bit depth PNG of each camera and a sweep of each lidar,
    and trajectory.csv with the poses rendered; the frames are the Renderer's at those poses."""
    from PIL import Image
    from plyfile import PlyData

    from nurec_usd.util.pictures import to_uint8

    times = [0.2, 0.45, 0.7]
    traj = recorded_csv(renderer, tmp_path / "path.csv", times, lateral=1.0)
    out = tmp_path / "frames"
    assert render(usd_only, "--trajectory", traj, "--sensor", "front,rear_fisheye", "--sensor", "top",
                  "--downscale", K, "-o", out) == 0
    assert "front, rear_fisheye, top: 3 times from 0.200 s to 0.700 s" in capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    want = ["trajectory.csv"]
    for i in range(3):
        want += [f"front_{i:05d}.png", f"front_{i:05d}_depth.png", f"rear_fisheye_{i:05d}.png",
                 f"rear_fisheye_{i:05d}_depth.png", f"top_{i:05d}.ply", f"top_{i:05d}_range.png"]
    assert names == sorted(want)
    written = read_trajectory(out / "trajectory.csv")
    source = read_trajectory(traj)
    np.testing.assert_allclose(written.T_world, source.T_world, atol=1e-6)
    rig = renderer.path(source.times_s, source.T_world)
    r = renderer.render([times[1]], cameras=["front"], lidars=["top"], rig=rig, depth=True, downscale=K)
    np.testing.assert_array_equal(np.asarray(Image.open(out / "front_00001.png")), to_uint8(r.cameras["front"].rgb[0]))
    depth = Image.open(out / "front_00001_depth.png")
    assert depth.mode in ("I;16", "I") and depth.size == (160, 90)
    mm = np.asarray(depth).astype(np.float64)
    f = r.cameras["front"]
    solid = (f.alpha[0] >= 0.5).numpy() & (mm > 0)
    assert solid.mean() > 0.5
    np.testing.assert_allclose(mm[solid] / 1000.0, f.depth[0].numpy()[solid], atol=6e-4)
    assert (mm[(f.alpha[0] < 0.5).numpy()] == 0).all()
    v = PlyData.read(str(out / "top_00001.ply"))["vertex"].data
    s = r.lidars["top"]
    assert len(v) == int(((s.hit_prob[0] > 0.5) & (s.range[0] > 0)).sum()) > 1000
    # the same trajectory in JSON renders the same frames
    poses = [dict(zip(COLUMNS, map(float, line.split(",")))) for line in traj.read_text().splitlines()[1:]]
    (tmp_path / "path.json").write_text(json.dumps({"poses": poses}))
    out2 = tmp_path / "frames_json"
    assert render(usd_only, "--trajectory", tmp_path / "path.json", "--sensor", "front", "--no-depth",
                  "--downscale", K, "-o", out2) == 0
    assert sorted(p.name for p in out2.iterdir()) == ["front_00000.png", "front_00001.png", "front_00002.png",
                                                       "trajectory.csv"]
    np.testing.assert_array_equal(np.asarray(Image.open(out2 / "front_00001.png")),
                                  np.asarray(Image.open(out / "front_00001.png")))


def test_offsets_on_the_recorded_path_and_a_video(usd_only, renderer, tmp_path):
    """--lateral-offset on a recorded sequence renders what a trajectory of the shifted poses renders;
    a .mp4 holds one camera's frames."""
    from PIL import Image

    out = tmp_path / "shifted"
    assert render(usd_only, "--start", 0.2, "--end", 0.4, "--fps", 10, "--lateral-offset", 1.0, "--sensor",
                  "front", "--downscale", K, "-o", out) == 0
    traj = recorded_csv(renderer, tmp_path / "path.csv", [0.2, 0.3, 0.4], lateral=1.0)
    np.testing.assert_allclose(read_trajectory(out / "trajectory.csv").T_world, read_trajectory(traj).T_world,
                               atol=1e-6)
    out2 = tmp_path / "from_file"
    assert render(usd_only, "--trajectory", traj, "--sensor", "front", "--downscale", K, "-o", out2) == 0
    a, b = (np.asarray(Image.open(o / "front_00002.png")).astype(int) for o in (out, out2))
    assert np.abs(a - b).max() <= 1  # the same poses: interpolated from the file's keys, or offset exactly
    plain = tmp_path / "plain.png"
    assert render(usd_only, "--time", 0.4, "--sensor", "front", "--downscale", K, "-o", plain) == 0
    assert np.abs(np.asarray(Image.open(plain)).astype(int) - a).mean() > 5  # the offset moved the view

    cv2 = pytest.importorskip("cv2")
    video = tmp_path / "drive.mp4"
    assert render(usd_only, "--trajectory", traj, "--sensor", "front", "--downscale", K, "-o", video) == 0
    cap = cv2.VideoCapture(str(video))
    frames = 0
    while cap.read()[0]:
        frames += 1
    assert frames == 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("rows, header, where", [
    (["0.2,0,0,0,1,0,0,0", "0.3,0,0,nan,1,0,0,0"], HEADER, r"row 2 \(line 3\): tz: must be finite"),
    (["0.2,0,0,0,1,0,0,0", "0.3,0,0,0,0.5,0.5,0,0"], HEADER, r"row 2 \(line 3\): qw,qx,qy,qz: the quaternion has"),
    (["0.2,0,0,0,1,0,0,0", "3.0,0,0,0,1,0,0,0"], HEADER, r"row 2 \(line 3\): t_s: 3 s is outside the scene's span"),
    (["0.2,0,0,1,0,0,0"], "t_s,tx,ty,qw,qx,qy,qz", r"line 1: header: missing column tz"),
])
def test_a_bad_trajectory_file_is_refused_naming_file_row_and_field(usd_only, tmp_path, capsys, rows, header, where):
    path = csv_file(tmp_path / "bad.csv", rows, header)
    out = tmp_path / "out"
    assert render(usd_only, "--trajectory", path, "--sensor", "front", "-o", out) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"render: {path}: ") and len(err.strip().splitlines()) == 1
    assert pytest.importorskip("re").search(where, err), err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


def test_actor_options(usd_only, renderer, tmp_path, capsys):
    """--remove-actor, --shift-actor, --duplicate-actor and --actor-track change the sweep where the
    actor is; bad values are usage errors (2), unknown actors input errors (1)."""
    from plyfile import PlyData

    t = 0.1
    T_box = renderer.replay.world_pose("/World/Actors/car_00", t).numpy()
    size = list(renderer.replay.stage.GetPrimAtPath("/World/Actors/car_00").GetCustomDataByKey("nurec:sizeM"))
    T_lidar = renderer.replay.world_pose(renderer.lidars["top"].path, t).numpy()

    def near(ply: Path, offset=(0.0, 0.0, 0.0)) -> int:  # returns inside car_00's box at t, moved by offset
        v = PlyData.read(str(ply))["vertex"].data
        xyz = np.stack([v["x"], v["y"], v["z"]], -1).astype(np.float64) @ T_lidar[:3, :3].T + T_lidar[:3, 3]
        T = T_box.copy()
        T[:3, 3] += offset
        return returns_in_box(xyz, T, size)

    def sweep(name: str, *options) -> Path:
        out = tmp_path / f"{name}.ply"
        assert render(usd_only, "--time", t, "--sensor", "top", "-o", out, *options) == 0
        return out

    base = sweep("base", "--remove-actor", "car_01")
    assert near(base) > 20
    assert near(sweep("removed", "--remove-actor", "car_00")) < 3
    shifted = sweep("shifted", "--shift-actor", "car_00=0,3,0")
    assert near(shifted, (0, 3, 0)) > 20 and near(shifted) < 3
    copied = sweep("copied", "--duplicate-actor", "car_00=0,4,0")
    assert "copies car_00_copy1" in capsys.readouterr().out
    assert near(copied) > 20 and near(copied, (0, 4, 0)) > 20
    track = tmp_path / "parked.csv"
    q = ",".join(f"{v:.9f}" for v in _quat(T_box[:3, :3]))
    p = T_box[:3, 3] + [0, 4, 0]
    csv_file(track, [f"{time},{p[0]},{p[1]},{p[2]},{q}" for time in (0.0, 1.0)])
    assert near(sweep("parked", "--actor-track", f"car_01={track}"), (0, 4, 0)) > 20
    assert (tmp_path / "parked_range.png").is_file()

    capsys.readouterr()
    assert render(usd_only, "--time", t, "--sensor", "top", "-o", tmp_path / "x.ply", "--remove-actor", "bus") == 1
    assert "no actor 'bus'; the scene has car_00, car_01" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        render(usd_only, "--time", t, "--sensor", "top", "-o", tmp_path / "x.ply", "--shift-actor", "car_00=0,2")
    assert exc.value.code == 2
    assert "argument --shift-actor: expected ID=X,Y,Z with three finite numbers" in capsys.readouterr().err
    assert not (tmp_path / "x.ply").exists()


def test_outputs_that_do_not_fit_the_request(usd_only, tmp_path, capsys):
    assert render(usd_only, "--time", 0.2, "--sensor", "front,top", "-o", tmp_path / "x.png") == 1
    assert "a .png file holds one camera at one time" in capsys.readouterr().err
    assert render(usd_only, "--start", 0.2, "--end", 0.3, "--sensor", "front,top", "-o", tmp_path / "x.mp4") == 1
    assert "a video shows one sensor; 2 were asked for" in capsys.readouterr().err
    assert render(usd_only, "--time", 0.2, "--sensor", "all", "--downscale", 4, "-o", tmp_path / "all") == 0
    names = {p.name for p in (tmp_path / "all").iterdir()}
    assert {"front_00000.png", "right_ftheta_00000_depth.png", "top_00000.ply", "trajectory.csv"} <= names
    assert render(usd_only, "--time", 0.2, "--sensor", "all", "--downscale", 4, "-o", tmp_path / "all") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all"]
