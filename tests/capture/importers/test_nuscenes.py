"""The nuScenes importer: a synthetic round trip in the official layout, and broken inputs.

``write_nuscenes`` writes a native capture in nuScenes' published layout and conventions (the
devkit's ``schema.md``; no devkit needed): a ``v1.0-mini`` folder with every table as a JSON
list of records linked by tokens, ``samples/`` (key frames) and ``sweeps/`` (the rest) with
``CAM_*`` JPEGs and ``LIDAR_TOP`` ``.pcd.bin`` files (float32 x, y, z, intensity, ring index),
ego poses per sample_data, calibrated sensors, and annotation boxes (global frame, size as
width, length, height) for each instance. Written from the capture's own conventions, not from
the importer. The native capture is a synthetic six-pinhole-camera rig (``synth_native``), so
that every camera of the layout has real, consistent images.

Lidar points are written as nuScenes holds them: in the lidar frame at the sweep's timestamp
(the end of its revolution), i.e. motion-compensated from each point's own firing time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

if str(Path(__file__).resolve().parent) not in sys.path:  # also when loaded by file path (tests/train)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import importer_helpers as helpers  # noqa: E402
from importer_helpers import camera_to_world, load_private, poses_at  # noqa: E402
from nurec_usd.capture import Capture, CaptureError, format_summary, load_capture  # noqa: E402
from nurec_usd.capture.importers import detect_format, load_any, nuscenes  # noqa: E402
from nurec_usd.capture.missing import MissingFilesWarning  # noqa: E402
from nurec_usd.sensors import matrix_to_quat  # noqa: E402

VERSION = "v1.0-mini"
LOG = "n015-2018-07-24-11-22-45+0800"
# channel -> (yaw deg about the ego's z, position in the ego frame, horizontal field of view)
CAMERAS = {
    "CAM_FRONT": (0.0, (1.7, 0.0, 1.5), 70.0),
    "CAM_FRONT_RIGHT": (-55.0, (1.5, -0.5, 1.5), 70.0),
    "CAM_BACK_RIGHT": (-110.0, (1.0, -0.5, 1.5), 70.0),
    "CAM_BACK": (180.0, (0.0, 0.0, 1.5), 110.0),
    "CAM_BACK_LEFT": (110.0, (1.0, 0.5, 1.5), 70.0),
    "CAM_FRONT_LEFT": (55.0, (1.5, 0.5, 1.5), 70.0),
}
SCENES = (("scene-0061", range(0, 7)), ("scene-0103", range(7, 10)))  # frame / sweep indices of each
KEY_EVERY = 2  # every other sweep of a scene is a sample (key frame)
CONE_AT = np.array([12.0, -4.0, 0.4])  # a static traffic cone, in the capture's re-centred world
_ANGLES = np.linspace(0, 2 * np.pi, 12, endpoint=False)
# returns off the ego vehicle's roof, within 1 m of the lidar: x, y, z, intensity, ring
ROOF_RETURNS = np.column_stack([0.6 * np.cos(_ANGLES), 0.6 * np.sin(_ANGLES), np.full(12, -0.3),
                                np.full(12, 40.0), np.zeros(12)])

native = helpers.native  # (the bundled sample; this module's own rig is synth_native's)
private_cache = helpers.private_cache  # autouse: converted sweeps go to a test cache, never to ~/.cache


# --------------------------------------------------------------------------------------
# A six-camera rig (nuScenes' layout), rendered by the synthetic generator


def synth_native(out: Path) -> Capture:
    """The ``tiny`` preset's street and lidar seen by six pinhole cameras at 160x96 (nuScenes' channels)."""
    from nurec_usd.synth import generate, get_preset
    from nurec_usd.synth.presets import CameraSpec, pinhole

    w, h = 160, 96
    cams = tuple(CameraSpec(name, "pinhole", w, h, pinhole(w, h, fov), yaw, 3.0, pos)
                 for name, (yaw, pos, fov) in CAMERAS.items())
    preset = dataclasses.replace(get_preset("tiny"), name="nuscenes_rig", cameras=cams, spp=1)
    generate(preset, out, groundtruth_dir=None, device="cpu", overwrite=True)
    return load_capture(out)


# --------------------------------------------------------------------------------------
# Writing the nuScenes layout


def token(*parts) -> str:
    """A 32-hex-digit token, as nuScenes' are."""
    return hashlib.md5(" ".join(map(str, parts)).encode()).hexdigest()


def _pose(T: np.ndarray) -> dict:
    q = matrix_to_quat(torch.from_numpy(np.ascontiguousarray(T[:3, :3]))).numpy()
    return {"translation": [float(v) for v in T[:3, 3]], "rotation": [float(v) for v in q]}


def _compensated(native: Capture, index: int, t_us: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Native sweep ``index`` in the lidar frame at ``t_us``, each point moved from its own firing
    pose: (points [N, 3], intensity [N], ring [N], the points' world coordinates [N, 3])."""
    lidar = native.lidars["top"]
    sweep = lidar.load_sweep(index)
    rig_us, rig_T = native.rig.timestamps_us, native.rig.T_world_rig
    times, per_point = np.unique(sweep.timestamps_us, return_inverse=True)
    T_w_l = (poses_at(rig_us, rig_T, times) @ lidar.T_rig_lidar)[per_point]
    p = sweep.points.astype(np.float64)
    world = np.einsum("nij,nj->ni", T_w_l[:, :3, :3], p) + T_w_l[:, :3, 3]
    T_l_w = np.linalg.inv(poses_at(rig_us, rig_T, t_us) @ lidar.T_rig_lidar)
    local = world @ T_l_w[:3, :3].T + T_l_w[:3, 3]
    return local, sweep.intensity, sweep.channel, world + native.world_offset_m


def write_nuscenes(native: Capture, root: Path, scenes=SCENES) -> dict:
    """Write ``native`` (six CAM_* cameras and a lidar) as a nuScenes dataroot ``root``.

    Each scene takes the frames and sweeps of its index range; every ``KEY_EVERY``-th sweep is
    a sample, and each camera's frame nearest to it its key frame. Poses are written in the
    absolute world (the native offset added back), as a log's map frame. Returns the dataroot
    and, per sweep index, its timestamp, the points' world coordinates and which points the file
    holds beyond 1 m.
    """
    tables: dict[str, list] = {name: [] for name in (
        "attribute", "calibrated_sensor", "category", "ego_pose", "instance", "log", "map", "sample",
        "sample_annotation", "sample_data", "scene", "sensor", "visibility")}
    lidar = native.lidars["top"]
    period_us = int(round(1e6 / lidar.scan_rate_hz))
    rig_us, rig_T = native.rig.timestamps_us, native.rig.T_world_rig.copy()
    rig_T[:, :3, 3] += native.world_offset_m
    log_token = token("log")
    tables["log"].append({"token": log_token, "logfile": LOG, "vehicle": "n015", "date_captured": "2018-07-24",
                          "location": "singapore-onenorth"})
    tables["map"].append({"token": token("map"), "log_tokens": [log_token], "category": "semantic_prior",
                          "filename": "maps/53992ee3023e5494b90c316c183be829.png"})
    tables["attribute"].append({"token": token("attr"), "name": "vehicle.moving", "description": "moving"})
    tables["visibility"].append({"token": "4", "level": "v80-100", "description": "visibility of whole object"})
    for name, desc in (("vehicle.car", "Vehicle designed primarily for personal use."),
                       ("movable_object.trafficcone", "All types of traffic cone.")):
        tables["category"].append({"token": token("category", name), "name": name, "description": desc})

    sensors = [(ch, "camera") for ch in CAMERAS] + [("LIDAR_TOP", "lidar"), ("RADAR_FRONT", "radar")]
    calib: dict[str, str] = {}
    for ch, modality in sensors:
        tables["sensor"].append({"token": token("sensor", ch), "channel": ch, "modality": modality})
        calib[ch] = token("calibrated_sensor", ch)
        if modality == "camera":
            cam = native.cameras[ch]
            i = cam.intrinsics
            record = {**_pose(cam.T_rig_camera),
                      "camera_intrinsic": [[i["fx"], 0.0, i["cx"]], [0.0, i["fy"], i["cy"]], [0.0, 0.0, 1.0]]}
        elif modality == "lidar":
            record = {**_pose(lidar.T_rig_lidar), "camera_intrinsic": []}
        else:
            record = {**_pose(np.eye(4)), "camera_intrinsic": []}
        tables["calibrated_sensor"].append({"token": calib[ch], "sensor_token": token("sensor", ch), **record})

    def add_data(ch: str, t_us: int, key: bool, sample: str, ext: str, fileformat: str,
                 size: tuple[int, int] = (0, 0)) -> str:
        tok = token("sample_data", ch, t_us)
        ego = token("ego_pose", ch, t_us)
        tables["ego_pose"].append({"token": ego, "timestamp": int(t_us), **_pose(poses_at(rig_us, rig_T, t_us))})
        filename = f"{'samples' if key else 'sweeps'}/{ch}/{LOG}__{ch}__{t_us}.{ext}"
        tables["sample_data"].append({
            "token": tok, "sample_token": sample, "ego_pose_token": ego, "calibrated_sensor_token": calib[ch],
            "timestamp": int(t_us), "fileformat": fileformat, "is_key_frame": key, "height": size[1],
            "width": size[0], "filename": filename, "prev": "", "next": ""})
        (root / filename).parent.mkdir(parents=True, exist_ok=True)
        return filename

    sweeps: dict[int, dict] = {}
    instances: dict[str, str] = {}
    for scene_name, indices in scenes:
        indices = list(indices)
        scene_token = token("scene", scene_name)
        ends = {k: int(lidar.sweeps[k].timestamp_us) + period_us for k in indices}  # a sweep's time: its end
        keys = indices[::KEY_EVERY]
        samples = [(token("sample", scene_name, k), ends[k]) for k in keys]
        for j, (tok, t) in enumerate(samples):
            tables["sample"].append({"token": tok, "timestamp": t, "scene_token": scene_token,
                                     "prev": samples[j - 1][0] if j else "",
                                     "next": samples[j + 1][0] if j + 1 < len(samples) else ""})

        def sample_of(t_us: int) -> str:  # the sample that follows closest in time (else the last)
            later = [tok for tok, ts in samples if ts >= t_us]
            return later[0] if later else samples[-1][0]

        for k in indices:  # lidar
            key = k in keys
            name = add_data("LIDAR_TOP", ends[k], key, token("sample", scene_name, k) if key else sample_of(ends[k]),
                            "pcd.bin", "pcd")
            local, intensity, ring, world = _compensated(native, k, ends[k])
            rows = np.column_stack([local, intensity * 255.0, ring]).astype("<f4")
            rows = np.concatenate([rows, ROOF_RETURNS]).astype("<f4")  # as real sweeps have, next to the sensor
            (root / name).write_bytes(rows.tobytes())
            sweeps[k] = {"timestamp_us": ends[k], "world": np.concatenate([world, np.full((len(ROOF_RETURNS), 3),
                                                                                          np.nan)]),
                         "kept": np.linalg.norm(rows[:, :3].astype(np.float64), axis=1) >= 1.0}
        for ch in CAMERAS:  # cameras: the frame nearest to each sample is its key frame
            cam = native.cameras[ch]
            times = [int(cam.frames[k].timestamp_us) for k in indices]
            nearest = {int(np.argmin([abs(t - ts) for t in times])) for _, ts in samples}
            for j, k in enumerate(indices):
                key = j in nearest
                t = times[j]
                name = add_data(ch, t, key, sample_of(t), "jpg", "jpg", (cam.width, cam.height))
                Image.open(cam.frames[k].image_path).convert("RGB").save(root / name, quality=95)
        name = add_data("RADAR_FRONT", samples[0][1] + 3_000, True, samples[0][0], "pcd", "pcd")
        (root / name).write_bytes(b"# .PCD v0.7 - Point Cloud Data file format\n")  # not read by the importer

        # annotations: the tracks alive at each sample, and a cone standing at every sample
        tables["scene"].append({"token": scene_token, "log_token": log_token, "nbr_samples": len(samples),
                                "first_sample_token": samples[0][0], "last_sample_token": samples[-1][0],
                                "name": scene_name, "description": "synthetic street, two cars"})
        boxes = [(tid, "vehicle.car", track) for tid, track in native.tracks.items()] + [("cone", None, None)]
        for tid, category, track in boxes:
            inst = token("instance", scene_name, tid)
            anns = []
            for tok, ts in samples:
                if track is None:
                    T = np.eye(4)
                    T[:3, 3] = CONE_AT + native.world_offset_m
                    wlh = [0.3, 0.3, 0.8]
                elif track.timestamps_us[0] <= ts <= track.timestamps_us[-1]:
                    T = poses_at(track.timestamps_us, track.T_world_box, ts)
                    T[:3, 3] += native.world_offset_m
                    wlh = [float(track.size_m[1]), float(track.size_m[0]), float(track.size_m[2])]
                else:
                    continue
                anns.append({"token": token("ann", inst, ts), "sample_token": tok, "instance_token": inst,
                             "attribute_tokens": [], "visibility_token": "4", **_pose(T), "size": wlh,
                             "num_lidar_pts": 10, "num_radar_pts": 0, "prev": "", "next": ""})
            for j, a in enumerate(anns):
                a["prev"] = anns[j - 1]["token"] if j else ""
                a["next"] = anns[j + 1]["token"] if j + 1 < len(anns) else ""
            if anns:
                tables["sample_annotation"] += anns
                tables["instance"].append({"token": inst, "category_token": token(
                    "category", category or "movable_object.trafficcone"), "nbr_annotations": len(anns),
                    "first_annotation_token": anns[0]["token"], "last_annotation_token": anns[-1]["token"]})
                instances[f"{scene_name}/{tid}"] = inst

    # prev / next chains of each channel's sample_data, as the devkit links them
    by_channel: dict[str, list[dict]] = {}
    for r in tables["sample_data"]:
        by_channel.setdefault(r["calibrated_sensor_token"], []).append(r)
    for rows in by_channel.values():
        rows.sort(key=lambda r: r["timestamp"])
        for j, r in enumerate(rows):
            r["prev"] = rows[j - 1]["token"] if j else ""
            r["next"] = rows[j + 1]["token"] if j + 1 < len(rows) else ""
    (root / VERSION).mkdir(parents=True)
    for name, rows in tables.items():
        (root / VERSION / f"{name}.json").write_text(json.dumps(rows, indent=0))
    return {"root": root, "sweeps": sweeps, "instances": instances}


# --------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> Capture:
    """The six-camera synthetic capture (native)."""
    return synth_native(tmp_path_factory.mktemp("nuscenes_rig") / "capture")


@pytest.fixture(scope="module")
def dataset(rig, tmp_path_factory) -> dict:
    """``rig`` as a nuScenes dataroot with two scenes. Do not modify it."""
    return write_nuscenes(rig, tmp_path_factory.mktemp("nuscenes") / "nuscenes")


@pytest.fixture
def dataset_copy(dataset, tmp_path) -> Path:
    """A private copy of the dataroot that a test may break."""
    shutil.copytree(dataset["root"], tmp_path / "nuscenes")
    return tmp_path / "nuscenes"


@pytest.fixture(scope="module")
def imported(dataset, tmp_path_factory) -> Capture:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cap = load_private(dataset["root"], tmp_path_factory)
    notes = [str(w.message) for w in record if issubclass(w.category, nuscenes.NuScenesWarning)]
    assert any("the others: scene-0103 (pick one with --scene NAME)" in n for n in notes), notes
    assert len(record) == len(notes) == 2  # and the radar one; nothing else
    return cap


def _table(root: Path, name: str) -> list:
    return json.loads((root / VERSION / f"{name}.json").read_text())


def _write_table(root: Path, name: str, rows: list) -> None:
    (root / VERSION / f"{name}.json").write_text(json.dumps(rows))


def _error(path: Path, **kwargs) -> CaptureError:
    with pytest.raises(CaptureError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", nuscenes.NuScenesWarning)
        nuscenes.load(path, **kwargs)
    return info.value


# --------------------------------------------------------------------------------------
# The round trip


def test_detects_the_dataroot_and_the_version_folder(dataset, tmp_path):
    root = dataset["root"]
    for path in (root, root / VERSION):
        assert nuscenes.detect(path) and detect_format(path) == "nuscenes"
    assert not nuscenes.detect(root / "samples") and not nuscenes.detect(tmp_path)
    assert not nuscenes.detect(helpers.SAMPLE)


def test_first_scene_by_default_and_the_others_by_name(dataset, imported, tmp_path_factory):
    assert imported.name == "scene-0061" and imported.metadata["nuscenes"]["scenes"] == ["scene-0061", "scene-0103"]
    with helpers.private_cache_env(tmp_path_factory), warnings.catch_warnings():
        warnings.simplefilter("error", nuscenes.NuScenesWarning)  # no "the others" note when one is chosen
        warnings.filterwarnings("ignore", "radar channels", nuscenes.NuScenesWarning)
        other = load_any(dataset["root"] / VERSION, scene="scene-0103")
    assert other.name == "scene-0103"
    assert len(other.cameras["CAM_FRONT"].frames) == 3 and len(other.lidars["LIDAR_TOP"].sweeps) == 3
    with pytest.raises(CaptureError, match=r"v1.0-mini/scene.json: name: no scene is named 'scene-9999'; "
                                           r"the 2 scenes: scene-0061, scene-0103"):
        nuscenes.load(dataset["root"], scene="scene-9999")
    with pytest.raises(ValueError, match="--scene applies to nuscenes captures only"):
        load_any(helpers.SAMPLE, scene="scene-0061")


def test_cameras_round_trip(rig, imported):
    assert list(imported.cameras) == list(CAMERAS)  # every CAM_* channel, in the sensor table's order
    first = SCENES[0][1]
    for ch, cam in imported.cameras.items():
        ref = rig.cameras[ch]
        assert cam.model == "pinhole" and cam.rolling_shutter.direction == "global"
        assert (cam.width, cam.height) == (ref.width, ref.height)
        assert cam.intrinsics == pytest.approx(ref.intrinsics, abs=1e-9)
        np.testing.assert_allclose(cam.T_rig_camera, ref.T_rig_camera, atol=1e-6)
        assert [f.timestamp_us for f in cam.frames] == [ref.frames[k].timestamp_us for k in first]
        for frame, k in zip(cam.frames, first):  # the same camera pose in the same (absolute) world
            np.testing.assert_allclose(camera_to_world(imported, cam, frame.timestamp_us),
                                       camera_to_world(rig, ref, ref.frames[k].timestamp_us), atol=1e-5)
            assert frame.image_path.suffix == ".jpg" and frame.image_path.is_file()
    keys = [f for f in imported.cameras["CAM_FRONT"].frames if "/samples/" in f.image_path.as_posix()]
    assert len(keys) == len(first[::KEY_EVERY])  # key frames from samples/, the others from sweeps/


def test_lidar_round_trip(rig, dataset, imported):
    lidar = imported.lidars["LIDAR_TOP"]
    info = imported.metadata["lidar_models"]["LIDAR_TOP"]
    assert info["method"] == "ring-field" and lidar.channels == rig.lidars["top"].channels
    # each ring's elevation, from points compensated to the end of their revolution (so within a little)
    np.testing.assert_allclose(lidar.elevation_deg, rig.lidars["top"].elevation_deg, atol=0.3)
    assert lidar.rotation == "clockwise" and lidar.scan_rate_hz == pytest.approx(10.0)
    np.testing.assert_allclose(lidar.T_rig_lidar, rig.lidars["top"].T_rig_lidar, atol=1e-6)
    for s, k in zip(lidar.sweeps, SCENES[0][1]):
        truth = dataset["sweeps"][k]
        assert s.timestamp_us == truth["timestamp_us"]  # the end of the revolution, as nuScenes stamps it
        sweep = lidar.load_sweep(list(lidar.timestamps_us).index(s.timestamp_us))
        assert np.all(sweep.timestamps_us == s.timestamp_us)  # compensated: every point at the sweep's time
        T = helpers.rig_pose(imported, s.timestamp_us) @ lidar.T_rig_lidar
        world = sweep.points.astype(np.float64) @ T[:3, :3].T + T[:3, 3] + imported.world_offset_m
        np.testing.assert_allclose(world, truth["world"][truth["kept"]], atol=2e-3)  # float32 points
        assert len(sweep) < len(truth["kept"])  # the returns within 1 m are gone


def test_tracks_round_trip(rig, dataset, imported):
    instances = dataset["instances"]
    assert set(imported.tracks) == {instances[f"scene-0061/{t}"] for t in (*rig.tracks, "cone")}
    sample_times = [dataset["sweeps"][k]["timestamp_us"] for k in SCENES[0][1][::KEY_EVERY]]
    for tid, ref in rig.tracks.items():
        track = imported.tracks[instances[f"scene-0061/{tid}"]]
        assert track.label == "car"
        np.testing.assert_allclose(track.size_m, ref.size_m)  # (length, width, height), from nuScenes' w, l, h
        alive = [t for t in sample_times if ref.timestamps_us[0] <= t <= ref.timestamps_us[-1]]
        assert list(track.timestamps_us) == alive
        for t, T in zip(track.timestamps_us, track.T_world_box):
            T_abs = T.copy()
            T_abs[:3, 3] += imported.world_offset_m
            T_ref = poses_at(ref.timestamps_us, ref.T_world_box, t)
            T_ref[:3, 3] += rig.world_offset_m
            np.testing.assert_allclose(T_abs, T_ref, atol=1e-5)
    cone = imported.tracks[instances["scene-0061/cone"]]
    assert cone.label == "traffic_cone" and list(cone.timestamps_us) == sample_times
    np.testing.assert_allclose(cone.size_m, [0.3, 0.3, 0.8])
    np.testing.assert_allclose(cone.T_world_box[0, :3, 3] + imported.world_offset_m, CONE_AT + rig.world_offset_m)


def test_metadata_and_summary(imported):
    assert imported.metadata["source"] == "nuscenes" and imported.root.name == VERSION
    assert any("radar channels (RADAR_FRONT) are not imported" in w for w in imported.metadata["warnings"])
    text = format_summary(imported)
    assert "LIDAR_TOP" in text and "CAM_BACK_LEFT" in text and "2 car, 1 traffic_cone" in text


def test_labels():
    assert [nuscenes.label(c) for c in ("vehicle.car", "human.pedestrian.adult", "human.pedestrian.police_officer",
                                        "vehicle.bus.bendy", "movable_object.barrier", "static_object.bicycle_rack",
                                        "vehicle.emergency.police")] == \
        ["car", "pedestrian", "pedestrian", "bus", "barrier", "bicycle_rack", "emergency_vehicle"]


# --------------------------------------------------------------------------------------
# Trimmed copies and bad inputs


def test_missing_sweeps_folder_is_refused_with_the_option_named(dataset_copy, tmp_path_factory):
    shutil.rmtree(dataset_copy / "sweeps")  # trimmed copies often keep only the key frames
    err = _error(dataset_copy)
    assert all(p.file == f"{VERSION}/sample_data.json" for p in err.problems)
    assert "sweeps/LIDAR_TOP/" in err.problems[0].message and "does not exist" in err.problems[0].message
    assert len(err.problems) == nuscenes.MAX_LISTED_MISSING + 1 and "more files it names are missing" in str(err)
    assert "--skip-missing" in str(err).splitlines()[-1]

    with helpers.private_cache_env(tmp_path_factory), pytest.warns(MissingFilesWarning) as record:
        warnings.simplefilter("ignore", nuscenes.NuScenesWarning)
        cap = nuscenes.load(dataset_copy, skip_missing=True)
    (warning,) = [w for w in record if issubclass(w.category, MissingFilesWarning)]
    n_keys = len(SCENES[0][1][::KEY_EVERY])
    n_dropped = (len(CAMERAS) + 1) * (len(SCENES[0][1]) - n_keys)
    assert f"left out {n_dropped - 3} frames and 3 sweeps whose file is missing" in str(warning.message)
    assert all(len(c.frames) == n_keys for c in cap.cameras.values())
    assert len(cap.lidars["LIDAR_TOP"].sweeps) == n_keys
    assert cap.lidars["LIDAR_TOP"].scan_rate_hz == nuscenes.NOMINAL_SCAN_RATE_HZ  # key frames alone: nominal


@pytest.mark.parametrize("name, words", [
    ("../outside.jpg", "leaves the capture directory"),
    ("/etc/hostname", "is absolute"),
    ("samples/link.jpg", "resolves outside the capture directory"),
])
def test_paths_outside_the_dataroot_are_refused(dataset_copy, tmp_path, name, words):
    outside = tmp_path / "outside.jpg"
    Image.new("RGB", (160, 96)).save(outside)
    (dataset_copy / "samples" / "link.jpg").symlink_to(outside)
    rows = _table(dataset_copy, "sample_data")
    i = next(i for i, r in enumerate(rows) if "CAM_FRONT/" in r["filename"])
    rows[i]["filename"] = name
    _write_table(dataset_copy, "sample_data", rows)
    (p,) = _error(dataset_copy).problems
    assert (p.file, p.field) == (f"{VERSION}/sample_data.json", f"[{i}].filename") and words in p.message


def test_symlinked_table_outside_is_refused(dataset_copy, tmp_path):
    shutil.move(dataset_copy / VERSION / "ego_pose.json", tmp_path / "ego_pose.json")
    (dataset_copy / VERSION / "ego_pose.json").symlink_to(tmp_path / "ego_pose.json")
    (p,) = _error(dataset_copy).problems
    assert p.file == f"{VERSION}/ego_pose.json" and "resolves outside the capture directory" in p.message


def test_broken_tables_name_table_and_field(dataset_copy):
    (dataset_copy / VERSION / "ego_pose.json").write_text("[{")
    (p,) = _error(dataset_copy).problems
    assert p.file == f"{VERSION}/ego_pose.json" and "not valid JSON" in p.message
    (dataset_copy / VERSION / "ego_pose.json").unlink()
    assert not nuscenes.detect(dataset_copy)  # a required table is missing: not a nuScenes folder


def test_bad_records_are_named(dataset_copy):
    poses = _table(dataset_copy, "ego_pose")
    poses[3]["rotation"] = [2.0, 0.0, 0.0, 0.0]
    _write_table(dataset_copy, "ego_pose", poses)
    cs = _table(dataset_copy, "calibrated_sensor")
    j = next(j for j, r in enumerate(cs) if r["camera_intrinsic"])
    cs[j]["camera_intrinsic"][0][1] = 3.0  # skew
    _write_table(dataset_copy, "calibrated_sensor", cs)
    problems = {(p.file, p.field): p.message for p in _error(dataset_copy).problems}
    assert "norm 2" in problems[(f"{VERSION}/ego_pose.json", "[3].rotation")]
    assert "pinhole matrix" in problems[(f"{VERSION}/calibrated_sensor.json", f"[{j}].camera_intrinsic")]


def test_truncated_sweep_is_named(dataset_copy):
    rows = _table(dataset_copy, "sample_data")
    name = next(r["filename"] for r in rows if r["filename"].startswith("samples/LIDAR_TOP/"))
    (dataset_copy / name).write_bytes((dataset_copy / name).read_bytes()[:-7])
    (p,) = _error(dataset_copy).problems
    assert p.file == name and "truncated" in p.message


def test_several_versions_need_a_choice(dataset_copy):
    shutil.copytree(dataset_copy / VERSION, dataset_copy / "v1.0-test")
    with pytest.raises(CaptureError, match="holds 2 versions"):
        nuscenes.load(dataset_copy)
    assert nuscenes._locate(dataset_copy / "v1.0-test", None).name == "v1.0-test"


def test_command_line_inspects_a_scene(dataset, tmp_path):
    import os
    import subprocess

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, a)], capture_output=True,  # noqa: E731
                                    text=True, timeout=300, env=env)
    r = run("inspect", dataset["root"])
    assert r.returncode == 0, r.stderr
    assert "capture   scene-0061" in r.stdout and "the others: scene-0103 (pick one with --scene NAME)" in r.stderr
    r = run("inspect", dataset["root"], "--scene", "scene-0103", "--format", "nuscenes")
    assert r.returncode == 0 and "capture   scene-0103" in r.stdout and "3 frames at 10.0 Hz" in r.stdout, r.stderr
    r = run("validate", dataset["root"], "--scene", "scene-0999")
    assert r.returncode == 1 and "no scene is named 'scene-0999'" in r.stderr and "Traceback" not in r.stderr
