"""The NCore v4 importer: a round trip through ncore's own writer, and broken inputs.

The fixture writes the bundled ``samples/tiny`` capture as an NCore v4 sequence with the
``nvidia-ncore`` package's component writers (three stores: the default group, a poses
group and a lidar group), in NCore's conventions: its ``T_source_target`` pose keys, its
pixel-corner image origin (f-theta excepted), rows of the lidar model top to bottom, rays
as unit directions and distances. It is imported back and compared with the native
capture; the camera models are also checked against ncore's own projection. A variant
covers the fallbacks: a world that is not Z-up, an f-theta camera whose reference is the
backward polynomial, and a lidar without a model.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("ncore", reason="the NCore importer needs nvidia-ncore (pip install nvidia-ncore)")

from ncore.data import (  # noqa: E402
    BBox3,
    CuboidTrackObservation,
    FThetaCameraModelParameters,
    IdealPinholeCameraModelParameters,
    LabelSource,
    OpenCVFisheyeCameraModelParameters,
    OpenCVPinholeCameraModelParameters,
    RowOffsetStructuredSpinningLidarModelParameters,
    ShutterType,
)
from ncore.data.v4 import (  # noqa: E402
    CameraSensorComponent,
    CuboidsComponent,
    IntrinsicsComponent,
    LidarSensorComponent,
    MasksComponent,
    PosesComponent,
    SequenceComponentGroupsReader,
    SequenceComponentGroupsWriter,
)
from ncore.impl.common.transformations import HalfClosedInterval, pose_bbox  # noqa: E402
from ncore.sensors import camera_model_from_parameters  # noqa: E402
from upath import UPath  # noqa: E402

import importer_helpers as helpers  # noqa: E402
from importer_helpers import SAMPLE, assert_sweeps_land_alike, poses_at, private_cache_env  # noqa: E402
from nurec_usd.capture import Capture, CaptureError  # noqa: E402
from nurec_usd.capture.importers import detect_format, load_any  # noqa: E402
from nurec_usd.capture.importers import ncore as importer  # noqa: E402

BASE = "tiny"
SHUTTERS = {"global": "GLOBAL", "top_to_bottom": "ROLLING_TOP_TO_BOTTOM", "bottom_to_top": "ROLLING_BOTTOM_TO_TOP",
            "left_to_right": "ROLLING_LEFT_TO_RIGHT", "right_to_left": "ROLLING_RIGHT_TO_LEFT"}
EGO_ROWS = 20  # the front camera's ego mask covers its bottom rows
FISHEYE_MAX_ANGLE = math.radians(100.0)
# A world that is not Z-up (y up, as some pipelines write it): the importer must level it.
TILT = np.array([[1.0, 0, 0, 0], [0, 0, -1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])


native = helpers.native  # the fixture: the bundled sample, loaded natively
private_cache = helpers.private_cache  # autouse: converted sequences go to a test cache, never to ~/.cache


# --------------------------------------------------------------------------------------
# Writing samples/tiny with ncore's writer API


def _f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def ncore_camera_params(cam, ftheta_reference: str = "forward"):
    """Our camera as NCore camera model parameters (its conventions: pixel-corner origin but for f-theta)."""
    res = np.array([cam.width, cam.height], dtype=np.uint64)
    shutter = ShutterType[SHUTTERS[cam.rolling_shutter.direction]]
    i = cam.intrinsics
    corner = dict(principal_point=_f32(i["cx"] + 0.5, i["cy"] + 0.5), resolution=res, shutter_type=shutter)
    if cam.model == "pinhole":
        return IdealPinholeCameraModelParameters(**corner, focal_length=_f32(i["fx"], i["fy"]))
    if cam.model == "opencv":
        return OpenCVPinholeCameraModelParameters(
            **corner, focal_length=_f32(i["fx"], i["fy"]),
            radial_coeffs=_f32(*(i.get(k, 0.0) for k in ("k1", "k2", "k3", "k4", "k5", "k6"))),
            tangential_coeffs=_f32(i["p1"], i["p2"]), thin_prism_coeffs=np.zeros(4, dtype=np.float32))
    if cam.model == "opencv_fisheye":
        return OpenCVFisheyeCameraModelParameters(
            **corner, focal_length=_f32(i["fx"], i["fy"]), radial_coeffs=_f32(i["k1"], i["k2"], i["k3"], i["k4"]),
            max_angle=FISHEYE_MAX_ANGLE)
    assert cam.model == "ftheta"
    fw = np.array(i["angle_to_pixel"], dtype=np.float64)
    max_angle = math.radians(i["max_fov_deg"] / 2)
    theta = np.linspace(0.0, max_angle, 2000)
    rho = np.polynomial.polynomial.polyval(theta, fw)
    A = rho[:, None] ** np.arange(1, 6)[None, :]
    bw = np.concatenate([[0.0], np.linalg.lstsq(A, theta, rcond=None)[0]])  # an approximate inverse, as NCore stores
    poly = FThetaCameraModelParameters.PolynomialType
    return FThetaCameraModelParameters(
        resolution=res, shutter_type=shutter,
        principal_point=_f32(i["cx"], i["cy"]),  # NVIDIA's f-theta convention: pixel centres, no shift
        reference_poly=poly.ANGLE_TO_PIXELDIST if ftheta_reference == "forward" else poly.PIXELDIST_TO_ANGLE,
        pixeldist_to_angle_poly=bw.astype(np.float32), angle_to_pixeldist_poly=fw.astype(np.float32),
        max_angle=max_angle)


def write_ncore(native: Capture, out: Path, *, tilt: np.ndarray | None = None, lidar_model: bool = True,
                ftheta_reference: str = "forward") -> Path:
    """Write ``native`` as an NCore v4 sequence of three ``.zarr.itar`` stores in ``out``.

    The world is written un-centred (the native offset added back) and optionally rotated
    by ``tilt``. Lidar rays are the native points at their own firing times.
    """
    rig_us = native.rig.timestamps_us
    T_world_rig = native.rig.T_world_rig.copy()
    T_world_rig[:, :3, 3] += native.world_offset_m
    W = np.eye(4) if tilt is None else tilt
    T_world_rig = W @ T_world_rig
    writer = SequenceComponentGroupsWriter(
        output_dir_path=UPath(out), store_base_name=BASE, sequence_id="synth_tiny",
        sequence_timestamp_interval_us=HalfClosedInterval(int(rig_us[0]), int(rig_us[-1]) + 1),
        generic_meta_data={"written_by": "nurec_usd tests"}, store_type="itar")
    poses = writer.register_component_writer(PosesComponent.Writer, "default", group_name="poses")
    intrinsics = writer.register_component_writer(IntrinsicsComponent.Writer, "default")
    masks = writer.register_component_writer(MasksComponent.Writer, "default")
    cuboids = writer.register_component_writer(CuboidsComponent.Writer, "default")

    poses.store_dynamic_pose("rig", "world", T_world_rig, rig_us.astype(np.uint64))  # rig -> world
    for cam in native.cameras.values():
        if cam.id == "front_left":  # the other direction of the key, which readers must invert
            poses.store_static_pose("rig", cam.id, np.linalg.inv(cam.T_rig_camera))
        else:
            poses.store_static_pose(cam.id, "rig", cam.T_rig_camera)  # camera -> rig
        intrinsics.store_camera_intrinsics(cam.id, ncore_camera_params(cam, ftheta_reference))
        w = writer.register_component_writer(CameraSensorComponent.Writer, cam.id)
        for f in cam.frames:
            t = f.timestamp_us
            w.store_frame(f.image_path.read_bytes(), "png",
                          np.array([t, t + cam.rolling_shutter.readout_time_us], dtype=np.uint64), {}, {})
    ego = np.zeros((native.cameras["front"].height, native.cameras["front"].width), dtype=np.uint8)
    ego[-EGO_ROWS:] = 255  # NCore: non-zero marks the ego vehicle
    masks.store_camera_masks("front", {"ego": Image.fromarray(ego)})

    lid = native.lidars["top"]
    poses.store_static_pose(lid.id, "rig", lid.T_rig_lidar)
    C = lid.channels
    if lidar_model:
        # NCore wants rows top to bottom (descending elevation): row = C - 1 - channel
        az = np.radians(lid.start_azimuth_deg - 360.0 * np.arange(lid.columns) / lid.columns)  # clockwise
        intrinsics.store_lidar_intrinsics(lid.id, RowOffsetStructuredSpinningLidarModelParameters(
            spinning_frequency_hz=lid.scan_rate_hz, spinning_direction="cw", n_rows=C, n_columns=lid.columns,
            row_elevations_rad=np.radians(lid.elevation_deg[::-1]).astype(np.float32),
            column_azimuths_rad=(np.mod(az + np.pi, 2 * np.pi) - np.pi).astype(np.float32),
            row_azimuth_offsets_rad=np.radians(lid.azimuth_offset_deg[::-1]).astype(np.float32)))
    w = writer.register_component_writer(LidarSensorComponent.Writer, lid.id, group_name=lid.id)
    for k, s in enumerate(lid.sweeps):
        sweep = lid.load_sweep(k)
        p = sweep.points.astype(np.float64)
        dist = np.linalg.norm(p, axis=1)
        column = np.round((sweep.timestamps_us - s.timestamp_us) * 1e-6 * lid.columns * lid.scan_rate_hz)
        element = np.stack([C - 1 - sweep.channel, column.astype(np.int64) % lid.columns], axis=1).astype(np.uint16)
        w.store_frame(direction=(p / dist[:, None]).astype(np.float32),
                      timestamp_us=sweep.timestamps_us.astype(np.uint64),
                      model_element=element if lidar_model else None, distance_m=dist[None].astype(np.float32),
                      intensity=sweep.intensity[None].astype(np.float32),
                      frame_timestamps_us=np.array([s.timestamp_us, s.timestamp_us + lid.sweep_duration_us],
                                                   dtype=np.uint64),
                      generic_data={}, generic_meta_data={})

    observations = []
    for n, track in enumerate(native.tracks.values()):
        for t, T in zip(track.timestamps_us, track.T_world_box):
            T = T.copy()
            T[:3, 3] += native.world_offset_m
            T = W @ T
            if n == 0:  # a box in the world frame
                ref = "world"
            else:  # a box in the lidar frame at the box's time
                ref = lid.id
                T = np.linalg.inv(poses_at(rig_us, T_world_rig, t) @ lid.T_rig_lidar) @ T
            bbox = BBox3.from_array(pose_bbox(T, np.asarray(track.size_m, dtype=np.float64)))
            observations.append(CuboidTrackObservation(
                track_id=track.id, class_id="car" if n == 0 else "automobile", timestamp_us=int(t),
                reference_frame_id=ref, reference_frame_timestamp_us=int(t), bbox3=bbox,
                source=LabelSource.GT_SYNTHETIC))
    cuboids.store_observations(observations)
    writer.finalize()
    return out


@pytest.fixture(scope="module")
def sequence(native, tmp_path_factory) -> Path:
    """``samples/tiny`` as an NCore v4 sequence folder. Do not modify it."""
    return write_ncore(native, tmp_path_factory.mktemp("ncore") / "tiny_ncore")


@pytest.fixture
def sequence_copy(sequence, tmp_path) -> Path:
    dst = tmp_path / "seq"
    shutil.copytree(sequence, dst)
    return dst


def _load(path: Path, tmp_path_factory) -> tuple[Capture, list[str]]:
    with private_cache_env(tmp_path_factory), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture = load_any(path)
    return capture, [str(w.message) for w in caught if issubclass(w.category, importer.NCoreWarning)]


@pytest.fixture(scope="module")
def imported(sequence, tmp_path_factory) -> Capture:
    return _load(sequence, tmp_path_factory)[0]


@pytest.fixture(scope="module")
def variant(native, tmp_path_factory) -> tuple[Capture, list[str]]:
    """Tilted world, backward-referenced f-theta, lidar without a model: imported with its warnings."""
    out = write_ncore(native, tmp_path_factory.mktemp("ncore_variant") / "seq", tilt=TILT, lidar_model=False,
                      ftheta_reference="backward")
    return _load(out, tmp_path_factory)


# --------------------------------------------------------------------------------------
# The round trip


def _write_meta_json(stores: list[Path], path: Path) -> Path:
    """The sequence meta json ncore's reader describes the stores with (paths relative to the json)."""
    path.write_text(json.dumps(SequenceComponentGroupsReader(stores).get_sequence_meta().to_dict()))
    return path


def test_detects_folders_stores_and_meta_json(sequence, tmp_path):
    stores = sorted(p.name for p in sequence.iterdir())
    assert stores == [f"{BASE}.ncore4-poses.zarr.itar", f"{BASE}.ncore4-top.zarr.itar", f"{BASE}.ncore4.zarr.itar"]
    meta = _write_meta_json([sequence / s for s in stores], tmp_path / "tiny.json")
    for path in (sequence, sequence / stores[0], meta):
        assert importer.detect(path), path
    assert detect_format(sequence) == "ncore"
    assert not importer.detect(SAMPLE) and not importer.detect(SAMPLE / "capture.json")
    (tmp_path / "other.json").write_text('{"version": "v3"}')
    assert not importer.detect(tmp_path / "other.json") and not importer.detect(tmp_path)


def test_loads_through_the_meta_json_and_a_store_file(sequence_copy, imported, tmp_path_factory):
    meta = _write_meta_json(sorted(sequence_copy.iterdir()), sequence_copy / "tiny.json")
    for path in (meta, sequence_copy / f"{BASE}.ncore4-top.zarr.itar"):
        cap = _load(path, tmp_path_factory)[0]
        assert set(cap.cameras) == set(imported.cameras) and set(cap.lidars) == {"top"}
        np.testing.assert_allclose(cap.rig.T_world_rig, imported.rig.T_world_rig, atol=1e-12)


def test_round_trip_poses_and_intrinsics(native, imported):
    assert imported.name == "synth_tiny" and imported.metadata["source"] == "ncore"
    assert imported.metadata["warnings"] == []
    assert set(imported.cameras) == set(native.cameras) and set(imported.lidars) == {"top"}
    np.testing.assert_allclose(imported.world_offset_m, native.world_offset_m, atol=1e-6)
    np.testing.assert_array_equal(imported.rig.timestamps_us, native.rig.timestamps_us)
    np.testing.assert_allclose(imported.rig.T_world_rig, native.rig.T_world_rig, atol=1e-9)
    for name, a in native.cameras.items():
        b = imported.cameras[name]
        assert b.model == a.model and (b.width, b.height) == (a.width, a.height)
        assert b.rolling_shutter == a.rolling_shutter
        np.testing.assert_allclose(b.T_rig_camera, a.T_rig_camera, atol=1e-12)
        np.testing.assert_array_equal(b.timestamps_us, a.timestamps_us)
        # intrinsics went through NCore's float32: pixels to 1e-4, coefficients to 1e-6 relative
        assert set(b.intrinsics) >= set(a.intrinsics)
        for key, value in a.intrinsics.items():
            got = b.intrinsics[key]
            if key in ("cx", "cy"):
                assert got == pytest.approx(value, abs=1e-4), (name, key)
            elif key == "max_fov_deg":
                assert got == pytest.approx(value, abs=1e-4)
            else:
                assert np.allclose(got, value, rtol=1e-6, atol=1e-9), (name, key, got, value)
        assert all(b.intrinsics[k] == 0.0 for k in set(b.intrinsics) - set(a.intrinsics))
        # the images are the ones written, byte for byte
        for fa, fb in zip(a.frames, b.frames):
            assert fb.image_path.read_bytes() == fa.image_path.read_bytes()
    np.testing.assert_allclose(imported.lidars["top"].T_rig_lidar, native.lidars["top"].T_rig_lidar, atol=1e-12)


def test_ego_mask_becomes_a_mask_of_pixels_to_use(imported):
    front = imported.cameras["front"]
    mask = front.frames[3].load_mask()
    assert mask.shape == (front.height, front.width)
    assert not mask[-EGO_ROWS:].any() and mask[:-EGO_ROWS].all()
    assert all(f.mask_path is None for f in imported.cameras["front_left"].frames)


@pytest.mark.parametrize("name", ["front", "front_left", "rear_fisheye", "right_ftheta"])
def test_camera_models_agree_with_ncores_own_projection(native, imported, name):
    """Rays through a grid of native pixels: ncore's model (pixel-corner origin) and the imported one agree."""
    cam_n, cam_i = native.cameras[name], imported.cameras[name]
    u, v = np.meshgrid(np.linspace(0, cam_n.width - 1, 17), np.linspace(0, cam_n.height - 1, 11))
    uv = torch.from_numpy(np.stack([u.ravel(), v.ravel()], axis=1))
    rays = cam_n.sensor_model(dtype=torch.float64).unproject(uv)
    nc = camera_model_from_parameters(ncore_camera_params(cam_n), device="cpu", dtype=torch.float64)
    res = nc.camera_rays_to_image_points(rays)
    uv_nc = res.image_points.numpy() - 0.5  # NCore's image origin: the top-left pixel's corner
    uv_i, ok = cam_i.sensor_model(dtype=torch.float64).project(rays)
    # ncore's opencv model only trusts radial distortion factors in (0.8, 1.2): the corners of
    # this strongly distorted lens fall outside that, so only ~70 % of the grid is compared there
    ok = ok.numpy() & res.valid_flag.numpy()
    assert ok.sum() >= 0.6 * len(uv)
    np.testing.assert_allclose(uv_i.numpy()[ok], uv_nc[ok], atol=1e-6)
    np.testing.assert_allclose(uv_i.numpy()[ok], uv.numpy()[ok], atol=2e-3)  # float32 intrinsics


def test_lidar_points_land_on_the_same_pixels(native, imported):
    assert_sweeps_land_alike(native, imported, ("front", "front"), ("top", "top"), atol=1e-3)
    assert_sweeps_land_alike(native, imported, ("right_ftheta", "right_ftheta"), ("top", "top"), atol=1e-3)


def test_round_trip_lidar_model_and_sweeps(native, imported):
    lid_n, lid_i = native.lidars["top"], imported.lidars["top"]
    assert imported.metadata["lidar_models"]["top"]["method"] == "ncore-model"
    # NCore's rows run top to bottom: the table comes back reversed
    np.testing.assert_allclose(lid_i.elevation_deg, lid_n.elevation_deg[::-1], atol=1e-5)
    np.testing.assert_allclose(lid_i.azimuth_offset_deg, lid_n.azimuth_offset_deg[::-1], atol=1e-5)
    assert (lid_i.columns, lid_i.rotation) == (lid_n.columns, lid_n.rotation)
    assert lid_i.scan_rate_hz == pytest.approx(lid_n.scan_rate_hz)
    assert (lid_i.start_azimuth_deg - lid_n.start_azimuth_deg) % 360.0 == pytest.approx(0.0, abs=1e-4) or \
        (lid_i.start_azimuth_deg - lid_n.start_azimuth_deg) % 360.0 == pytest.approx(360.0, abs=1e-4)
    np.testing.assert_array_equal(lid_i.timestamps_us, lid_n.timestamps_us)
    for k in (0, 5, 9):
        a, b = lid_n.load_sweep(k), lid_i.load_sweep(k)
        np.testing.assert_array_equal(b.timestamps_us, a.timestamps_us)
        np.testing.assert_allclose(b.points, a.points, atol=2e-5)
        np.testing.assert_array_equal(b.intensity, a.intensity)
        np.testing.assert_allclose(lid_i.elevation_deg[b.channel], lid_n.elevation_deg[a.channel], atol=1e-5)
        r = np.linalg.norm(b.points, axis=1)
        assert lid_i.min_range_m <= r.min() and r.max() <= lid_i.max_range_m


def test_round_trip_tracks(native, imported):
    assert set(imported.tracks) == set(native.tracks)
    for tid, a in native.tracks.items():
        b = imported.tracks[tid]
        assert b.label == a.label == "car"  # "automobile" is mapped
        np.testing.assert_allclose(b.size_m, a.size_m, atol=1e-12)
        np.testing.assert_array_equal(b.timestamps_us, a.timestamps_us)
        np.testing.assert_allclose(b.T_world_box, a.T_world_box, atol=1e-6)


def test_conversion_is_cached(sequence, imported, tmp_path_factory):
    manifest = imported.root / "capture.json"
    before = manifest.stat().st_mtime_ns
    again = _load(sequence, tmp_path_factory)[0]
    assert again.root == imported.root and manifest.stat().st_mtime_ns == before


# --------------------------------------------------------------------------------------
# Fallbacks: a tilted world, a backward f-theta reference, a lidar without a model


def test_tilted_world_is_levelled(native, variant):
    cap, caught = variant
    assert any("rotated to be Z-up" in w for w in caught)
    # the levelled rig trajectory is the native one (the tilt undone), up to where it sits
    np.testing.assert_allclose(cap.rig.T_world_rig[:, :3, :3], native.rig.T_world_rig[:, :3, :3], atol=1e-9)
    np.testing.assert_allclose(cap.rig.T_world_rig[:, :3, 3], native.rig.T_world_rig[:, :3, 3], atol=1e-6)
    for tid, a in native.tracks.items():
        np.testing.assert_allclose(cap.tracks[tid].T_world_box, a.T_world_box, atol=1e-6)


def test_backward_ftheta_reference_is_fitted(native, variant):
    cap, _ = variant
    notes = cap.metadata["ncore"]["cameras"]["right_ftheta"]
    assert notes["reference_poly"] == "PIXELDIST_TO_ANGLE" and notes["forward_fit_error_px"] < 0.05
    cam_n, cam_i = native.cameras["right_ftheta"], cap.cameras["right_ftheta"]
    u, v = np.meshgrid(np.linspace(0, cam_n.width - 1, 17), np.linspace(0, cam_n.height - 1, 11))
    uv = torch.from_numpy(np.stack([u.ravel(), v.ravel()], axis=1))
    model_n = cam_n.sensor_model(dtype=torch.float64)
    rays = model_n.unproject(uv)
    # the image corners lie beyond the lens's 100 degrees: only pixels that round-trip natively count
    inside = (model_n.project(rays)[0] - uv).abs().amax(dim=-1).numpy() < 1e-6
    assert inside.sum() > 0.7 * len(uv)
    uv_i, ok = cam_i.sensor_model(dtype=torch.float64).project(rays)
    assert ok.numpy()[inside].all()
    np.testing.assert_allclose(uv_i.numpy()[inside], uv.numpy()[inside], atol=0.05)


def test_lidar_without_a_model_gets_an_estimated_one(native, variant):
    cap, _ = variant
    lid_n, lid_i = native.lidars["top"], cap.lidars["top"]
    info = cap.metadata["lidar_models"]["top"]
    assert info["method"] == "rings", info
    # every native ring is found (azimuth offsets of +-0.4 deg do not move elevations)
    gaps = np.abs(lid_n.elevation_deg[:, None] - lid_i.elevation_deg[None, :]).min(axis=1)
    assert gaps.max() < 0.05, gaps
    assert lid_i.rotation == "clockwise"
    assert lid_i.scan_rate_hz == pytest.approx(lid_n.scan_rate_hz)
    assert abs(lid_i.columns - lid_n.columns) <= 0.05 * lid_n.columns
    assert abs((lid_i.start_azimuth_deg - lid_n.start_azimuth_deg + 180) % 360 - 180) < 5.0
    assert_sweeps_land_alike(native, cap, ("front", "front"), ("top", "top"), atol=1e-3)
    sweep = lid_i.load_sweep(2)
    el = np.degrees(np.arctan2(sweep.points[:, 2], np.hypot(sweep.points[:, 0], sweep.points[:, 1])))
    assert np.abs(el - lid_i.elevation_deg[sweep.channel]).max() < 0.2


# --------------------------------------------------------------------------------------
# Broken inputs


def test_garbage_store_names_the_file(tmp_path):
    bad = tmp_path / "junk.ncore4.zarr.itar"
    bad.write_bytes(b"this is not an indexed tar file" * 10)
    assert importer.detect(tmp_path)
    with pytest.raises(CaptureError) as err:
        importer.load(tmp_path)
    (problem,) = err.value.problems
    assert problem.file == bad.name and "cannot open" in problem.message


def test_truncated_store_names_the_file(sequence_copy):
    store = sequence_copy / f"{BASE}.ncore4-top.zarr.itar"
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 2])
    with pytest.raises(CaptureError) as err:
        importer.load(sequence_copy)
    assert {p.file for p in err.value.problems} == {store.name}


def test_damaged_frames_name_the_file_and_frame(sequence_copy):
    store = sequence_copy / f"{BASE}.ncore4-top.zarr.itar"
    data = bytearray(store.read_bytes())
    data[len(data) // 3: len(data) // 3 + 200_000] = b"\x5a" * 200_000
    store.write_bytes(bytes(data))
    with pytest.raises(CaptureError) as err:
        importer.load(sequence_copy)
    assert {p.file for p in err.value.problems} == {store.name}
    assert all(p.field.startswith("lidars/top.frames[") for p in err.value.problems), err.value


def test_missing_poses_are_reported(sequence_copy):
    (sequence_copy / f"{BASE}.ncore4-poses.zarr.itar").unlink()
    with pytest.raises(CaptureError) as err:
        importer.load(sequence_copy)
    (problem,) = err.value.problems
    assert problem.field == "poses" and "no poses component" in problem.message
    assert f"{BASE}.ncore4.zarr.itar" in problem.file


def test_meta_json_with_a_missing_store_names_the_field(sequence_copy):
    meta = sequence_copy / "seq.json"
    meta.write_text(json.dumps({"version": "v4", "component_stores": [
        {"path": f"{BASE}.ncore4.zarr.itar"}, {"path": "gone.ncore4-x.zarr.itar"}]}))
    with pytest.raises(CaptureError) as err:
        importer.load(meta)
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == ("seq.json", "component_stores[1].path")


def test_unrepresentable_camera_models_are_refused(native):
    params = ncore_camera_params(native.cameras["right_ftheta"])
    params.linear_cde = np.array([1.02, 0.001, 0.0], dtype=np.float32)
    with pytest.raises(importer.FieldError) as err:
        importer.camera_intrinsics(params, "cams.right_ftheta")
    assert err.value.field == "cams.right_ftheta.linear_cde"
    params = ncore_camera_params(native.cameras["front_left"])
    params.thin_prism_coeffs = np.array([1e-3, 0, 0, 0], dtype=np.float32)
    with pytest.raises(importer.FieldError, match="thin-prism"):
        importer.camera_intrinsics(params, "cams.front_left")


def test_missing_package_says_how_to_install(sequence, monkeypatch):
    for name in ("ncore", "ncore.data", "ncore.data.v4"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(CaptureError) as err:
        importer.load(sequence)
    assert "pip install nvidia-ncore" in str(err.value) and "nurec_usd[ncore]" in str(err.value)


def test_euler_convention_matches_ncore():
    from ncore.impl.common.transformations import bbox_pose

    rng = np.random.default_rng(0)
    for _ in range(5):
        bbox = np.concatenate([rng.normal(size=3), [4.0, 2.0, 1.5], rng.uniform(-3, 3, size=3)])
        np.testing.assert_allclose(importer.euler_xyz_to_matrix(bbox[6:9]), bbox_pose(bbox)[:3, :3], atol=1e-12)


@pytest.mark.parametrize("name, words", [
    ("../outside.ncore4-poses.zarr.itar", "leaves the capture directory ('..')"),
    ("/tmp/x.ncore4-poses.zarr.itar", "is absolute"),
    ("link.ncore4-poses.zarr.itar", "resolves outside the capture directory"),
])
def test_meta_json_stores_are_confined_to_its_folder(sequence_copy, tmp_path, name, words):
    poses = sequence_copy / f"{BASE}.ncore4-poses.zarr.itar"
    shutil.move(poses, tmp_path / poses.name)
    (sequence_copy / "link.ncore4-poses.zarr.itar").symlink_to(tmp_path / poses.name)
    meta = sequence_copy / "seq.json"
    meta.write_text(json.dumps({"version": "v4", "component_stores": [
        {"path": f"{BASE}.ncore4.zarr.itar"}, {"path": name}, {"path": f"{BASE}.ncore4-top.zarr.itar"}]}))
    with pytest.raises(CaptureError) as err:
        importer.load(meta)
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == ("seq.json", "component_stores[1].path") and words in problem.message


def test_symlinked_store_out_of_the_folder_is_refused(sequence_copy, tmp_path):
    store = sequence_copy / f"{BASE}.ncore4-top.zarr.itar"
    shutil.move(store, tmp_path / store.name)
    store.symlink_to(tmp_path / store.name)
    for path in (sequence_copy, sequence_copy / f"{BASE}.ncore4.zarr.itar"):
        with pytest.raises(CaptureError) as err:
            importer.load(path)
        (problem,) = err.value.problems
        assert problem.file == store.name and "resolves outside the capture directory" in problem.message
