"""The DGP importer: a synthetic round trip, the real TRI sample, and broken inputs.

The round trip writes the bundled ``samples/tiny`` capture in DGP's layout and conventions
(only what the importer reads), imports it back, and compares with the native capture:
poses, intrinsics, boxes, and -- the point of it all -- that lidar points land on the
same pixels. The real sample checks the importer against data DGP's own tools wrote.
"""

from __future__ import annotations

import json
import shutil
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import importer_helpers as helpers
from conftest import shared_data_dir
from importer_helpers import SAMPLE, assert_sweeps_land_alike, load_private, poses_at, private_cache_env
from nurec_usd.capture import Capture, CaptureError, capture_summary, format_summary
from nurec_usd.capture.importers import detect_format, dgp, load_any, sweep_cache
from nurec_usd.sensors import matrix_to_quat

DGP_CAMERAS = ("front", "front_left")  # the pinhole and opencv cameras: DGP has no fisheye / f-theta
CALIBRATION_KEY = "c0ffee"
ONTOLOGY_KEY = "0b1ec7"
SCENE_JSON = "scene_0123abcd.json"
CLASSES = {"car": (2, "Car"), "pedestrian": (0, "Person")}

native = helpers.native  # the fixture: the bundled sample, loaded natively
private_cache = helpers.private_cache  # autouse: converted sweeps go to a test cache, never to ~/.cache


# --------------------------------------------------------------------------------------
# Writing a capture in DGP's layout


def _timestamp(t_us: int) -> str:
    """Microseconds since the epoch as protobuf json writes a Timestamp."""
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=int(t_us))
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _pose(T: np.ndarray) -> dict:
    """A 4x4 transform as a DGP Pose (quaternion w, x, y, z)."""
    q = matrix_to_quat(torch.from_numpy(np.ascontiguousarray(T[:3, :3]))).numpy()
    return {"rotation": {"qw": float(q[0]), "qx": float(q[1]), "qy": float(q[2]), "qz": float(q[3])},
            "translation": {"x": float(T[0, 3]), "y": float(T[1, 3]), "z": float(T[2, 3])}}


def write_dgp(native: Capture, out: Path) -> Path:
    """Write ``native`` as a DGP dataset under ``out``; returns the dataset json.

    World coordinates are written un-centred (the native offset added back), as a log's
    local frame would be. Lidar points are written the way DGP holds them: in the lidar
    frame at the sweep's timestamp, i.e. motion-compensated from each point's own firing
    time with the rig trajectory.
    """
    scene_dir = out / "scene_000"
    (scene_dir / "calibration").mkdir(parents=True)
    (scene_dir / "ontology").mkdir()
    rig_us, rig_T = native.rig.timestamps_us, native.rig.T_world_rig.copy()
    rig_T[:, :3, 3] += native.world_offset_m
    lidar = next(iter(native.lidars.values()))
    cams = [native.cameras[c] for c in DGP_CAMERAS]

    names = [lidar.id.upper()] + [c.id.upper() for c in cams]
    intrinsics = [{"fx": 0.0, "fy": 0.0, "cx": 0.0, "cy": 0.0, "skew": 0.0}]
    for cam in cams:
        intr = {k: float(v) for k, v in cam.intrinsics.items()}
        intr.update(skew=0.0, fisheye=0)
        intrinsics.append(intr)
    extrinsics = [_pose(lidar.T_rig_lidar)] + [_pose(c.T_rig_camera) for c in cams]
    (scene_dir / "calibration" / f"{CALIBRATION_KEY}.json").write_text(
        json.dumps({"names": names, "intrinsics": intrinsics, "extrinsics": extrinsics}))
    (scene_dir / "ontology" / f"{ONTOLOGY_KEY}.json").write_text(json.dumps(
        {"items": [{"id": cid, "name": name, "isthing": True} for cid, name in CLASSES.values()]}))

    data, samples = [], {}

    def add_datum(name: str, t_us: int, kind: str, body: dict) -> None:
        key = f"{name}-{t_us}"
        data.append({"id": {"name": name, "timestamp": _timestamp(t_us), "log": "synth", "index": "0"},
                     "key": key, "datum": {kind: body}})
        samples.setdefault(t_us, []).append(key)

    for cam, name in zip(cams, names[1:]):
        (scene_dir / "rgb" / name).mkdir(parents=True)
        poses = poses_at(rig_us, rig_T, cam.timestamps_us) @ cam.T_rig_camera
        for frame, T in zip(cam.frames, poses):
            rel = f"rgb/{name}/{frame.timestamp_us}{frame.image_path.suffix}"
            shutil.copyfile(frame.image_path, scene_dir / rel)
            add_datum(name, frame.timestamp_us, "image",
                      {"filename": rel, "width": cam.width, "height": cam.height, "channels": 3, "pose": _pose(T),
                       "annotations": {}})

    for d in ("point_cloud", "bounding_box_3d"):
        (scene_dir / d / names[0]).mkdir(parents=True)
    instance = {tid: 1000 + i for i, tid in enumerate(native.tracks)}
    for i, sweep_file in enumerate(lidar.sweeps):
        ts = sweep_file.timestamp_us
        sweep = lidar.load_sweep(i)
        T_w_l_at_ts = poses_at(rig_us, rig_T, ts) @ lidar.T_rig_lidar
        times, per_point = np.unique(sweep.timestamps_us, return_inverse=True)  # one per column
        T_w_l = poses_at(rig_us, rig_T, times) @ lidar.T_rig_lidar
        T = (np.linalg.inv(T_w_l_at_ts) @ T_w_l)[per_point]  # [N, 4, 4]: each point's firing pose
        p = sweep.points.astype(np.float64)
        p_ts = np.einsum("nij,nj->ni", T[:, :3, :3], p) + T[:, :3, 3]
        rel = f"point_cloud/{names[0]}/{ts}.npz"
        np.savez_compressed(scene_dir / rel, data=np.column_stack([p_ts, sweep.intensity]))
        boxes = []
        for tid, track in native.tracks.items():
            if not track.timestamps_us[0] <= ts <= track.timestamps_us[-1]:
                continue
            key_T = track.T_world_box.copy()
            key_T[:, :3, 3] += native.world_offset_m
            T_l_box = np.linalg.inv(T_w_l_at_ts) @ poses_at(track.timestamps_us, key_T, ts)
            L, W, H = track.size_m
            boxes.append({"class_id": CLASSES[track.label][0], "instance_id": instance[tid], "num_points": 0,
                          "attributes": {}, "box": {"pose": _pose(T_l_box), "length": float(L), "width": float(W),
                                                    "height": float(H), "occlusion": 0, "truncation": 0.0}})
        box_rel = f"bounding_box_3d/{names[0]}/{ts}.json"
        (scene_dir / box_rel).write_text(json.dumps({"annotations": boxes}))
        add_datum(names[0], ts, "point_cloud",
                  {"filename": rel, "point_format": ["X", "Y", "Z", "INTENSITY"], "point_fields": [],
                   "pose": _pose(T_w_l_at_ts), "annotations": {"1": box_rel}})

    scene = {"name": "", "log": "synth", "description": "samples/tiny in DGP's layout",
             "ontologies": {"1": ONTOLOGY_KEY}, "data": data,
             "samples": [{"calibration_key": CALIBRATION_KEY, "datum_keys": keys,
                          "id": {"timestamp": _timestamp(t)}} for t, keys in sorted(samples.items())]}
    (scene_dir / SCENE_JSON).write_text(json.dumps(scene, indent=1))
    dataset = out / "scene_dataset_v1.0.json"
    dataset.write_text(json.dumps({"metadata": {"name": "tiny"},
                                   "scene_splits": {"0": {"filenames": [f"scene_000/{SCENE_JSON}"]}}}))
    return dataset


@pytest.fixture(scope="module")
def dgp_dataset(native, tmp_path_factory) -> Path:
    """``samples/tiny`` written as a DGP dataset (its json). Do not modify it."""
    return write_dgp(native, tmp_path_factory.mktemp("dgp") / "tiny_dgp")


@pytest.fixture
def dgp_copy(dgp_dataset, tmp_path) -> Path:
    """A private copy of the DGP dataset that a test may break; returns its scene folder."""
    dst = tmp_path / "dgp"
    shutil.copytree(dgp_dataset.parent, dst)
    return dst / "scene_000"


@pytest.fixture(scope="module")
def imported(dgp_dataset, tmp_path_factory) -> Capture:
    return load_private(dgp_dataset, tmp_path_factory)


# --------------------------------------------------------------------------------------
# (a) the synthetic round trip


def test_detects_datasets_and_scenes(dgp_dataset):
    scene_dir = dgp_dataset.parent / "scene_000"
    for path in (dgp_dataset, dgp_dataset.parent, scene_dir, scene_dir / SCENE_JSON):
        assert dgp.detect(path), path
        assert detect_format(path) == "dgp"
    assert not dgp.detect(SAMPLE)
    assert not dgp.detect(scene_dir / "calibration")


def test_round_trip_poses_and_intrinsics(native, imported):
    assert set(imported.cameras) == {c.upper() for c in DGP_CAMERAS} and set(imported.lidars) == {"TOP"}
    # The rig keys are the datum times (all of them the native capture's sweep and frame times);
    # at each, the vehicle pose is the native one, in the same (un-centred) world.
    np.testing.assert_allclose(imported.world_offset_m, native.world_offset_m, atol=1e-6)
    expected = poses_at(native.rig.timestamps_us, native.rig.T_world_rig, imported.rig.timestamps_us)
    np.testing.assert_allclose(imported.rig.T_world_rig, expected, atol=1e-6)
    for name in DGP_CAMERAS:
        a, b = native.cameras[name], imported.cameras[name.upper()]
        assert b.model == a.model and (b.width, b.height) == (a.width, a.height)
        assert b.intrinsics == pytest.approx(a.intrinsics, rel=1e-12)
        np.testing.assert_allclose(b.T_rig_camera, a.T_rig_camera, atol=1e-9)
        np.testing.assert_array_equal(b.timestamps_us, a.timestamps_us)
        assert b.rolling_shutter.direction == "global"  # DGP has no readout model
    np.testing.assert_allclose(imported.lidars["TOP"].T_rig_lidar, native.lidars["top"].T_rig_lidar, atol=1e-9)
    assert imported.metadata["source"] == "dgp" and imported.metadata["warnings"] == []


def test_round_trip_tracks_keep_box_conventions(native, imported):
    by_instance = {f"{1000 + i}": tid for i, tid in enumerate(native.tracks)}
    assert set(imported.tracks) == set(by_instance)
    for iid, tid in by_instance.items():
        a, b = native.tracks[tid], imported.tracks[iid]
        assert b.label == a.label
        np.testing.assert_allclose(b.size_m, a.size_m)  # length, width, height: not DGP's (W, L, H) order
        assert np.all(np.diff(b.timestamps_us) > 0)
        expected = poses_at(a.timestamps_us, a.T_world_box, b.timestamps_us)
        np.testing.assert_allclose(b.T_world_box, expected, atol=1e-6)


def test_lidar_points_land_on_the_same_pixels(native, imported):
    """Each sweep into the pinhole camera at the same time: the native points at their own
    firing times, the imported ones (all at the sweep time) through the imported poses."""
    assert_sweeps_land_alike(native, imported, ("front", "FRONT"), ("top", "TOP"), atol=0.02)


def test_round_trip_lidar_model_and_sweeps(native, imported):
    lid_n, lid_i = native.lidars["top"], imported.lidars["TOP"]
    # DGP's points are motion-compensated to the sweep time, which smears the rings of this
    # fast-moving synthetic lidar: the table falls back to elevation quantiles.
    assert imported.metadata["lidar_models"]["TOP"]["method"] in ("rings", "elevation-quantiles")
    # (compensating up to 0.8 m of travel tilts near ground points by a few degrees)
    assert lid_i.elevation_deg.min() >= lid_n.elevation_deg.min() - 5.0
    assert lid_i.elevation_deg.max() <= lid_n.elevation_deg.max() + 5.0
    assert lid_i.scan_rate_hz == pytest.approx(lid_n.scan_rate_hz)
    np.testing.assert_array_equal(lid_i.timestamps_us, lid_n.timestamps_us)
    sweep_n, sweep_i = lid_n.load_sweep(3), lid_i.load_sweep(3)
    assert len(sweep_i) == len(sweep_n)
    assert np.all(sweep_i.timestamps_us == lid_i.sweeps[3].timestamp_us)  # every point at the sweep time
    np.testing.assert_allclose(sweep_i.intensity, sweep_n.intensity, atol=1e-6)
    # each point's channel is the one of nearest elevation
    el = np.degrees(np.arctan2(sweep_i.points[:, 2], np.hypot(sweep_i.points[:, 0], sweep_i.points[:, 1])))
    gap = np.abs(el - lid_i.elevation_deg[sweep_i.channel])
    assert np.all(gap <= np.abs(el[:, None] - lid_i.elevation_deg[None, :]).min(axis=1) + 1e-3)
    r = np.linalg.norm(sweep_i.points, axis=1)
    assert lid_i.min_range_m <= r.min() and r.max() <= lid_i.max_range_m
    assert lid_i.sensor_model().channels == lid_i.channels  # a valid spinning model


def test_channel_table_finds_the_rings_of_a_spinning_lidar(native):
    """Points seen from the lidar at their own firing times sit on its rings: the estimate
    recovers the native table; points without rings get evenly filled quantiles."""
    lidar = native.lidars["top"]
    p = np.concatenate([lidar.load_sweep(i).points for i in range(4)]).astype(np.float64)
    rho = np.hypot(p[:, 0], p[:, 1])
    el_deg = np.degrees(np.arctan2(p[:, 2], rho))
    table, method = sweep_cache.estimate_channel_table(el_deg, np.hypot(rho, p[:, 2]))
    assert method == "rings"
    np.testing.assert_allclose(table, np.sort(lidar.elevation_deg), atol=0.01)
    rng = np.random.default_rng(0)
    el = rng.normal(2.0, 4.0, 50_000)
    table, method = sweep_cache.estimate_channel_table(el, rng.uniform(1, 80, len(el)))
    assert method == "elevation-quantiles" and len(table) == sweep_cache.QUANTILE_CHANNELS
    counts = np.bincount(np.abs(el[:, None] - table[None, :]).argmin(axis=1), minlength=len(table))
    assert counts.min() > 0.4 * counts.mean()  # channels are dense where the points are


def _merged_cloud(ground_z: float, seed: int = 0) -> np.ndarray:
    """A cloud as several sensors see a street, in a frame whose ground is at ``ground_z``: road
    out to 40 m and two facades 12 m either side. ``[N, 4]`` XYZ + intensity."""
    rng = np.random.default_rng(seed)
    r, az = np.sqrt(rng.uniform(2.0**2, 40.0**2, 30_000)), rng.uniform(-np.pi, np.pi, 30_000)
    road = np.column_stack([r * np.cos(az), r * np.sin(az), np.full(len(r), ground_z)])
    x, z = rng.uniform(-30, 30, 10_000), rng.uniform(ground_z, ground_z + 8.0, 10_000)
    walls = np.column_stack([x, np.where(rng.random(len(x)) < 0.5, -12.0, 12.0), z])
    xyz = np.concatenate([road, walls])
    return np.column_stack([xyz, rng.uniform(0, 1, len(xyz))])


@pytest.mark.parametrize("ground_z, raised", [(0.05, True), (-1.8, False)])
def test_a_cloud_whose_origin_is_on_the_road_is_seen_from_above_it(tmp_path, ground_z, raised):
    """Points in a frame whose origin lies on the road (DDAD's merged clouds) get a model origin
    the cameras' height above the road, and are re-expressed from it: the same points in the rig,
    the road spread over many channels instead of piled at elevation 0. A cloud seen from a
    roof-mounted lidar (the road 1.8 m below) keeps its origin."""
    inputs = []
    for i in range(3):
        path = tmp_path / f"{i}.npz"
        np.savez(path, data=_merged_cloud(ground_z, seed=i))
        inputs.append(dgp._SweepInput(1_000_000 + 100_000 * i, path, path.name, ("X", "Y", "Z", "INTENSITY")))
    spec = dgp.convert_sweeps("LIDAR", inputs, sensor_height_m=1.4)
    lidar, info = sweep_cache.lidar_from_spec(spec, "LIDAR", np.eye(4))
    origin = lidar.T_rig_lidar[:3, 3]
    if raised:
        # the ground's estimate is the road's height exactly here (its 5th percentile)
        np.testing.assert_allclose(origin, [0.0, 0.0, ground_z + 1.4], atol=1e-6)
        assert "origin raised" in info["note"]
    else:
        np.testing.assert_array_equal(origin, 0.0)
    np.testing.assert_array_equal(lidar.T_rig_lidar[:3, :3], np.eye(3))
    sweep = lidar.load_sweep(1)
    np.testing.assert_allclose(sweep.points + origin, _merged_cloud(ground_z, seed=1)[:, :3], atol=1e-5)
    road = np.abs(sweep.points[:, 2] + origin[2] - ground_z) < 1e-3
    assert len(np.unique(sweep.channel[road])) >= 20  # the road 2-40 m away from 1.4 m up: -35 to -2 deg
    # another height is another conversion: the cache key holds it
    assert dgp.convert_sweeps("LIDAR", inputs, sensor_height_m=2.0)["folder"] != spec["folder"]


def test_ring_field_gives_the_channels(native, dgp_copy):
    """Clouds with a RING channel (here the native channel; one file as a structured array)
    keep it as the point's channel, and the table holds each ring's median elevation."""
    lidar = native.lidars["top"]
    scene = _scene(dgp_copy)
    for d in scene["data"]:
        if "point_cloud" in d["datum"]:
            d["datum"]["point_cloud"]["point_format"] = ["X", "Y", "Z", "INTENSITY", 7]  # RING by number
    (dgp_copy / SCENE_JSON).write_text(json.dumps(scene))
    for i, sweep_file in enumerate(lidar.sweeps):
        npz = dgp_copy / "point_cloud" / "TOP" / f"{sweep_file.timestamp_us}.npz"
        data = np.load(npz)["data"]
        ring = lidar.load_sweep(i).channel.astype(np.float64)
        if i == 0:
            structured = np.zeros(len(data), dtype=[(n, "<f8") for n in ("X", "Y", "Z", "INTENSITY", "RING")])
            for j, n in enumerate(structured.dtype.names):
                structured[n] = data[:, j] if j < 4 else ring
            np.savez(npz, data=structured)
        else:
            np.savez(npz, data=np.column_stack([data, ring]))
    cap = dgp.load(dgp_copy)
    lid = cap.lidars["TOP"]
    assert cap.metadata["lidar_models"]["TOP"]["method"] == "ring-field"
    np.testing.assert_allclose(lid.elevation_deg, lidar.elevation_deg, atol=1.0)  # medians of compensated points
    for i in (0, 5):
        np.testing.assert_array_equal(lid.load_sweep(i).channel, lidar.load_sweep(i).channel)


def test_converted_sweeps_are_cached(dgp_dataset, imported, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "xdg_cache" / "nurec_usd" / "imports"
    folder = imported.lidars["TOP"].sweeps[0].path.parent
    assert folder.parent == cache and (folder / "lidar.json").is_file()
    stamp = imported.lidars["TOP"].sweeps[0].path.stat().st_mtime_ns
    again = load_any(dgp_dataset)
    assert again.lidars["TOP"].sweeps[0].path == imported.lidars["TOP"].sweeps[0].path
    assert again.lidars["TOP"].sweeps[0].path.stat().st_mtime_ns == stamp  # reused, not rewritten
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_damaged_cache_is_rebuilt(dgp_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = load_any(dgp_dataset).lidars["TOP"]
    first.sweeps[1].path.write_bytes(b"NRLIDAR\0 truncated")
    again = load_any(dgp_dataset).lidars["TOP"]
    assert len(again.load_sweep(1)) > 1000


def test_missing_scenes_are_reported_and_the_rest_loaded(dgp_copy):
    dataset = dgp_copy.parent / "scene_dataset_v1.0.json"
    spec = json.loads(dataset.read_text())
    spec["scene_splits"]["0"]["filenames"].append("scene_999/scene_gone.json")
    spec["scene_splits"]["1"] = {"filenames": ["scene_999/scene_gone.json"]}
    dataset.write_text(json.dumps(spec))
    with pytest.warns(dgp.DGPWarning, match="scene_999/scene_gone.json"):
        cap = dgp.load(dataset)
    assert len(cap.cameras) == 2 and len(cap.lidars) == 1
    assert len(cap.metadata["warnings"]) == 1 and "scene_999" in cap.metadata["warnings"][0]
    assert cap.metadata["dgp"]["scenes_listed"] == [f"scene_000/{SCENE_JSON}", "scene_999/scene_gone.json"]


def test_no_present_scene_is_an_error(dgp_copy):
    shutil.rmtree(dgp_copy)
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy.parent)
    assert {p.file for p in err.value.problems} == {"scene_dataset_v1.0.json"}
    assert "none of the listed scenes is present" in str(err.value)


# --------------------------------------------------------------------------------------
# (b) the real TRI sample


def _real_sample() -> Path:
    data = shared_data_dir()
    if data is None or not (data / "tri_dgp" / "scene_dataset_v1.0.json").is_file():
        pytest.skip("real test data (../shared/data/tri_dgp or $NUREC_USD_TEST_DATA/tri_dgp) is not available")
    return data / "tri_dgp"


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Capture:
    root = _real_sample()
    with private_cache_env(tmp_path_factory), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cap = dgp.load(root)
    cap.metadata["caught"] = [str(w.message) for w in caught if issubclass(w.category, dgp.DGPWarning)]
    return cap


def test_real_sample_imports(real):
    assert sorted(real.cameras) == ["CAMERA_01", "CAMERA_05", "CAMERA_06"]
    assert list(real.lidars) == ["LIDAR"]
    for cam in real.cameras.values():
        assert cam.model == "pinhole" and (cam.width, cam.height) == (1936, 1216) and len(cam.frames) == 3
    # the missing scene_02 is reported, both as a Python warning and in the metadata
    assert any("scene_02" in w for w in real.metadata["warnings"])
    assert any("scene_02" in w for w in real.metadata["caught"])
    # 3 lidar + 3 camera times (the cameras fire ~211 ms after the lidar); the ego stands still
    assert len(real.rig.timestamps_us) == 6
    np.testing.assert_allclose(real.rig.T_world_rig[:, :3, 3], 0.0, atol=1e-3)
    lidar = real.lidars["LIDAR"]
    assert len(lidar.sweeps) == 3 and len(lidar.load_sweep(0)) > 30000
    # DDAD's lidar extrinsic is the identity: its points are in the vehicle frame, whose origin is on
    # the road, so the model is seen from the cameras' height (1.36 m) above the road (-0.2 m here)
    np.testing.assert_allclose(lidar.T_rig_lidar[:3, :3], np.eye(3))
    np.testing.assert_allclose(lidar.T_rig_lidar[:3, 3], [0.0, 0.0, 1.18], atol=0.05)
    assert real.metadata["lidar_models"]["LIDAR"]["method"] == "elevation-quantiles"
    raw = np.load(sorted((_real_sample() / "scene_01" / "point_cloud" / "LIDAR").glob("*.npz"))[0])["data"][:, :3]
    np.testing.assert_allclose(lidar.load_sweep(0).points + lidar.T_rig_lidar[:3, 3], raw, atol=1e-4)
    # every boxed actor, grouped by instance_id over the 3 lidar sweeps
    assert len(real.tracks) >= 93
    assert {t.label for t in real.tracks.values()} >= {"car", "pedestrian"}
    long = [t for t in real.tracks.values() if len(t.timestamps_us) == 3]
    assert len(long) >= 93 and all(np.all(np.diff(t.timestamps_us) > 0) for t in real.tracks.values())
    moving = [t for t in long if np.linalg.norm(t.T_world_box[-1, :3, 3] - t.T_world_box[0, :3, 3]) > 0.5]
    assert len(moving) == 16  # as the sample's README says


def test_real_boxes_hold_their_lidar_points_lengthwise(real):
    """x along the length: the best-covered boxes hold clearly more lidar points with their
    length along box x (our convention) than with length and width swapped (DGP's W, L, H
    order read by position)."""
    lidar = real.lidars["LIDAR"]
    t = lidar.sweeps[0].timestamp_us
    T_w_l = real.rig.T_world_rig[list(real.rig.timestamps_us).index(t)] @ lidar.T_rig_lidar
    p_w = lidar.load_sweep(0).points.astype(np.float64) @ T_w_l[:3, :3].T + T_w_l[:3, 3]
    counts = []
    for track in real.tracks.values():
        if track.timestamps_us[0] != t or track.size_m[0] < 1.5 * track.size_m[1]:
            continue
        T_b_w = np.linalg.inv(track.T_world_box[0])
        p = np.abs(p_w @ T_b_w[:3, :3].T + T_b_w[:3, 3])
        size = track.size_m
        counts.append((np.all(p <= size / 2 + 0.1, axis=1).sum(),
                       np.all(p <= size[[1, 0, 2]] / 2 + 0.1, axis=1).sum()))
    counts = np.array(sorted(counts, reverse=True)[:10])
    assert counts[:, 0].sum() > 1.2 * counts[:, 1].sum(), counts


def _box_means(rgb: np.ndarray, uv: np.ndarray, r: int = 2) -> np.ndarray:
    """Mean colour over the (2r+1)^2 window around integer pixels ``uv`` (clipped at the border).
    ``[H, W, C]``, ``[N, 2]`` -> ``[N, C]``."""
    d = np.arange(-r, r + 1)
    u = np.clip(uv[:, 0, None, None] + d[None, None, :], 0, rgb.shape[1] - 1)
    v = np.clip(uv[:, 1, None, None] + d[None, :, None], 0, rgb.shape[0] - 1)
    return rgb[v, u].reshape(len(uv), -1, rgb.shape[2]).mean(axis=1)


def _rotation(axis: int, deg: float) -> np.ndarray:
    a = np.radians(deg)
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    R = np.eye(4)
    R[i, i] = R[j, j] = np.cos(a)
    R[i, j], R[j, i] = -np.sin(a), np.sin(a)
    return R


def test_real_lidar_projects_onto_matching_pixels(real):
    """Lidar points projected into CAMERA_01 and into the overlapping CAMERA_05 / CAMERA_06 see
    the same colours with the imported calibration, and clearly less so with CAMERA_01's
    extrinsic rotated by 2 degrees (pitch or yaw, either way).

    Why two images and not CAMERA_01's own edges: the sample's merged Luminar clouds are
    sparse and patchy (~10 px between points in CAMERA_01), so image-gradient scores at
    depth-discontinuity points are dominated by where texture and the lidar's vertical
    field of view happen to be; they do not peak at any calibration (measured: the true one
    and 2-degree rotations score within ~10 % of each other, either way round). Colour
    agreement of the same 3D points in two cameras peaks sharply at the imported
    calibration (correlation ~0.9 / ~0.6 versus <= 0.4 at 2 degrees).
    """
    lidar = real.lidars["LIDAR"]
    cam = real.cameras["CAMERA_01"]
    rig_us, rig_T = real.rig.timestamps_us, real.rig.T_world_rig
    k = 0
    sweep = lidar.load_sweep(k)
    T_w_l = poses_at(rig_us, rig_T, lidar.sweeps[k].timestamp_us) @ lidar.T_rig_lidar
    p_w = sweep.points.astype(np.float64) @ T_w_l[:3, :3].T + T_w_l[:3, 3]

    def project(camera, T_rig_camera):
        T_c_w = np.linalg.inv(poses_at(rig_us, rig_T, camera.frames[k].timestamp_us) @ T_rig_camera)
        p = p_w @ T_c_w[:3, :3].T + T_c_w[:3, 3]
        front = p[:, 2] > 2.0  # project only what can be seen (keeps the test fast)
        uv = np.zeros((len(p), 2), dtype=int)
        ok = np.zeros(len(p), dtype=bool)
        uv_f, ok_f = camera.sensor_model(dtype=torch.float64).project(torch.from_numpy(p[front]))
        uv[front], ok[front] = np.round(uv_f.numpy()).astype(int), ok_f.numpy()
        return uv, ok

    def colours(camera):
        return np.asarray(Image.open(camera.frames[k].image_path).convert("RGB"))

    def agreement(img_a, uv_a, ok_a, img_b, uv_b, ok_b) -> float:
        m = ok_a & ok_b  # 5x5 means: robust to JPEG noise and pixel rounding
        a, b = _box_means(img_a, uv_a[m]), _box_means(img_b, uv_b[m])
        return float(np.mean([np.corrcoef(a[:, c], b[:, c])[0, 1] for c in range(3)]))

    img_01 = colours(cam)
    for other in ("CAMERA_05", "CAMERA_06"):
        img_o = colours(real.cameras[other])
        uv_o, ok_o = project(real.cameras[other], real.cameras[other].T_rig_camera)
        uv, ok = project(cam, cam.T_rig_camera)
        assert (ok & ok_o).sum() > 500, "the cameras' views should overlap on lidar points"
        true = agreement(img_01, uv, ok, img_o, uv_o, ok_o)
        shifted = [agreement(img_01, *project(cam, cam.T_rig_camera @ _rotation(axis, deg)), img_o, uv_o, ok_o)
                   for axis in (0, 1) for deg in (-2.0, 2.0)]
        assert true > 0.5, (other, true)
        assert true > max(shifted) + 0.15, (other, true, shifted)


# --------------------------------------------------------------------------------------
# (c) broken inputs


def _scene(dgp_copy: Path) -> dict:
    return json.loads((dgp_copy / SCENE_JSON).read_text())


def test_broken_scene_json_names_the_file(dgp_copy):
    (dgp_copy / SCENE_JSON).write_text('{"data": [')
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    (problem,) = err.value.problems
    assert problem.file == SCENE_JSON and "not valid JSON" in problem.message


def test_missing_calibration_names_the_file(dgp_copy):
    (dgp_copy / "calibration" / f"{CALIBRATION_KEY}.json").unlink()
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy / SCENE_JSON)
    assert err.value.problems[0].file == SCENE_JSON
    assert err.value.problems[0].field.endswith("calibration_key")
    assert f"calibration/{CALIBRATION_KEY}.json does not exist" in err.value.problems[0].message


def test_broken_calibration_names_file_and_field(dgp_copy):
    path = dgp_copy / "calibration" / f"{CALIBRATION_KEY}.json"
    path.write_text(path.read_text()[:-20])
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    assert [p.file for p in err.value.problems] == [f"calibration/{CALIBRATION_KEY}.json"]
    assert "not valid JSON" in err.value.problems[0].message


def test_bad_fields_are_named_all_at_once(dgp_copy):
    scene = _scene(dgp_copy)
    scene["data"][0]["id"]["timestamp"] = "yesterday"
    scene["data"][1]["datum"]["image"]["filename"] = "rgb/FRONT/nope.png"
    (dgp_copy / SCENE_JSON).write_text(json.dumps(scene))
    path = dgp_copy / "calibration" / f"{CALIBRATION_KEY}.json"
    cal = json.loads(path.read_text())
    cal["intrinsics"][2]["fisheye"] = 1
    path.write_text(json.dumps(cal))
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    where = {(p.file, p.field) for p in err.value.problems}
    assert where == {(SCENE_JSON, "data[0].id.timestamp"), (SCENE_JSON, "data[1].datum.image.filename"),
                     (f"calibration/{CALIBRATION_KEY}.json", "intrinsics[2].fisheye")}, where


def test_broken_point_cloud_names_the_file(dgp_copy):
    npz = sorted((dgp_copy / "point_cloud" / "TOP").glob("*.npz"))[2]
    np.savez(npz, points=np.zeros((3, 4)))
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    (problem,) = err.value.problems
    assert problem.file == npz.relative_to(dgp_copy).as_posix() and problem.field == "data"


def test_timestamps_parse_exactly():
    assert dgp.parse_timestamp_us("2463-05-15T00:38:58.203752Z", "t") == 15569195938203752
    assert dgp.parse_timestamp_us("1970-01-01T00:00:01Z", "t") == 1_000_000
    assert dgp.parse_timestamp_us("1970-01-01T01:00:00.000000500+01:00", "t") == 1
    with pytest.raises(Exception, match="RFC 3339"):
        dgp.parse_timestamp_us(12, "t")


# --------------------------------------------------------------------------------------
# (d) paths stay inside the scene folder; trimmed copies; the rate inspect reports


def _image_datum(scene: dict) -> int:
    return next(i for i, d in enumerate(scene["data"]) if "image" in d["datum"])


@pytest.mark.parametrize("name, words", [
    ("../../outside.png", "leaves the capture directory ('..')"),
    ("/etc/hostname", "is absolute"),
    ("rgb/FRONT/link.png", "resolves outside the capture directory"),
])
def test_datum_files_are_confined_to_the_scene_folder(dgp_copy, tmp_path, name, words):
    outside = tmp_path / "outside.png"
    shutil.copyfile(next((dgp_copy / "rgb" / "FRONT").iterdir()), outside)
    (dgp_copy / "rgb" / "FRONT" / "link.png").symlink_to(outside)
    scene = _scene(dgp_copy)
    i = _image_datum(scene)
    scene["data"][i]["datum"]["image"]["filename"] = name
    (dgp_copy / SCENE_JSON).write_text(json.dumps(scene))
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == (SCENE_JSON, f"data[{i}].datum.image.filename")
    assert words in problem.message


def test_symlinked_scene_json_outside_is_refused(dgp_copy, tmp_path):
    shutil.move(dgp_copy / SCENE_JSON, tmp_path / SCENE_JSON)
    (dgp_copy / SCENE_JSON).symlink_to(tmp_path / SCENE_JSON)
    with pytest.raises(CaptureError, match="resolves outside the capture directory"):
        dgp.load(dgp_copy)


def test_skip_missing_drops_images_and_point_clouds(dgp_copy):
    from nurec_usd.capture.missing import MissingFilesWarning

    images = sorted((dgp_copy / "rgb" / "FRONT").iterdir())
    clouds = sorted((dgp_copy / "point_cloud" / "TOP").glob("*.npz"))
    for path in (images[3], images[7], clouds[5]):
        path.unlink()
    with pytest.raises(CaptureError) as err:
        dgp.load(dgp_copy)
    # (the images are checked before any point cloud is read: the cheap checks come first)
    assert len(err.value.problems) == 2 and all("does not exist" in p.message for p in err.value.problems)
    assert "--skip-missing" in str(err.value).splitlines()[-1]
    with pytest.warns(MissingFilesWarning, match="left out 2 frames and 1 sweep whose file is missing"):
        cap = dgp.load(dgp_copy, skip_missing=True)
    assert len(cap.cameras["FRONT"].frames) == len(images) - 2 and len(cap.cameras["FRONT_LEFT"].frames) == len(images)
    assert len(cap.lidars["TOP"].sweeps) == len(clouds) - 1


def test_inspect_reports_the_rate_of_poses_a_second_apart(dgp_copy):
    """DGP gives every datum a pose: a log whose lidar fires once a second and whose cameras follow
    211 ms later has two rig poses a second at uneven gaps; the rate is 1 Hz, not the gaps' median."""
    scene = _scene(dgp_copy)
    t0 = min(dgp.parse_timestamp_us(d["id"]["timestamp"], "") for d in scene["data"])
    for d in scene["data"]:
        t = dgp.parse_timestamp_us(d["id"]["timestamp"], "")
        d["id"]["timestamp"] = _timestamp(t0 + 10 * (t - t0) + (211_500 if "image" in d["datum"] else 0))
    (dgp_copy / SCENE_JSON).write_text(json.dumps(scene))
    cap = dgp.load(dgp_copy)
    text = format_summary(cap)
    n = len(cap.rig.timestamps_us)
    assert f"rig       {n} poses (1.0 Hz, in groups of 2)" in text, text
    assert "10 frames at 1.0 Hz" in text
    assert capture_summary(cap)["rig_rate_hz"] == pytest.approx(1.0, rel=1e-3)


def test_real_sample_reports_its_real_rate(real):
    assert "6 poses (1.0 Hz, in groups of 2)" in format_summary(real)
