"""Replay from the USD alone: renders equal the in-memory scene's, the ``render`` command's files,
``.usdz`` packages, and the errors a user sees.

Uses the session's build of samples/tiny (``tiny_run``); its USD folder is copied away from the
run first, so that nothing but the USD can be read.
"""

from __future__ import annotations

import shutil
import zipfile

import numpy as np
import pytest
import torch
from conftest import QUICK, REPO, assert_gaussian_splats_valid, assert_openusd_valid

pytest.importorskip("pxr")

from nurec_usd.capture.loader import load_capture  # noqa: E402
from nurec_usd.render.scene_renderer import SceneRenderer  # noqa: E402
from nurec_usd.replay.stage import Replay, ReplayError  # noqa: E402
from nurec_usd.scene.gaussians import Scene  # noqa: E402
from nurec_usd.train.data import CaptureData  # noqa: E402
from nurec_usd.train.metrics import psnr  # noqa: E402

REPLAY_PSNR_DB = 50.0  # the bar between a USD replay and the in-memory render
K = QUICK["downscale"]


@pytest.fixture(scope="module")
def model(tiny_run):
    scene = Scene.load(tiny_run / "scene.pt")
    data = CaptureData(load_capture(REPO / "samples" / "tiny"), "cpu", downscale=K)
    return SceneRenderer(scene), data


@pytest.fixture(scope="module")
def replay(usd_only) -> Replay:
    return Replay(usd_only / "root.usda")


def test_replay_reads_the_rig(replay, model):
    _, data = model
    assert list(replay.cameras) == [c.id for c in data.cameras]
    assert list(replay.lidars) == [lid.id for lid in data.lidars]
    for cam in data.cameras:
        times = replay.cameras[cam.id].frame_times_s
        np.testing.assert_allclose(times, [f.time_s for f in data.frames if data.cameras[f.camera] is cam],
                                   atol=1e-9)
    assert replay.sensor("top") is replay.lidars["top"]


@torch.no_grad()
def test_camera_replay_equals_the_model(replay, model):
    """Every frame of every camera (global and rolling shutter, pinhole to f-theta, actors moving),
    each with the lens falloff the build learned."""
    renderer, data = model
    assert float(renderer.scene.vignetting.abs().max(1).values.min()) > 1e-3, "the build learned every camera's falloff"
    worst = {}
    for ref in data.frames:
        cam = data.cameras[ref.camera]
        want = renderer.camera(data.camera_view(ref)).image.clamp(0, 1)
        got = replay.render_camera(cam.id, ref.time_s, downscale=K).clamp(0, 1)
        assert got.shape == want.shape == (cam.height, cam.width, 3)
        assert float(want.std()) > 0.05  # a real picture, not a blank one
        worst[cam.id] = min(worst.get(cam.id, np.inf), float(psnr(got, want)))
    assert all(v >= REPLAY_PSNR_DB for v in worst.values()), worst


@torch.no_grad()
def test_lidar_replay_equals_the_model(replay, model):
    renderer, data = model
    for ref in data.sweeps:
        lid = data.lidars[ref.lidar]
        batch, t = data.lidar_batch(ref)
        want = renderer.lidar(batch, t)
        got = replay.render_lidar(lid.id, ref.time_s)
        assert float((want.hit_prob > 0.5).float().mean()) > 0.3  # the sweep sees the scene
        max_range = lid.template.max_range
        for name, scale in (("range", max_range), ("median_range", max_range), ("hit_prob", 1.0),
                            ("intensity", 1.0)):
            a, b = getattr(got, name) / scale, getattr(want, name) / scale
            assert float(psnr(a.clamp(0, 1), b.clamp(0, 1))) >= REPLAY_PSNR_DB, (ref.sweep, name)


@torch.no_grad()
def test_a_sweep_sees_actors_where_they_are_when_their_column_fires(model, replay):
    """The scene renderer gives render_lidar each Gaussian's motion over the sweep: the actors' move
    (from their tracks at the sweep's start and end), the background's is zero. The replay's motion
    (from USD's poses, positions only) is that of its full placements."""
    renderer, data = model
    scene = renderer.scene
    ref = data.sweeps[len(data.sweeps) // 2]
    batch, t = data.lidar_batch(ref)
    period = 1.0 / batch.scan_rate_hz
    motion = renderer.sweep_motion(t, period)
    n_static = len(scene.static)
    assert motion.shape == (n_static + len(scene.actors), 3)
    assert float(motion[:n_static].abs().max()) == 0.0
    want = renderer.place(t + period / 2).means - renderer.place(t - period / 2).means
    torch.testing.assert_close(motion, want)
    assert float(motion[n_static:].norm(dim=-1).max()) > 0.05, "the sample's actors move during a sweep"
    moving = renderer.lidar(batch, t)
    frozen = renderer.lidar(batch, t, motion=torch.zeros_like(motion))
    assert float((moving.range_sum - frozen.range_sum).abs().max()) > 0.01
    # the build option lidar_actor_motion=False: every actor at the sweep's middle
    middle = SceneRenderer(scene, actor_motion=False).lidar(batch, t)
    assert torch.equal(middle.range_sum, frozen.range_sum)
    t0 = ref.time_s
    got = replay.sweep_motion(t0, t0 + period)
    torch.testing.assert_close(got, replay.place(t0 + period).means - replay.place(t0).means, atol=0, rtol=0)
    assert float(got.norm(dim=-1).max()) > 0.05


def test_the_build_checked_its_own_export(tiny_run):
    import json

    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert metrics["usd_replay_camera_psnr"] >= REPLAY_PSNR_DB
    assert metrics["usd_replay_lidar_psnr"] >= REPLAY_PSNR_DB


def test_actors_are_placed_by_usd_and_hidden_outside_their_tracks(replay, tiny_run):
    scene = Scene.load(tiny_run / "scene.pt")
    n_static = len(scene.static)
    index = scene.actor_index
    spans = [(float(t.times[0]), float(t.times[-1])) for t in scene.tracks]
    assert spans[0][1] < 1.0 and spans[1][0] > 0.0  # the sample's car_00 leaves, car_01 arrives
    a, b = replay.place(0.4), replay.place(0.5)
    assert a.means.shape[0] == scene.num_gaussians
    torch.testing.assert_close(a.means[:n_static], b.means[:n_static])  # the background stays
    moved = (b.means[n_static:] - a.means[n_static:]).norm(dim=-1)
    assert float(moved.median()) > 0.1  # actors drive
    for t, track, visible in ((0.1, 1, False), (0.1, 0, True), (0.8, 0, False), (0.8, 1, True)):
        opac = replay.place(t).opacities[n_static:][index == track]
        assert bool((opac > 0).any()) == visible, (t, track)


def test_usdz_replays_the_same(usd_only, replay, tmp_path):
    from nurec_usd.export.usdz import package_usdz

    out = package_usdz(usd_only / "root.usda", tmp_path / "scene.usdz")
    names = zipfile.ZipFile(out).namelist()
    assert names[0] == "root.usda"
    assert {"rig.usdc", "actors.usdc", "background.usdc", "sky.png"} <= set(names)
    packed = Replay(out)
    torch.testing.assert_close(packed.render_camera("front", 0.4, K), replay.render_camera("front", 0.4, K))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.usdz"]


def test_usdz_past_the_zip_limit_is_refused_naming_the_largest_member(usd_only, tmp_path):
    from nurec_usd.export.usdz import UsdzTooLarge, package_usdz

    biggest = max((p for p in usd_only.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with pytest.raises(UsdzTooLarge, match=f"{biggest.name}.*ZIP64"):
        package_usdz(usd_only / "root.usda", tmp_path / "scene.usdz", limit_bytes=biggest.stat().st_size - 1)
    with pytest.raises(UsdzTooLarge, match="package would be about"):
        package_usdz(usd_only / "root.usda", tmp_path / "scene.usdz", limit_bytes=biggest.stat().st_size + 1)
    assert not list(tmp_path.iterdir()), "something was left behind"


# ---------------------------------------------------------------------------------------------
# The render command


def test_render_camera_png_is_the_replay_image(usd_only, replay, tmp_path, capsys):
    from PIL import Image

    from nurec_usd.cli import main
    from nurec_usd.util.pictures import to_uint8

    out = tmp_path / "front.png"
    assert main(["render", str(usd_only), "--sensor", "front", "--frame", "4", "--downscale", str(K),
                 "-o", str(out), "--device", "cpu"]) == 0
    want = to_uint8(replay.render_camera("front", float(replay.cameras["front"].frame_times_s[4]), K))
    np.testing.assert_array_equal(np.asarray(Image.open(out)), want)
    assert "front at 0.400000 s" in capsys.readouterr().out


def test_render_lidar_writes_its_returns_and_a_range_image(usd_only, replay, tmp_path):
    from plyfile import PlyData

    from nurec_usd.cli import main

    out = tmp_path / "sweep.ply"
    assert main(["render", str(usd_only), "--sensor", "top", "--time", "0.3", "-o", str(out), "--device", "cpu"]) == 0
    v = PlyData.read(str(out))["vertex"].data
    lid = replay.lidars["top"]
    r = replay.render_lidar("top", 0.3)
    hit = (r.hit_prob > 0.5) & (r.range > 0)
    assert len(v) == int(hit.sum()) > 1000
    xyz = np.stack([v["x"], v["y"], v["z"]], -1)
    np.testing.assert_allclose(np.linalg.norm(xyz, axis=-1), v["range"], rtol=1e-5)
    np.testing.assert_allclose(v["range"], r.range[hit].numpy(), rtol=1e-6)
    np.testing.assert_allclose(v["intensity"], (r.intensity[hit] * lid.intensity_scale).numpy(), rtol=1e-6)
    # the point of (channel, column) lies along that ray
    dirs = lid.model.ray_directions().numpy()[v["channel"], v["column"]]
    np.testing.assert_allclose(xyz, dirs * v["range"][:, None], atol=1e-4)
    from PIL import Image

    picture = np.asarray(Image.open(tmp_path / "sweep_range.png"))
    assert picture.shape == (lid.model.channels, lid.model.columns, 3)


def test_render_sequence_to_a_folder(usd_only, tmp_path):
    from nurec_usd.cli import main

    out = tmp_path / "seq"
    assert main(["render", str(usd_only / "root.usda"), "--sensor", "front_left", "--start", "0.2", "--end", "0.6",
                 "--fps", "5", "--downscale", "4", "-o", str(out), "--no-progress", "--device", "cpu"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [f"front_left_{i:05d}.png" for i in range(3)]
    # a lidar sequence: a sweep and a range picture per time
    out2 = tmp_path / "lidar_seq"
    assert main(["render", str(usd_only), "--sensor", "top", "--start", "0.1", "--end", "0.3", "--fps", "10",
                 "-o", str(out2), "--no-progress", "--device", "cpu"]) == 0
    assert sorted(p.name for p in out2.iterdir()) == sorted(
        [f"top_{i:05d}.ply" for i in range(3)] + [f"top_{i:05d}_range.png" for i in range(3)])


@pytest.mark.parametrize("args, code, message", [
    (["--sensor", "nope", "--time", "0.1"], 1, "no sensor 'nope'; the rig has front, front_left"),
    (["--sensor", "front", "--time", "7"], 1, "outside the scene's span [0.000000, 1.000000] s"),
    (["--sensor", "front", "--frame", "99"], 1, "--frame 99: front recorded 10 frames"),
    (["--sensor", "front"], 2, "give exactly one of --time T, --frame N"),
    (["--sensor", "front", "--start", "0.1"], 2, "needs both --start and --end"),
])
def test_render_errors_say_what_is_wrong(usd_only, tmp_path, capsys, args, code, message):
    from nurec_usd.cli import main

    assert main(["render", str(usd_only), *args, "-o", str(tmp_path / "x.png"), "--device", "cpu"]) == code
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_render_refuses_wrong_suffixes_missing_scenes_and_existing_output(usd_only, tmp_path, capsys):
    from nurec_usd.cli import main

    assert main(["render", str(usd_only), "--sensor", "top", "--time", "0.1", "-o", str(tmp_path / "x.png")]) == 1
    assert "a lidar renders to a .ply file" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "nowhere"), "--sensor", "top", "--time", "0.1", "-o",
                 str(tmp_path / "x.ply")]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    keep = tmp_path / "keep.png"
    keep.write_bytes(b"mine")
    assert main(["render", str(usd_only), "--sensor", "front", "--time", "0.1", "-o", str(keep)]) == 2
    assert "--overwrite" in capsys.readouterr().err and keep.read_bytes() == b"mine"


def test_a_stage_that_is_not_an_export_is_named(tmp_path):
    from pxr import Usd, UsdGeom

    stage = Usd.Stage.CreateNew(str(tmp_path / "other.usda"))
    UsdGeom.Xform.Define(stage, "/World")
    stage.GetRootLayer().customLayerData = {"absoluteTimeOffsetMicroSec": 0}
    stage.GetRootLayer().Save()
    with pytest.raises(ReplayError, match=r"other.usda: /World/Rig is missing"):
        Replay(tmp_path / "other.usda")


def test_export_with_collision_usdz_and_ply(tiny_run, tmp_path, capsys):
    """``export --collision --usdz --ply``: every file, valid, the collision mesh composed at
    /World/Collision (loaded even when payloads are not), and the package replays."""
    from pxr import Usd, UsdGeom, UsdVol

    from nurec_usd.cli import main

    out = tmp_path / "scene"
    assert main(["export", str(tiny_run), "-o", str(out), "--collision", "--usdz", "--ply", "--device", "cpu",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for name in ("root.usda", "collision.usdc", "scene.ply", "scene.usdz"):
        assert (out / name).is_file() and name in printed
    stage = Usd.Stage.Open(str(out / "root.usda"))
    assert_openusd_valid(stage)
    assert_gaussian_splats_valid(stage)

    mesh = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Collision/Mesh"))
    assert mesh and mesh.GetPurposeAttr().Get() == "guide"
    assert {"PhysicsCollisionAPI", "PhysicsMeshCollisionAPI"} <= set(mesh.GetPrim().GetAppliedSchemas())
    points = np.array(mesh.GetPointsAttr().Get())
    assert 1000 < len(points) and len(mesh.GetFaceVertexCountsAttr().Get()) <= 200_000
    # there is collision surface along the rig's path
    rig = np.array([np.array(UsdGeom.Xformable(stage.GetPrimAtPath("/World/Rig")).ComputeLocalToWorldTransform(
        Usd.TimeCode(t * stage.GetTimeCodesPerSecond()))).T[:3, 3] for t in (0.0, 0.5, 1.0)])
    for p in rig:
        near = points[np.linalg.norm(points[:, :2] - p[:2], axis=1) < 2.0]
        assert len(near), f"no collision surface around the rig at {p}"
    lean = Usd.Stage.Open(str(out / "root.usda"), Usd.Stage.LoadNone)
    assert lean.GetPrimAtPath("/World/Collision/Mesh")  # a reference: colliders without splats
    assert not [p for p in lean.Traverse() if p.IsA(UsdVol.ParticleField3DGaussianSplat)]

    names = zipfile.ZipFile(out / "scene.usdz").namelist()
    assert "collision.usdc" in names and "scene.ply" not in names
    packed = Replay(out / "scene.usdz")
    assert packed.stage.GetPrimAtPath("/World/Collision/Mesh")
    torch.testing.assert_close(packed.render_camera("front", 0.4, K), Replay(out).render_camera("front", 0.4, K))


def test_a_broken_splat_prim_is_named_with_its_attribute(usd_only, tmp_path):
    from pxr import Usd, UsdVol, Vt

    broken = tmp_path / "scene"
    shutil.copytree(usd_only, broken)
    stage = Usd.Stage.Open(str(broken / "background.usdc"))
    gs = UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath("/World/Background/Gaussians"))
    gs.GetOpacitiesAttr().Set(Vt.FloatArray([0.5, 0.5]))
    stage.GetRootLayer().Save()
    with pytest.raises(ReplayError, match=r"/World/Background/Gaussians: opacities has 2 entries, expected \d+"):
        Replay(broken)


def test_a_camera_falloff_is_read_checked_and_absent_from_older_stages(usd_only, replay, tmp_path):
    from pxr import Usd, Vt

    learned = {cam_id: cam.vignetting for cam_id, cam in replay.cameras.items()}
    assert all(len(v) == 2 and any(x != 0 for x in v) for v in learned.values()), learned
    older = tmp_path / "older"
    shutil.copytree(usd_only, older)
    stage = Usd.Stage.Open(str(older / "rig.usdc"))  # the layer that authors the cameras
    prim = stage.GetPrimAtPath(replay.cameras["front"].path)
    prim.RemoveProperty("nurec:camera:vignetting")  # as written before the falloff was learned
    stage.Save()
    assert Replay(older).cameras["front"].vignetting == [0.0, 0.0]
    prim.CreateAttribute("nurec:camera:vignetting", prim.GetAttribute("nurec:camera:exposure").GetTypeName()
                         ).Set(Vt.DoubleArray([0.1, 0.2, 0.3]))
    stage.Save()
    with pytest.raises(ReplayError, match=r"/World/Rig/front: nurec:camera:vignetting must hold 2 finite values"):
        Replay(older)
