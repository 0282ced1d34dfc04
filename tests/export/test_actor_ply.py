"""Per-actor PLYs (``export_usd(ply_actors=True)``): each actor's Gaussians in its box frame,
read by ``plyfile``, and its track file, whose poses are the ones USD evaluates for the actor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("pxr")

from test_usd_export import rig, scene  # noqa: E402,F401 (fixtures)

from pxr import Usd, UsdGeom  # noqa: E402

from nurec_usd.export.actor_ply import TRACK_COLUMNS, TRACK_FORMAT  # noqa: E402
from nurec_usd.export.ply import read_gaussian_ply  # noqa: E402
from nurec_usd.export.usd_layers import export_usd  # noqa: E402

NAMES = ["car_00", "car_01"]  # the prim names of the tracks "car_00" and "car/01"


@pytest.fixture(scope="module")
def exported(scene, tmp_path_factory):
    return export_usd(scene, tmp_path_factory.mktemp("actors") / "scene", ply=True, ply_actors=True, ply_pad_sh=True)


def test_files_beside_the_actor_layers(exported):
    files = sorted(p.name for p in (exported / "actors").iterdir())
    assert files == sorted([f"{n}{ext}" for n in NAMES for ext in (".usdc", ".ply", ".track.json")])
    assert (exported / "scene.ply").is_file()


def test_actor_plys_hold_each_actors_gaussians_in_its_box_frame(exported, scene):
    plyfile = pytest.importorskip("plyfile")
    for i, name in enumerate(NAMES):
        rows = torch.nonzero(scene.actor_index == i).flatten()
        ply = plyfile.PlyData.read(str(exported / "actors" / f"{name}.ply"))
        v = ply["vertex"]
        assert v.count == len(rows)
        assert len([p for p in v.properties if p.name.startswith("f_rest_")]) == 45  # padded: ply_pad_sh
        means = np.stack([v["x"], v["y"], v["z"]], axis=1)
        np.testing.assert_array_equal(means, scene.actors.means[rows].numpy())  # as stored: the box frame
        np.testing.assert_array_equal(v["opacity"], scene.actors.opacity_logits[rows].numpy())
        params, degree = read_gaussian_ply(exported / "actors" / f"{name}.ply")
        assert degree == 3
        np.testing.assert_array_equal(params.shN[:, :3].numpy(), scene.actors.shN[rows, :3].numpy())  # degree 1 used
        assert not params.shN[:, 3:].any()


def test_track_files_are_the_poses_usd_gives_the_actors(exported, scene, rig):
    stage = Usd.Stage.Open(str(exported / "root.usda"), Usd.Stage.LoadNone)
    tcps = stage.GetTimeCodesPerSecond()
    for track, name in zip(scene.tracks, NAMES):
        record = json.loads((exported / "actors" / f"{name}.track.json").read_text())
        assert record["format"] == TRACK_FORMAT and record["version"] == 1
        assert record["track_id"] == track.id and record["label"] == track.label
        assert record["size_m"] == pytest.approx(track.size_m) and record["ply"] == f"{name}.ply"
        assert record["absolute_time_offset_us"] == rig["start_us"]
        assert record["columns"] == TRACK_COLUMNS == ["t_s", "tx", "ty", "tz", "qw", "qx", "qy", "qz"]
        poses = np.array(record["poses"])
        np.testing.assert_array_equal(poses[:, 0], track.times.numpy())
        xf = UsdGeom.Xformable(stage.GetPrimAtPath(f"/World/Actors/{name}"))
        for t, tx, ty, tz, qw, qx, qy, qz in poses:
            M = np.array(xf.ComputeLocalToWorldTransform(Usd.TimeCode(t * tcps))).T  # column vectors
            np.testing.assert_allclose(M[:3, 3], [tx, ty, tz], atol=1e-9)
            w, x, y, z = qw, qx, qy, qz
            R = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                          [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                          [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
            np.testing.assert_allclose(M[:3, :3], R, atol=1e-9)
            assert (qw * qw + qx * qx + qy * qy + qz * qz) == pytest.approx(1.0, abs=1e-12)


def test_the_usd_export_is_the_same_with_and_without_plys(exported, scene, tmp_path):
    plain = export_usd(scene, tmp_path / "plain")
    for name in ("root.usda", "rig.usdc", "actors.usdc", "background.usdc", "actors/car_00.usdc"):
        assert (plain / name).read_bytes() == (exported / name).read_bytes(), name
