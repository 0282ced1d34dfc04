"""The parts of the USD export that simulators and ground-truth tools read without our code:
the RTX lidar (OmniLidar), semantic labels, render products, the splats' projection hint.
Each is read back with pxr alone and compared with what it was authored from.

Uses the synthetic scene of test_usd_export (the rig of samples/tiny, two tracks).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pxr")

from test_usd_export import exported, rig, scene, stage  # noqa: E402,F401 (fixtures)

from pxr import Sdf, Usd, UsdGeom, UsdRender, UsdSemantics, UsdVol  # noqa: E402

from nurec_usd.export import usd_layers  # noqa: E402

CORE = "omni:sensor:Core:"
# Every attribute the OmniLidar carries, spelled out here (docs/usd-for-simulators.md lists the same).
RTX_ATTRIBUTES = {
    "scanType": "token", "scanRateBaseHz": "float", "reportRateBaseHz": "float", "numberOfEmitters": "int",
    "numberOfChannels": "int", "maxReturns": "int", "nearRangeM": "float", "farRangeM": "float",
    "startAzimuthDeg": "float", "endAzimuthDeg": "float", "upElevationDeg": "float", "downElevationDeg": "float",
    "emitterStateCount": "int", "emitterState:s001:azimuthDeg": "float[]",
    "emitterState:s001:elevationDeg": "float[]", "emitterState:s001:fireTimeNs": "int[]",
}


# ---------------------------------------------------------------------------------------------
# Lidar: the RTX lidar's OmniLidar prim


def _omni_lidar(stage, lid):
    return stage.GetPrimAtPath(f"/World/Rig/{lid['id']}/OmniLidar")


def test_omni_lidar_is_a_typed_prim_under_the_lidar_at_identity(stage, rig):
    for lid in rig["lidars"]:
        prim = _omni_lidar(stage, lid)
        assert prim and prim.GetSpecifier() == Sdf.SpecifierDef
        assert prim.GetTypeName() == "OmniLidar"
        assert "OmniSensorGenericLidarCoreAPI" in prim.GetMetadata("apiSchemas").GetAddedOrExplicitItems()
        assert prim.GetCustomDataByKey("nurec:sensorId") == lid["id"]
        assert not [a for a in prim.GetAttributes() if a.GetName().startswith("xformOp")]
        # where USD puts it is where the lidar is, at any time
        for code in (0.0, 7.5):
            lidar = UsdGeom.Xformable(prim.GetParent()).ComputeLocalToWorldTransform(Usd.TimeCode(code))
            cache = UsdGeom.XformCache(Usd.TimeCode(code))
            assert np.allclose(np.array(cache.GetLocalToWorldTransform(prim)), np.array(lidar), atol=1e-12)


def test_omni_lidar_attributes_read_back_as_the_channel_table(stage, rig):
    """Every omni:sensor:Core:* attribute, read with pxr, against the capture's channel table."""
    for lid in rig["lidars"]:
        prim = _omni_lidar(stage, lid)
        names = {a.GetName()[len(CORE):]: str(a.GetTypeName()) for a in prim.GetAttributes()
                 if a.GetName().startswith(CORE)}
        assert names == RTX_ATTRIBUTES
        get = lambda n: prim.GetAttribute(CORE + n).Get()  # noqa: E731
        channels = len(lid["elevation_deg"])
        assert get("scanType") == "ROTARY"
        assert get("scanRateBaseHz") == pytest.approx(lid["scan_rate_hz"], rel=1e-7)
        assert get("reportRateBaseHz") == pytest.approx(lid["columns"] * lid["scan_rate_hz"], rel=1e-7)
        assert get("numberOfEmitters") == channels and get("numberOfChannels") == channels
        assert get("maxReturns") == lid.get("returns", 1)
        assert get("nearRangeM") == pytest.approx(lid["min_range_m"], rel=1e-7)
        assert get("farRangeM") == pytest.approx(lid["max_range_m"], rel=1e-7)
        start = get("startAzimuthDeg")
        assert -180.0 <= start < 180.0 and get("endAzimuthDeg") == pytest.approx(start + 360.0)
        assert (start - lid["start_azimuth_deg"]) % 360.0 == pytest.approx(0.0, abs=1e-5)
        assert get("upElevationDeg") == pytest.approx(max(lid["elevation_deg"]), abs=1e-5)
        assert get("downElevationDeg") == pytest.approx(min(lid["elevation_deg"]), abs=1e-5)
        assert get("emitterStateCount") == 1
        np.testing.assert_allclose(list(get("emitterState:s001:elevationDeg")), lid["elevation_deg"], atol=1e-5)
        np.testing.assert_allclose(list(get("emitterState:s001:azimuthDeg")), lid["azimuth_offset_deg"], atol=1e-5)
        assert list(get("emitterState:s001:fireTimeNs")) == [0] * channels
        assert all(prim.GetAttribute(CORE + n).GetVariability() == Sdf.VariabilityUniform for n in RTX_ATTRIBUTES)


def test_rtx_values_follow_a_clockwise_start_and_the_returns():
    lid = {"elevation_deg": [-10.0, 0.0, 5.0], "azimuth_offset_deg": [0.1, -0.1, 0.0], "columns": 100,
           "scan_rate_hz": 20.0, "start_azimuth_deg": 270.0, "min_range_m": 0.3, "max_range_m": 50.0, "returns": 2,
           "rotation": "clockwise"}
    v = {k: val for k, (_, val) in usd_layers.rtx_lidar_values(lid).items()}
    assert v["startAzimuthDeg"] == -90.0 and v["endAzimuthDeg"] == 270.0
    assert v["reportRateBaseHz"] == 2000.0 and v["maxReturns"] == 2
    assert v["upElevationDeg"] == 5.0 and v["downElevationDeg"] == -10.0


# ---------------------------------------------------------------------------------------------
# Semantic labels


def test_every_actor_and_the_background_carry_a_class_label(stage, scene):
    assert "class" in UsdSemantics.LabelsAPI.GetDirectTaxonomies(stage.GetPrimAtPath("/World/Background"))
    expected = {"/World/Background": "background"}
    for track, name in zip(scene.tracks, ["car_00", "car_01"]):
        expected[f"/World/Actors/{name}"] = track.label
    for path, label in expected.items():
        prim = stage.GetPrimAtPath(path)
        api = UsdSemantics.LabelsAPI(prim, "class")
        assert prim.HasAPI(UsdSemantics.LabelsAPI, "class"), path
        assert list(api.GetLabelsAttr().Get()) == [label], path


def test_labels_are_inherited_by_the_gaussians(stage):
    """What a ground-truth tool asks of a splat prim: its class, from the nearest labelled ancestor."""
    for path, label in (("/World/Actors/car_00/Gaussians", "car"), ("/World/Background/Gaussians", "background")):
        query = UsdSemantics.LabelsQuery("class", Usd.TimeCode.Default())
        assert list(query.ComputeUniqueInheritedLabels(stage.GetPrimAtPath(path))) == [label], path


def test_labels_are_read_without_loading_the_payloads(exported):
    stage = Usd.Stage.Open(str(exported / "root.usda"), Usd.Stage.LoadNone)
    for path in ("/World/Background", "/World/Actors/car_00", "/World/Actors/car_01"):
        assert stage.GetPrimAtPath(path).HasAPI(UsdSemantics.LabelsAPI, "class"), path


# ---------------------------------------------------------------------------------------------
# Cameras: render products


def test_a_render_product_per_camera_with_its_resolution(stage, rig):
    settings = UsdRender.Settings.GetStageRenderSettings(stage)
    assert settings, "the stage's renderSettingsPrimPath must name the render settings"
    products = [UsdRender.Product(stage.GetPrimAtPath(p)) for p in settings.GetProductsRel().GetTargets()]
    assert len(products) == len(rig["cameras"])
    by_camera = {}
    for product in products:
        assert product and product.GetProductTypeAttr().Get() == "raster"
        (target,) = product.GetCameraRel().GetTargets()
        by_camera[str(target)] = product
        (var,) = product.GetOrderedVarsRel().GetTargets()
        assert UsdRender.Var(stage.GetPrimAtPath(var)).GetSourceNameAttr().Get() == "LdrColor"
    for cam in rig["cameras"]:
        path = f"/World/Rig/{cam['id']}"
        product = by_camera[path]
        assert stage.GetPrimAtPath(path).IsA(UsdGeom.Camera)
        assert tuple(product.GetResolutionAttr().Get()) == (cam["width"], cam["height"])
        assert product.GetProductNameAttr().Get() == cam["id"]
        # the product's image aspect (resolution x pixel aspect) is the camera's aperture aspect
        camera = UsdGeom.Camera(stage.GetPrimAtPath(path))
        aperture = camera.GetHorizontalApertureAttr().Get() / camera.GetVerticalApertureAttr().Get()
        image = cam["width"] * product.GetPixelAspectRatioAttr().Get() / cam["height"]
        assert image == pytest.approx(aperture, rel=1e-6), cam["id"]
    first = rig["cameras"][0]
    assert [str(t) for t in settings.GetCameraRel().GetTargets()] == [f"/World/Rig/{first['id']}"]
    assert tuple(settings.GetResolutionAttr().Get()) == (first["width"], first["height"])
    assert set(settings.GetIncludedPurposesAttr().Get()) == {"default", "render"}


def test_splats_carry_the_projection_hint_they_were_trained_with(stage):
    splats = [p for p in stage.Traverse() if p.IsA(UsdVol.ParticleField3DGaussianSplat)]
    assert len(splats) == 3
    for prim in splats:
        hint = UsdVol.ParticleField3DGaussianSplat(prim).GetProjectionModeHintAttr()
        assert hint.HasAuthoredValue() and hint.Get() == "perspective", prim.GetPath()


def test_a_rig_without_cameras_writes_no_render_settings(scene, tmp_path):
    import dataclasses

    rig = dict(scene.metadata["rig"], cameras=[])
    bare = dataclasses.replace(scene, camera_ids=[], exposure=scene.exposure[:0],
                               metadata={**scene.metadata, "rig": rig})
    out = usd_layers.export_usd(bare, tmp_path / "scene")
    stage = Usd.Stage.Open(str(out / "root.usda"))
    assert not UsdRender.Settings.GetStageRenderSettings(stage)
    assert not stage.GetPrimAtPath("/World/Render")
    assert stage.GetPrimAtPath(f"/World/Rig/{rig['lidars'][0]['id']}/OmniLidar")


def test_non_square_pixels_keep_the_product_and_camera_aspects_equal(scene, tmp_path):
    import copy
    import dataclasses

    rig = copy.deepcopy(scene.metadata["rig"])
    cam = next(c for c in rig["cameras"] if c["model"] == "pinhole")
    cam["intrinsics"]["fy"] = 1.25 * cam["intrinsics"]["fx"]
    out = usd_layers.export_usd(dataclasses.replace(scene, metadata={**scene.metadata, "rig": rig}), tmp_path / "s")
    stage = Usd.Stage.Open(str(out / "root.usda"))
    product = UsdRender.Product(stage.GetPrimAtPath(f"/World/Render/Products/{cam['id']}"))
    assert product.GetPixelAspectRatioAttr().Get() == pytest.approx(1.25)
    camera = UsdGeom.Camera(stage.GetPrimAtPath(f"/World/Rig/{cam['id']}"))
    aperture = camera.GetHorizontalApertureAttr().Get() / camera.GetVerticalApertureAttr().Get()
    assert cam["width"] * 1.25 / cam["height"] == pytest.approx(aperture, rel=1e-6)
