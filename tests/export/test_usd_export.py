"""USD export: the layers of USD.md, validated, read back, atomic.

A small synthetic scene (a few hundred Gaussians, two tracks, SH degree 1, pose corrections)
with the sensor rig of samples/tiny: no build needed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, assert_gaussian_splats_valid, assert_openusd_valid

pytest.importorskip("pxr")

from nurec_usd.export.usd_schema import register_schema  # noqa: E402

register_schema()  # before anything below uses pxr

from pxr import Gf, Sdf, Usd, UsdGeom, UsdVol  # noqa: E402

from nurec_usd.export import usd_layers  # noqa: E402
from nurec_usd.export.usd_layers import export_usd  # noqa: E402
from nurec_usd.scene.gaussians import ActorTrack, GaussianParams, Scene  # noqa: E402

SH_DEGREE = 1


def _rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _rodrigues(w: np.ndarray) -> np.ndarray:
    a = np.linalg.norm(w)
    if a < 1e-15:
        return np.eye(3)
    k = w / a
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(a) * K + (1 - math.cos(a)) * K @ K


def _gaussians(n: int, gen: torch.Generator) -> GaussianParams:
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float32)  # noqa: E731
    g = GaussianParams(means=r(n, 3) * 5, quats=r(n, 4), log_scales=r(n, 3) * 0.5 - 2,
                       opacity_logits=r(n) * 2, sh0=r(n, 1, 3), shN=r(n, 15, 3) * 0.1, intensity_logits=r(n))
    g.check("test")
    return g


def _track(track_id: str, t0: float, t1: float, k: int, turn: float, start: np.ndarray) -> ActorTrack:
    times = torch.linspace(t0, t1, k, dtype=torch.float64)
    T = np.tile(np.eye(4), (k, 1, 1))
    for i in range(k):
        a = turn * i / (k - 1)
        T[i, :3, :3] = _rot_z(a)
        T[i, :3, 3] = start + np.array([3.0 * i, 0.5 * i, 0.0])
    return ActorTrack(track_id, "car", [4.5, 1.9, 1.6], times, torch.from_numpy(T))


@pytest.fixture(scope="module")
def rig() -> dict:
    from nurec_usd.capture.loader import load_capture
    from nurec_usd.scene.rig import describe_rig

    return describe_rig(load_capture(REPO / "samples" / "tiny"))


@pytest.fixture(scope="module")
def scene(rig) -> Scene:
    gen = torch.Generator().manual_seed(0)
    static = _gaussians(300, gen)
    actors = _gaussians(120, gen)
    index = torch.cat([torch.zeros(70, dtype=torch.int32), torch.ones(50, dtype=torch.int32)])
    # Keys 0.5 s apart turning 120 degrees per step: element-wise matrix interpolation would not be rigid.
    tracks = [_track("car_00", 0.0, 0.6, 4, math.radians(240), np.array([1.0, 2.0, 0.0])),
              _track("car/01", 0.3, 1.0, 5, math.radians(-90), np.array([-4.0, 1.0, 0.2]))]
    K = sum(len(t.times) for t in tracks)
    corr = (torch.randn(K, 3, generator=gen, dtype=torch.float32) * 0.05,
            torch.randn(K, 3, generator=gen, dtype=torch.float32) * 0.05)
    return Scene(static=static, actors=actors, actor_index=index, tracks=tracks,
                 sky=torch.randn(3, 16, 32, generator=gen) * 2, camera_ids=[c["id"] for c in rig["cameras"]],
                 exposure=torch.randn(len(rig["cameras"]), 6, generator=gen) * 0.1,
                 sh_degree=SH_DEGREE, pose_corrections=corr, metadata={"rig": rig, "intensity_scale": 7.5},
                 vignetting=torch.randn(len(rig["cameras"]), 2, generator=gen) * 0.1)


@pytest.fixture(scope="module")
def exported(scene, tmp_path_factory):
    out = export_usd(scene, tmp_path_factory.mktemp("usd") / "scene")
    return out


@pytest.fixture(scope="module")
def stage(exported):
    return Usd.Stage.Open(str(exported / "root.usda"))


def _activated(g: GaussianParams, rows=None):
    pick = (lambda a: a) if rows is None else (lambda a: a[rows])  # noqa: E731
    q = pick(g.quats).double()
    k = (SH_DEGREE + 1) ** 2
    return {
        "positions": pick(g.means).double().numpy(),
        "orientations": (q / q.norm(dim=-1, keepdim=True)).numpy(),
        "scales": pick(g.log_scales).double().exp().numpy(),
        "opacities": torch.sigmoid(pick(g.opacity_logits).double()).numpy(),
        "sh": pick(g.sh).double()[:, :k].numpy(),
        "intensities": torch.sigmoid(pick(g.intensity_logits).double()).numpy(),
    }


# ---------------------------------------------------------------------------------------------
# Files, metadata, validation


def test_writes_exactly_the_layers_of_the_contract(exported):
    files = sorted(str(p.relative_to(exported)) for p in exported.rglob("*") if p.is_file())
    assert files == ["actors.usdc", "actors/car_00.usdc", "actors/car_01.usdc", "background.usdc", "rig.usdc",
                     "root.usda", "sky.png"]
    assert not [p for p in exported.parent.iterdir() if p.name.startswith(".")], "staging folder left behind"


def test_every_layer_carries_the_stage_metadata(exported, rig):
    tcps = 1e6 / np.median(np.diff(rig["trajectory"]["timestamps_us"]))
    for path in exported.rglob("*.usd*"):
        layer = Sdf.Layer.FindOrOpen(str(path))
        assert layer.timeCodesPerSecond == pytest.approx(tcps), path
        assert layer.framesPerSecond == pytest.approx(tcps), path
        assert layer.customLayerData["absoluteTimeOffsetMicroSec"] == rig["start_us"], path
        assert layer.pseudoRoot.GetInfo("metersPerUnit") == 1.0, path
        assert layer.pseudoRoot.GetInfo("upAxis") == "Z", path
        assert layer.defaultPrim == ("Actor" if path.parent.name == "actors" else "World"), path
        if path.suffix == ".usda":  # time samples only in crate files
            assert not any(layer.ListTimeSamplesForPath(spec.path) for spec in _attribute_specs(layer)), path
    root = Sdf.Layer.FindOrOpen(str(exported / "root.usda"))
    assert root.GetPrimAtPath("/World").specifier == Sdf.SpecifierDef
    assert root.GetPrimAtPath("/World").typeName == "Xform"
    assert root.startTimeCode == pytest.approx(0.0)
    assert root.endTimeCode == pytest.approx((max(rig["trajectory"]["timestamps_us"][-1],
                                                  max(max(l["timestamps_us"]) for l in rig["lidars"]) + 1e5)
                                              - rig["start_us"]) * 1e-6 * tcps)


def _attribute_specs(layer):
    out = []
    layer.Traverse(Sdf.Path.absoluteRootPath, lambda p: out.append(p) if p.IsPropertyPath() else None)
    return [layer.GetAttributeAtPath(p) for p in out if layer.GetAttributeAtPath(p)]


def test_usd_validation_reports_no_errors(stage):
    assert_openusd_valid(stage)


def test_nvidia_validator_reports_no_issues(stage):
    assert_gaussian_splats_valid(stage)


# ---------------------------------------------------------------------------------------------
# Gaussians


def _check_splats(prim_path: str, stage, expected: dict) -> None:
    gs = UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath(prim_path))
    assert gs, prim_path
    n = len(expected["positions"])
    pos = np.array(gs.GetPositionsAttr().Get(), dtype=np.float64)
    assert pos.shape == (n, 3)
    np.testing.assert_allclose(pos, expected["positions"], rtol=1e-6, atol=1e-6)
    quats = gs.GetOrientationsAttr().Get()
    wxyz = np.array([[q.GetReal(), *q.GetImaginary()] for q in quats])
    np.testing.assert_allclose(wxyz, expected["orientations"], atol=1e-6)
    np.testing.assert_allclose(np.array(gs.GetScalesAttr().Get()), expected["scales"], rtol=1e-5)
    np.testing.assert_allclose(np.array(gs.GetOpacitiesAttr().Get()), expected["opacities"], rtol=1e-5, atol=1e-7)
    assert gs.GetRadianceSphericalHarmonicsDegreeAttr().Get() == SH_DEGREE
    k = (SH_DEGREE + 1) ** 2
    sh_attr = gs.GetRadianceSphericalHarmonicsCoefficientsAttr()
    sh = np.array(sh_attr.Get(), dtype=np.float64)
    assert sh.shape == (n * k, 3)
    np.testing.assert_allclose(sh.reshape(n, k, 3), expected["sh"], rtol=1e-6, atol=1e-6)
    assert sh_attr.GetMetadata("interpolation") == "vertex"
    assert sh_attr.GetMetadata("elementSize") == k
    lo, hi = (np.array(v) for v in gs.GetExtentAttr().Get())
    assert (pos >= lo - 1e-6).all() and (pos <= hi + 1e-6).all()
    assert gs.GetSortingModeHintAttr().Get() == "cameraDistance"
    inten = UsdGeom.PrimvarsAPI(gs.GetPrim()).GetPrimvar(usd_layers.INTENSITY_PRIMVAR)
    assert inten.GetInterpolation() == "vertex"
    np.testing.assert_allclose(np.array(inten.ComputeFlattened()), expected["intensities"], rtol=1e-6)
    assert gs.GetPurposeAttr().Get() == "render"
    assert gs.GetPrim().GetAttribute("colorSpace:name").Get() == usd_layers.COLOR_SPACE
    proxy_targets = UsdGeom.Imageable(gs.GetPrim()).GetProxyPrimRel().GetTargets()
    assert len(proxy_targets) == 1
    pts = UsdGeom.Points(stage.GetPrimAtPath(proxy_targets[0]))
    assert pts and pts.GetPurposeAttr().Get() == "proxy"
    np.testing.assert_allclose(np.array(pts.GetPointsAttr().Get()), expected["positions"], rtol=1e-6, atol=1e-6)
    colour = np.array(pts.GetDisplayColorPrimvar().ComputeFlattened())
    np.testing.assert_allclose(colour, np.clip(0.5 + 0.28209479177387814 * expected["sh"][:, 0], 0, 1), atol=1e-6)
    assert len(pts.GetWidthsAttr().Get()) == n


def test_background_gaussians_round_trip(stage, scene):
    _check_splats("/World/Background/Gaussians", stage, _activated(scene.static))


def test_actor_gaussians_round_trip(stage, scene):
    for i, name in enumerate(["car_00", "car_01"]):
        rows = torch.nonzero(scene.actor_index == i).flatten()
        _check_splats(f"/World/Actors/{name}/Gaussians", stage, _activated(scene.actors, rows))
        # car/01 is not a prim name: its prim says which track it is.
        assert stage.GetPrimAtPath(f"/World/Actors/{name}").GetCustomDataByKey("nurec:trackId") == scene.tracks[i].id


def test_opening_without_loading_reads_no_splats(exported):
    stage = Usd.Stage.Open(str(exported / "root.usda"), Usd.Stage.LoadNone)
    used = {os.path.basename(layer.realPath) for layer in stage.GetUsedLayers() if not layer.anonymous}
    assert used == {"root.usda", "rig.usdc", "actors.usdc"}
    assert not [p for p in stage.Traverse() if p.IsA(UsdVol.ParticleField3DGaussianSplat)]
    # the actors' poses are there, their Gaussians not
    assert stage.GetPrimAtPath("/World/Actors/car_00").GetAttribute("xformOp:orient").GetNumTimeSamples() == 4
    assert not stage.GetPrimAtPath("/World/Actors/car_00/Gaussians")


# ---------------------------------------------------------------------------------------------
# Actors


def _world(stage, path: str, code: float) -> np.ndarray:
    """Column-vector 4x4 local-to-world of a prim at a time code."""
    m = UsdGeom.Xformable(stage.GetPrimAtPath(path)).ComputeLocalToWorldTransform(Usd.TimeCode(code))
    return np.array(m).T


def test_actor_keys_are_the_corrected_track_poses(stage, scene):
    tcps = stage.GetTimeCodesPerSecond()
    dt, dw = (c.double().numpy() for c in scene.pose_corrections)
    k0 = 0
    for track, name in zip(scene.tracks, ["car_00", "car_01"]):
        T = track.T_world_box.numpy()
        attr = stage.GetPrimAtPath(f"/World/Actors/{name}").GetAttribute("xformOp:translate")
        assert attr.Get() is not None  # a default value beside the samples
        assert attr.GetTypeName() == "double3"
        orient_type = "quatd" if usd_layers.ORIENT_PRECISION == "double" else "quatf"
        assert stage.GetPrimAtPath(f"/World/Actors/{name}").GetAttribute("xformOp:orient").GetTypeName() == orient_type
        for j, t in enumerate(track.times.tolist()):
            M = _world(stage, f"/World/Actors/{name}", t * tcps)
            np.testing.assert_allclose(M[:3, :3], _rodrigues(dw[k0 + j]) @ T[j, :3, :3], atol=2e-6)
            np.testing.assert_allclose(M[:3, 3], T[j, :3, 3] + dt[k0 + j], atol=1e-9)
        k0 += len(track.times)


def test_actor_poses_between_keys_stay_rigid(stage, scene):
    tcps = stage.GetTimeCodesPerSecond()
    for track, name in zip(scene.tracks, ["car_00", "car_01"]):
        t = track.times.numpy()
        for a, b in zip(t[:-1], t[1:]):
            for f in (0.25, 0.5, 0.75):
                R = _world(stage, f"/World/Actors/{name}", (a + f * (b - a)) * tcps)[:3, :3]
                np.testing.assert_allclose(R.T @ R, np.eye(3), atol=1e-5)
                assert np.linalg.det(R) == pytest.approx(1.0, abs=1e-5)


def test_actor_visibility_follows_the_track_span(stage, scene):
    tcps = stage.GetTimeCodesPerSecond()
    for track, name in zip(scene.tracks, ["car_00", "car_01"]):
        img = UsdGeom.Imageable(stage.GetPrimAtPath(f"/World/Actors/{name}"))
        t0, t1 = float(track.times[0]), float(track.times[-1])
        vis = lambda t: img.ComputeVisibility(Usd.TimeCode(t * tcps))  # noqa: E731
        assert vis(t0) == "inherited" and vis(t1) == "inherited" and vis(0.5 * (t0 + t1)) == "inherited"
        assert vis(t1 + 1e-3) == "invisible" and vis(t1 + 10) == "invisible"
        assert vis(t0 - 1e-3) == "invisible" and vis(t0 - 10) == "invisible"
        # the Gaussians under it follow
        assert UsdGeom.Imageable(stage.GetPrimAtPath(f"/World/Actors/{name}/Gaussians")).ComputeVisibility(
            Usd.TimeCode((t1 + 1) * tcps)) == "invisible"


# ---------------------------------------------------------------------------------------------
# Rig and sensors


def test_rig_pose_is_the_trajectory(stage, rig):
    traj = rig["trajectory"]
    tcps = stage.GetTimeCodesPerSecond()
    for t_us, T in zip(traj["timestamps_us"], traj["T_world_rig"]):
        M = _world(stage, "/World/Rig", (t_us - rig["start_us"]) * tcps / 1e6)
        np.testing.assert_allclose(M, np.asarray(T), atol=2e-6)


def test_cameras_carry_pose_intrinsics_shutter_and_lens(stage, rig):
    for cam in rig["cameras"]:
        c = UsdGeom.Camera(stage.GetPrimAtPath(f"/World/Rig/{cam['id']}"))
        assert c, cam["id"]
        local = np.array(c.GetLocalTransformation(Usd.TimeCode.Default())).T
        np.testing.assert_allclose(local, np.asarray(cam["T_rig_camera"]) @ np.diag([1.0, -1, -1, 1]), atol=2e-6)
        I, W, H = cam["intrinsics"], cam["width"], cam["height"]
        fx = I["angle_to_pixel"][1] if cam["model"] == "ftheta" else I["fx"]
        fy = I["angle_to_pixel"][1] if cam["model"] == "ftheta" else I["fy"]
        f, ha, va = (c.GetFocalLengthAttr().Get(), c.GetHorizontalApertureAttr().Get(),
                     c.GetVerticalApertureAttr().Get())
        assert f / ha == pytest.approx(fx / W, rel=1e-6)
        assert f / va == pytest.approx(fy / H, rel=1e-6)
        prim = c.GetPrim()
        assert prim.GetAttribute("nurec:rollingShutter:direction").Get() == cam["rolling_shutter"]["direction"]
        assert prim.GetAttribute("nurec:rollingShutter:readoutTimeUs").Get() == cam["rolling_shutter"]["readout_time_us"]
        assert list(prim.GetAttribute("nurec:camera:frameTimestampsUs").Get()) == cam["timestamps_us"]
        assert prim.GetAttribute("nurec:camera:model").Get() == cam["model"]
        api = usd_layers.LENS_APIS.get(cam["model"])
        # usd-core does not know NVIDIA's schemas: GetAppliedSchemas() leaves them out, the metadata has them
        applied = list(prim.GetMetadata("apiSchemas").GetAddedOrExplicitItems())
        assert "NurecCameraSensorAPI" in applied
        assert (api in applied) if api else not any(s.startswith("OmniLensDistortion") for s in applied)
        get = lambda n: prim.GetAttribute(f"omni:lensdistortion:{n}").Get()  # noqa: E731
        if cam["model"] in ("opencv", "opencv_fisheye"):
            ns = "opencvPinhole" if cam["model"] == "opencv" else "opencvFisheye"
            assert get("model") == ns
            for key in ("fx", "fy", "cx", "cy", "k1", "k2"):
                assert get(f"{ns}:{key}") == pytest.approx(I[key], rel=1e-6)
            assert tuple(get(f"{ns}:imageSize")) == (W, H)
        if cam["model"] == "ftheta":
            assert get("model") == "ftheta"
            assert tuple(get("ftheta:opticalCenter")) == pytest.approx((I["cx"], I["cy"]))
            assert get("ftheta:maxFov") == pytest.approx(I["max_fov_deg"])
            # the backward polynomial inverts ours over the image
            k = [get(f"ftheta:k{i}") for i in range(5)]
            theta = np.linspace(0, 1.2, 50)
            r = np.polynomial.polynomial.polyval(theta, I["angle_to_pixel"])
            np.testing.assert_allclose(np.polynomial.polynomial.polyval(r, k), theta, atol=2e-3)


def test_pinhole_camera_projects_like_opencv(stage, rig):
    cam = next(c for c in rig["cameras"] if c["model"] == "pinhole")
    gf_cam = UsdGeom.Camera(stage.GetPrimAtPath(f"/World/Rig/{cam['id']}")).GetCamera(Usd.TimeCode.Default())
    frustum = gf_cam.frustum
    I, W, H = cam["intrinsics"], cam["width"], cam["height"]
    T = _world(stage, f"/World/Rig/{cam['id']}", 0.0)  # camera (USD axes) -> world
    for u, v in ((I["cx"], I["cy"]), (10.0, 20.0), (W - 5.0, H - 7.0)):
        # the OpenCV ray through pixel (u, v) at depth 10, in the world
        p_cv = 10.0 * np.array([(u - I["cx"]) / I["fx"], (v - I["cy"]) / I["fy"], 1.0])
        p_world = T @ np.append(np.diag([1.0, -1, -1]) @ p_cv, 1.0)
        ndc = frustum.ComputeViewMatrix().Transform(Gf.Vec3d(*p_world[:3]))
        ndc = frustum.ComputeProjectionMatrix().Transform(ndc)
        # NDC [-1, 1] spans the pixel edges [-0.5, W - 0.5]
        assert (ndc[0] + 1) / 2 * W - 0.5 == pytest.approx(u, abs=1e-3)
        assert (1 - ndc[1]) / 2 * H - 0.5 == pytest.approx(v, abs=1e-3)


def _lidar_values(prim) -> dict:
    return {n: prim.GetAttribute(f"nurec:lidar:{n}").Get() for n in
            ("elevationDeg", "azimuthOffsetDeg", "columns", "azimuthResolutionDeg", "scanRateHz", "rotation",
             "startAzimuthDeg", "minRange", "maxRange", "returns", "sweepTimestampsUs")}


def test_lidars_carry_the_spinning_model(stage, rig):
    for lid in rig["lidars"]:
        prim = stage.GetPrimAtPath(f"/World/Rig/{lid['id']}")
        assert prim.GetTypeName() == "Xform"
        assert prim.HasAPI("NurecSpinningLidarAPI")
        local = np.array(UsdGeom.Xformable(prim).GetLocalTransformation(Usd.TimeCode.Default())).T
        np.testing.assert_allclose(local, np.asarray(lid["T_rig_lidar"]), atol=2e-6)
        v = _lidar_values(prim)
        assert list(v["elevationDeg"]) == lid["elevation_deg"]
        assert list(v["azimuthOffsetDeg"]) == lid["azimuth_offset_deg"]
        assert v["columns"] == lid["columns"] and v["azimuthResolutionDeg"] == pytest.approx(360 / lid["columns"])
        assert v["scanRateHz"] == lid["scan_rate_hz"] and v["rotation"] == lid["rotation"]
        assert v["startAzimuthDeg"] == lid["start_azimuth_deg"]
        assert (v["minRange"], v["maxRange"]) == (lid["min_range_m"], lid["max_range_m"])
        assert v["returns"] == 1 and list(v["sweepTimestampsUs"]) == lid["timestamps_us"]


def test_camera_intrinsics_read_back_as_written(stage, rig):
    """What replay reads from nurec:camera:intrinsicNames/Values is the capture's intrinsics dict,
    f-theta polynomial lists included."""
    for cam in rig["cameras"]:
        prim = stage.GetPrimAtPath(f"/World/Rig/{cam['id']}")
        got = usd_layers.intrinsics_from_items(list(prim.GetAttribute("nurec:camera:intrinsicNames").Get()),
                                               list(prim.GetAttribute("nurec:camera:intrinsicValues").Get()))
        assert got == {k: (list(map(float, v)) if isinstance(v, (list, tuple)) else float(v))
                       for k, v in cam["intrinsics"].items()}, cam["id"]


def test_cameras_carry_their_exposure_and_falloff_and_lidars_their_intensity_scale(stage, scene, rig):
    for i, cam_id in enumerate(scene.camera_ids):
        prim = stage.GetPrimAtPath(f"/World/Rig/{cam_id}")
        np.testing.assert_allclose(list(prim.GetAttribute("nurec:camera:exposure").Get()),
                                   scene.exposure[i].double().numpy(), rtol=1e-7)
        np.testing.assert_allclose(list(prim.GetAttribute("nurec:camera:vignetting").Get()),
                                   scene.vignetting[i].double().numpy(), rtol=1e-7)
        assert prim.GetCustomDataByKey("nurec:sensorId") == cam_id
    for lid in rig["lidars"]:
        prim = stage.GetPrimAtPath(f"/World/Rig/{lid['id']}")
        assert prim.GetAttribute("nurec:lidar:intensityScale").Get() == 7.5


def test_sky_is_a_dome_light_whose_texture_viewers_map_like_we_do(stage, scene, exported):
    """At each texel centre of our map, the PNG pixel found through USD's latlong convention
    (OpenEXR's: longitude +pi at the left edge, 0 along the dome's +Z, pi/2 along +X, pole +Y)
    and the DomeLight's transform is that texel's colour."""
    from PIL import Image

    from pxr import UsdLux

    from nurec_usd.render.scene_renderer import sky_colors

    dome = UsdLux.DomeLight(stage.GetPrimAtPath("/World/Background/Sky"))
    assert dome and dome.GetTextureFormatAttr().Get() == "latlong"
    texture = dome.GetTextureFileAttr().Get()
    assert texture.resolvedPath and os.path.samefile(texture.resolvedPath, exported / "sky.png")
    png = np.asarray(Image.open(exported / "sky.png"))
    _, H, W = scene.sky.shape
    assert png.shape == (H, W, 3)
    logits = np.array(dome.GetPrim().GetAttribute("nurec:sky:logits").Get(), dtype=np.float32)
    np.testing.assert_array_equal(logits, scene.sky.numpy().reshape(-1))
    R = _world(stage, "/World/Background/Sky", 0.0)[:3, :3]
    i, j = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    el = math.pi / 2 - (i + 0.5) * math.pi / H
    az = -math.pi + (j + 0.5) * 2 * math.pi / W
    d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1)  # world, [H, W, 3]
    ours = sky_colors(scene.sky, torch.from_numpy(d).float()).numpy()
    np.testing.assert_allclose(ours, torch.sigmoid(scene.sky).permute(1, 2, 0).numpy(), atol=1e-5)
    local = d @ R  # R^T d, row-wise
    lat = np.arcsin(np.clip(local[..., 1], -1, 1))
    lon = np.arctan2(local[..., 0], local[..., 2])
    x = np.floor((math.pi - lon) / (2 * math.pi) * W).astype(int) % W
    y = np.clip(np.floor((math.pi / 2 - lat) / math.pi * H).astype(int), 0, H - 1)
    np.testing.assert_allclose(png[y, x] / 255.0, ours, atol=0.5 / 255 + 1e-6)


def test_schema_is_registered_with_its_fallbacks():
    definition = Usd.SchemaRegistry().FindAppliedAPIPrimDefinition("NurecSpinningLidarAPI")
    assert definition is not None
    names = set(definition.GetPropertyNames())
    assert {"nurec:lidar:elevationDeg", "nurec:lidar:rotation", "nurec:lidar:returns"} <= names
    assert Usd.SchemaRegistry().FindAppliedAPIPrimDefinition("NurecCameraSensorAPI") is not None


def test_lidar_attributes_read_without_the_schema_plugin(exported, rig):
    code = (
        "import json, sys\n"
        "from pxr import Usd, UsdGeom\n"
        "assert Usd.SchemaRegistry().FindAppliedAPIPrimDefinition('NurecSpinningLidarAPI') is None\n"
        f"stage = Usd.Stage.Open({str(exported / 'root.usda')!r}, Usd.Stage.LoadNone)\n"
        f"prim = stage.GetPrimAtPath('/World/Rig/{rig['lidars'][0]['id']}')\n"
        "out = {n.split(':')[-1]: prim.GetAttribute(n).Get() for n in prim.GetPropertyNames()"
        " if n.startswith('nurec:lidar:')}\n"
        "out = {k: (list(v) if hasattr(v, '__len__') and not isinstance(v, str) else v) for k, v in out.items()}\n"
        "out['_type'] = prim.GetTypeName()\n"
        "out['_m'] = [list(r) for r in UsdGeom.Xformable(prim).GetLocalTransformation(Usd.TimeCode.Default())]\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PXR_PLUGINPATH_NAME"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    lid = rig["lidars"][0]
    assert got["_type"] == "Xform"
    np.testing.assert_allclose(np.array(got["_m"]).T, np.asarray(lid["T_rig_lidar"]), atol=2e-6)
    assert got["elevationDeg"] == lid["elevation_deg"] and got["columns"] == lid["columns"]
    assert got["rotation"] == lid["rotation"] and got["maxRange"] == lid["max_range_m"]
    assert got["scanRateHz"] == lid["scan_rate_hz"] and got["sweepTimestampsUs"] == lid["timestamps_us"]


# ---------------------------------------------------------------------------------------------
# All or nothing


def test_failed_export_leaves_previous_output_untouched(scene, tmp_path, monkeypatch):
    out = export_usd(scene, tmp_path / "scene")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(usd_layers, "_write_background", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        export_usd(scene, out, overwrite=True)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene"]  # no partial folder

    monkeypatch.setattr(usd_layers, "_write_rig", boom)
    with pytest.raises(RuntimeError):
        export_usd(scene, tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene"]


def test_existing_output_needs_overwrite(scene, exported):
    with pytest.raises(FileExistsError):
        export_usd(scene, exported)


@pytest.mark.parametrize("columns", [None, 1, 3])
def test_unique_rows_indexes_every_row_exactly(columns):
    """The indexed primvars' distinct rows: ``uniq[inverse]`` gives back every row bit for bit,
    the rows of ``uniq`` are distinct, and there are as many as numpy's own unique finds
    (which treats -0.0 and 0.0 as one value: none here)."""
    from nurec_usd.export.usd_layers import unique_rows

    rng = np.random.default_rng(5)
    shape = (5000,) if columns is None else (5000, columns)
    palette = rng.standard_normal((37,) + shape[1:]).astype(np.float32)
    if columns:
        palette[:, 0] = palette[rng.integers(0, 3, 37), 0]  # rows alike in their first column(s)
    values = palette[rng.integers(0, 37, 5000)]
    values[::11] = rng.standard_normal(values[::11].shape).astype(np.float32)  # some distinct ones
    values[3] = np.nan
    values[7] = values[3]
    uniq, inverse = unique_rows(values)
    assert uniq.dtype == np.float32 and inverse.shape == (5000,)
    assert np.array_equal(uniq[inverse].view(np.uint32), values.view(np.uint32))
    as_rows = uniq.reshape(len(uniq), -1).view(np.uint32)
    assert len({row.tobytes() for row in as_rows}) == len(uniq)
    assert len(uniq) == len(np.unique(values.reshape(5000, -1).view(np.uint32), axis=0))
    assert unique_rows(np.zeros((0, 3), np.float32))[0].shape == (0, 3)


@pytest.mark.parametrize("columns", [1, 3])
def test_unique_rows_stays_exact_when_distinct_rows_share_a_key(columns, monkeypatch):
    """Rows are grouped by one key per row; distinct rows with one key (forced here: a key of a
    few values) are ordered column by column instead, and the result is exact all the same."""
    from nurec_usd.export import usd_layers

    rng = np.random.default_rng(6)
    palette = rng.standard_normal((29, columns)).astype(np.float32)
    values = palette[rng.integers(0, 29, 3000)]
    monkeypatch.setattr(usd_layers, "row_keys", lambda bits: bits[:, 0] % np.uint32(3))
    uniq, inverse = usd_layers.unique_rows(values)
    assert np.array_equal(uniq[inverse].view(np.uint32), values.view(np.uint32))
    assert len(uniq) == len(np.unique(values.view(np.uint32), axis=0)) == 29


def test_unique_rows_lists_rows_in_the_order_they_first_appear():
    """``uniq`` is in first-appearance order (the indices then mostly climb, which USD's crate
    files write fast and small), whatever the key order."""
    rng = np.random.default_rng(7)
    for columns in (None, 3):
        shape = (4000,) if columns is None else (4000, columns)
        palette = rng.standard_normal((50,) + shape[1:]).astype(np.float32)
        values = palette[rng.integers(0, 50, 4000)]
        uniq, inverse = usd_layers.unique_rows(values)
        rows = values.reshape(4000, -1).view(np.uint32)
        _, first = np.unique(rows, axis=0, return_index=True)
        assert np.array_equal(uniq.reshape(len(uniq), -1).view(np.uint32), rows[np.sort(first)])
        assert inverse[0] == 0 and (np.diff(np.maximum.accumulate(inverse)) <= 1).all()


@pytest.mark.parametrize("array_type, values", [
    ("Vec3fArray", np.random.default_rng(8).standard_normal((1000, 3)).astype(np.float32)),
    ("QuatfArray", np.random.default_rng(9).standard_normal((1000, 4)).astype(np.float32)),
    ("FloatArray", np.random.default_rng(10).standard_normal(1000).astype(np.float32)),
    ("IntArray", np.random.default_rng(11).integers(-9, 9, 1000).astype(np.int32)),
])
def test_vt_arrays_filled_in_place_equal_from_numpy(array_type, values):
    """_vt copies into a new Vt array's storage: the array must equal what FromNumpy makes."""
    from pxr import Vt

    vt_type = getattr(Vt, array_type)
    made = usd_layers._vt(vt_type, values)
    assert type(made) is vt_type and made == vt_type.FromNumpy(values)
    assert np.array_equal(np.asarray(made).view(np.uint8), values.view(np.uint8))
    # a layout that is not the array's: no fill, the caller falls back to FromNumpy
    assert usd_layers._vt_filled(vt_type, len(values), (7,), np.float32, lambda dest: None) is None
    assert usd_layers._vt(vt_type, values[:0]) == vt_type()


@pytest.mark.parametrize("degree", [0, 2, 3])
def test_sh_coefficients_of_every_degree(degree, tmp_path):
    """The SH array is filled in place from the DC and the degree's other coefficients (DC first)."""
    gen = torch.Generator().manual_seed(degree)
    g = _gaussians(50, gen)
    s = usd_layers.activated(g, degree)
    stage = Usd.Stage.CreateInMemory()
    usd_layers._write_splats(stage, "/P", s)
    k = (degree + 1) ** 2
    sh = np.array(UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath("/P/Gaussians"))
                  .GetRadianceSphericalHarmonicsCoefficientsAttr().Get(), dtype=np.float32)
    assert np.array_equal(sh.reshape(50, k, 3), g.sh[:, :k].numpy())
