"""The KITTI raw importer: synthetic round trips (with and without oxts) and broken inputs.

The round trip writes the bundled ``samples/tiny`` capture as a KITTI raw ``_sync`` drive
(only what the importer reads, in KITTI's own conventions, derived here from the devkit's
documentation rather than from the importer), imports it back and compares with the
native capture: poses, intrinsics, and that lidar points land on the same pixels.

* rig = the oxts frame = the sample's rig; oxts records come from the rig poses through
  the inverse of the devkit's scaled Mercator projection (origin near Karlsruhe);
* camera ``front`` (pinhole) is rectified camera 2; rectified camera 3 reuses its images
  with other intrinsics and a 0.53 m stereo baseline (only its geometry is checked);
  ``R_rect_00`` is a small rotation, so that the chain P_rect R_rect Tr_velo_to_cam is
  exercised in full;
* the sample's lidar spins clockwise; KITTI's HDL-64E counterclockwise, starting behind.
  Each sample point is a world point seen at the sample's firing time; the KITTI scan
  holds the same world point where a counterclockwise scanner, timed by the point's
  azimuth, would have seen it (solved by fixed-point iteration), so the importer's
  per-point times and poses must put it back in the same place.
"""

from __future__ import annotations

import math
import shutil
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

import importer_helpers as helpers
from importer_helpers import SAMPLE, assert_sweeps_land_alike, load_private
from nurec_usd.capture import Capture, CaptureError, format_summary
from nurec_usd.capture.importers import detect_format, kitti

DATE = "2011_09_26"
DRIVE = f"{DATE}_drive_0001_sync"
EARTH_RADIUS_M = 6378137.0
LAT0, LON0, ALT0 = 49.011212804408, 8.4228850417969, 112.83  # near Karlsruhe, like KITTI
T_02 = np.array([0.0598, -0.0012, 0.0027])  # rectified camera 2's offset from rectified camera 0 (m)
T_03 = np.array([-0.4731, 0.0021, 0.0031])  # rectified camera 3's
K_03 = (231.5, 231.5, 161.25, 91.75)  # fx fy cx cy of camera 3
SWEEP_US = 100_000

native = helpers.native  # the fixture: the bundled sample, loaded natively
private_cache = helpers.private_cache  # autouse: converted scans go to a test cache, never to ~/.cache


# --------------------------------------------------------------------------------------
# Writing a capture as a KITTI drive


def _rotation(axis: int, deg: float) -> np.ndarray:
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    R = np.eye(3)
    R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
    return R


R_RECT_00 = _rotation(0, 0.4) @ _rotation(1, -0.3) @ _rotation(2, 0.2)


def _translation(t: np.ndarray) -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = t
    return T


def _stamp(t_us: int) -> str:
    """Microseconds since the epoch as a KITTI timestamp line (nanoseconds)."""
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=int(t_us))
    return dt.strftime("%Y-%m-%d %H:%M:%S") + f".{dt.microsecond * 1000:09d}"


def _numbers(values) -> str:
    return " ".join(f"{float(v):.15e}" for v in np.ravel(values))


def _rotvec(R: np.ndarray) -> np.ndarray:
    """Rotation vector of a rotation matrix (angles below 180 deg)."""
    angle = math.acos(min(1.0, max(-1.0, (np.trace(R) - 1) / 2)))
    axis = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2
    return axis if angle < 1e-12 else axis * angle / math.sin(angle)


def _rotations(w: np.ndarray) -> np.ndarray:
    """Rodrigues: rotation vectors ``[N, 3]`` -> matrices ``[N, 3, 3]``."""
    theta = np.linalg.norm(w, axis=1)[:, None, None]
    K = np.zeros((len(w), 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -w[:, 2], w[:, 1], -w[:, 0]
    K -= np.transpose(K, (0, 2, 1))
    safe = np.maximum(theta, 1e-12)
    a = np.where(theta > 1e-8, np.sin(safe) / safe, 1.0)
    b = np.where(theta > 1e-8, (1 - np.cos(safe)) / safe**2, 0.5)
    return np.eye(3) + a * K + b * K @ K


def _poses_at(key_us: np.ndarray, key_T: np.ndarray, t_us) -> np.ndarray:
    """Poses at (fractional) microsecond times, interpolated as the capture format says
    (slerp of rotations, lerp of translations; held outside the keys), in numpy for speed."""
    t = np.asarray(t_us, dtype=np.float64)
    flat = np.atleast_1d(t)
    key_us = np.asarray(key_us, dtype=np.int64)
    i1 = np.clip(np.searchsorted(key_us, flat, side="right"), 1, len(key_us) - 1)
    i0 = i1 - 1
    a = np.clip((flat - key_us[i0]) / (key_us[i1] - key_us[i0]), 0.0, 1.0)
    steps = np.stack([_rotvec(key_T[k, :3, :3].T @ key_T[k + 1, :3, :3]) for k in range(len(key_T) - 1)])
    out = np.repeat(np.eye(4)[None], len(flat), axis=0)
    out[:, :3, :3] = key_T[i0, :3, :3] @ _rotations(a[:, None] * steps[i0])
    out[:, :3, 3] = (1 - a)[:, None] * key_T[i0, :3, 3] + a[:, None] * key_T[i1, :3, 3]
    return out.reshape(*t.shape, 4, 4)


def _world_points(cap: Capture, lidar, sweep) -> np.ndarray:
    """A sweep's points in the capture's world, each through the pose at its own time."""
    times, inv = np.unique(sweep.timestamps_us, return_inverse=True)
    T = (_poses_at(cap.rig.timestamps_us, cap.rig.T_world_rig, times) @ lidar.T_rig_lidar)[inv]
    return np.einsum("nij,nj->ni", T[:, :3, :3], sweep.points.astype(np.float64)) + T[:, :3, 3]


def _write_stream(folder: Path, times_us, files: list[tuple[str, bytes | Path]]) -> None:
    (folder / "data").mkdir(parents=True)
    (folder / "timestamps.txt").write_text("".join(_stamp(t) + "\n" for t in times_us))
    for name, content in files:
        if isinstance(content, Path):
            shutil.copyfile(content, folder / "data" / name)
        else:
            (folder / "data" / name).write_bytes(content)


def _ccw_scan(native: Capture, lidar, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The world points of native sweep ``index`` as KITTI's counterclockwise scanner holds them.

    Returns (velodyne-frame points ``[M, 3]``, their reflectance ``[M]``, mask of the kept
    native points ``[N]``).
    """
    sweep = lidar.load_sweep(index)
    start = lidar.sweeps[index].timestamp_us
    world = _world_points(native, lidar, sweep)
    t = sweep.timestamps_us.astype(np.float64)
    p, phase = np.zeros_like(world), np.zeros(len(world))
    active = np.ones(len(world), dtype=bool)  # points whose time still changes
    for _ in range(10):
        T = _poses_at(native.rig.timestamps_us, native.rig.T_world_rig, t[active]) @ lidar.T_rig_lidar
        Rt = np.transpose(T[:, :3, :3], (0, 2, 1))
        p[active] = np.einsum("nij,nj->ni", Rt, world[active] - T[:, :3, 3])
        phase[active] = np.mod(np.degrees(np.arctan2(p[active, 1], p[active, 0])) - 180.0, 360.0) / 360.0
        t_new = start + np.floor(phase * SWEEP_US + 0.5)
        active = t_new != t
        t = t_new
        if not active.any():
            break
    # keep converged points away from the seam behind the car (where the time jumps a revolution)
    keep = ~active & (phase > 1e-3) & (phase < 1 - 1e-3)
    return p[keep], sweep.intensity[keep], keep


def write_kitti(native: Capture, out: Path, oxts: bool = True) -> dict:
    """Write ``native`` as ``out/<DATE>/<DRIVE>``; returns the drive folder and the kept points per sweep."""
    date_dir = out / DATE
    drive = date_dir / DRIVE
    drive.mkdir(parents=True)
    front, lidar = native.cameras["front"], native.lidars["top"]

    # calibration: rig = oxts frame, so imu -> velodyne is inv(T_rig_lidar)
    T_velo_imu = np.linalg.inv(lidar.T_rig_lidar)
    T_cam2_velo = np.linalg.inv(front.T_rig_camera) @ lidar.T_rig_lidar
    R4 = np.eye(4)
    R4[:3, :3] = R_RECT_00
    T_cam0_velo = R4.T @ _translation(-T_02) @ T_cam2_velo  # x_cam2 = R_rect x_cam0 + t_02
    (date_dir / "calib_imu_to_velo.txt").write_text(
        f"calib_time: 25-May-2012 16:47:16\nR: {_numbers(T_velo_imu[:3, :3])}\nT: {_numbers(T_velo_imu[:3, 3])}\n")
    (date_dir / "calib_velo_to_cam.txt").write_text(
        f"calib_time: 15-Mar-2012 11:37:16\nR: {_numbers(T_cam0_velo[:3, :3])}\nT: {_numbers(T_cam0_velo[:3, 3])}\n"
        "delta_f: 0.000000e+00 0.000000e+00\ndelta_c: 0.000000e+00 0.000000e+00\n")
    i = front.intrinsics
    K2 = np.array([[i["fx"], 0, i["cx"]], [0, i["fy"], i["cy"]], [0, 0, 1]])
    K3 = np.array([[K_03[0], 0, K_03[2]], [0, K_03[1], K_03[3]], [0, 0, 1]])
    P0 = np.hstack([K2, np.zeros((3, 1))])
    P2, P3 = np.hstack([K2, (K2 @ T_02)[:, None]]), np.hstack([K3, (K3 @ T_03)[:, None]])
    lines = ["calib_time: 09-Jan-2012 13:57:47", "corner_dist: 9.950000e-02"]
    for cam, P in (("00", P0), ("01", P0), ("02", P2), ("03", P3)):
        lines += [f"S_{cam}: 1.392000e+03 5.120000e+02", f"K_{cam}: {_numbers(K2)}",
                  f"D_{cam}: {_numbers(np.zeros(5))}",
                  f"R_{cam}: {_numbers(np.eye(3))}", f"T_{cam}: {_numbers(np.zeros(3))}",
                  f"S_rect_{cam}: {front.width:.6e} {front.height:.6e}",
                  f"R_rect_{cam}: {_numbers(R_RECT_00 if cam == '00' else np.eye(3))}", f"P_rect_{cam}: {_numbers(P)}"]
    (date_dir / "calib_cam_to_cam.txt").write_text("\n".join(lines) + "\n")

    # cameras 2 and 3 (3 reuses 2's images: only its geometry is compared)
    names = [(f"{k:010d}.png", f.image_path) for k, f in enumerate(front.frames)]
    for cam in ("image_02", "image_03"):
        _write_stream(drive / cam, front.timestamps_us, names)

    # velodyne: counterclockwise revolutions of one sweep each, timestamps.txt at their middle
    starts = lidar.timestamps_us
    kept, scans = [], []
    for k in range(len(starts)):
        p, refl, keep = _ccw_scan(native, lidar, k)
        kept.append(keep)
        scans.append((f"{k:010d}.bin", np.column_stack([p, refl]).astype("<f4").tobytes()))
    vel = drive / "velodyne_points"
    _write_stream(vel, starts + SWEEP_US // 2, scans)
    (vel / "timestamps_start.txt").write_text("".join(_stamp(t) + "\n" for t in starts))
    (vel / "timestamps_end.txt").write_text("".join(_stamp(t + SWEEP_US) + "\n" for t in starts))

    # oxts from the rig poses: the inverse of the devkit's scaled Mercator projection
    if oxts:
        scale = math.cos(math.radians(LAT0))
        mx0 = scale * EARTH_RADIUS_M * math.radians(LON0)
        my0 = scale * EARTH_RADIUS_M * math.log(math.tan(math.pi / 4 + math.radians(LAT0) / 2))
        records = []
        for T in native.rig.T_world_rig:
            x, y, z = T[:3, 3]
            lon = math.degrees((mx0 + x) / (scale * EARTH_RADIUS_M))
            lat = math.degrees(2 * math.atan(math.exp((my0 + y) / (scale * EARTH_RADIUS_M))) - math.pi / 2)
            R = T[:3, :3]  # = Rz(yaw) Ry(pitch) Rx(roll)
            roll, pitch, yaw = math.atan2(R[2, 1], R[2, 2]), -math.asin(R[2, 0]), math.atan2(R[1, 0], R[0, 0])
            rest = [0.0] * 17 + [0.05, 0.03]  # velocities, accelerations, rates, accuracies: unused
            status = [4, 10, 4, 4, 6]  # navstat numsats posmode velmode orimode
            values = [repr(float(v)) for v in (lat, lon, ALT0 + z, roll, pitch, yaw)]
            records.append(" ".join(values + [f"{v:.6f}" for v in rest] + [str(v) for v in status]))
        _write_stream(drive / "oxts", native.rig.timestamps_us,
                      [(f"{k:010d}.txt", (r + "\n").encode()) for k, r in enumerate(records)])
    return {"drive": drive, "kept": kept}


@pytest.fixture(scope="module")
def kitti_drive(native, tmp_path_factory) -> dict:
    """``samples/tiny`` as a KITTI drive with oxts. Do not modify it."""
    return write_kitti(native, tmp_path_factory.mktemp("kitti"))


@pytest.fixture(scope="module")
def kitti_drive_no_oxts(native, tmp_path_factory) -> dict:
    """The same drive without its oxts folder (poses from lidar odometry). Do not modify it."""
    return write_kitti(native, tmp_path_factory.mktemp("kitti_no_oxts"), oxts=False)


@pytest.fixture
def drive_copy(kitti_drive, tmp_path) -> Path:
    """A private copy (date folder and drive) that a test may break; returns the drive folder."""
    shutil.copytree(kitti_drive["drive"].parent, tmp_path / DATE)
    return tmp_path / DATE / DRIVE


@pytest.fixture(scope="module")
def imported(kitti_drive, tmp_path_factory) -> Capture:
    with warnings.catch_warnings():
        warnings.simplefilter("error", kitti.KITTIWarning)  # a clean drive loads without warnings
        return load_private(kitti_drive["drive"], tmp_path_factory)


@pytest.fixture(scope="module")
def imported_icp(kitti_drive_no_oxts, tmp_path_factory) -> Capture:
    with pytest.warns(kitti.KITTIWarning, match="estimated from the scans by ICP"):
        return load_private(kitti_drive_no_oxts["drive"], tmp_path_factory)


def _rotation_error_deg(Ra: np.ndarray, Rb: np.ndarray) -> float:
    c = (np.trace(Ra.T @ Rb) - 1) / 2
    return math.degrees(math.acos(min(1.0, max(-1.0, c))))


def _check_times_covered(cap: Capture) -> None:
    """Every frame, sweep and point time lies inside the rig's time range (what ``validate`` checks)."""
    lo, hi = cap.start_us, cap.end_us
    for cam in cap.cameras.values():
        assert lo <= cam.timestamps_us.min() and cam.timestamps_us.max() <= hi
    for lid in cap.lidars.values():
        for k in range(len(lid.sweeps)):
            s = lid.load_sweep(k)
            assert lo <= lid.sweeps[k].timestamp_us and lo <= s.timestamps_us.min() and s.timestamps_us.max() <= hi
            assert s.channel.min() >= 0 and s.channel.max() < lid.channels
    assert np.all(np.diff(cap.rig.timestamps_us) > 0)


# --------------------------------------------------------------------------------------
# The format's conventions, from the devkit's words


def test_timestamps_parse_to_the_nearest_microsecond():
    t = kitti.parse_timestamp_us("2011-09-26 13:02:25.964389445")
    base = int((datetime(2011, 9, 26, 13, 2, 25, tzinfo=timezone.utc)
                - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1))
    assert t == base + 964389
    assert kitti.parse_timestamp_us("2011-09-26 13:02:25.9643895") == base + 964390  # rounds half up
    assert kitti.parse_timestamp_us("2011-09-26 13:02:25") == base
    with pytest.raises(ValueError):
        kitti.parse_timestamp_us("2011-09-26 13:02")


def test_oxts_rotation_follows_the_devkit_conventions():
    """roll: positive = left side up; pitch: positive = front down; yaw: 0 = east, counterclockwise."""
    forward, left = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    assert (kitti.oxts_rotation(0.1, 0, 0) @ left)[2] > 0.09
    assert (kitti.oxts_rotation(0, 0.1, 0) @ forward)[2] < -0.09
    np.testing.assert_allclose(kitti.oxts_rotation(0, 0, 0) @ forward, [1, 0, 0], atol=1e-15)  # east
    np.testing.assert_allclose(kitti.oxts_rotation(0, 0, math.pi / 2) @ forward, [0, 1, 0], atol=1e-15)  # north


def test_mercator_is_metric_near_the_first_latitude():
    scale = kitti.mercator_scale(LAT0)
    mx, my = kitti.latlon_to_mercator(np.array([LAT0, LAT0 + 1e-5, LAT0]), np.array([LON0, LON0, LON0 + 1e-5]), scale)
    # one 1e-5 deg step is ~1.11 m north (any latitude) and ~1.11 m * cos(lat) east
    assert my[1] - my[0] == pytest.approx(EARTH_RADIUS_M * math.radians(1e-5), rel=1e-6)
    assert mx[2] - mx[0] == pytest.approx(EARTH_RADIUS_M * math.radians(1e-5) * math.cos(math.radians(LAT0)), rel=1e-9)
    lat, lon = kitti.mercator_to_latlon(mx, my, scale)
    np.testing.assert_allclose(lat, [LAT0, LAT0 + 1e-5, LAT0], atol=1e-12)
    np.testing.assert_allclose(lon, [LON0, LON0, LON0 + 1e-5], atol=1e-12)


# --------------------------------------------------------------------------------------
# (a) the round trip with oxts


def test_detects_drive_and_date_folders(kitti_drive):
    drive = kitti_drive["drive"]
    for path in (drive, drive.parent):
        assert kitti.detect(path), path
        assert detect_format(path) == "kitti"
    assert not kitti.detect(SAMPLE) and not kitti.detect(drive / "image_02") and not kitti.detect(drive / "calib_x")


def test_round_trip_poses_and_intrinsics(native, imported):
    assert set(imported.cameras) == {"image_02", "image_03"} and set(imported.lidars) == {"velodyne"}
    assert imported.name == DRIVE and imported.metadata["source"] == "kitti"
    assert imported.metadata["rig_frame"].startswith("oxts") and "poses_estimated" not in imported.metadata
    assert imported.metadata["warnings"] == [] and imported.metadata["kitti"]["rig_extrapolated_s"] == [0.0, 0.0]
    # rig = oxts = the sample's rig, at the sample's times; the Mercator round trip keeps
    # positions to well under a millimetre (tolerance 1e-6 m, 1e-9 rad)
    np.testing.assert_array_equal(imported.rig.timestamps_us, native.rig.timestamps_us)
    np.testing.assert_allclose(imported.rig.T_world_rig[:, :3, 3], native.rig.T_world_rig[:, :3, 3], atol=1e-6)
    np.testing.assert_allclose(imported.rig.T_world_rig[:, :3, :3], native.rig.T_world_rig[:, :3, :3], atol=1e-9)
    lat, lon, alt = imported.metadata["geodetic_origin"]
    assert (lat, lon, alt) == pytest.approx((LAT0, LON0, ALT0), abs=1e-9)
    # camera 2 is the sample's front camera; camera 3 sits 0.53 m to its right (the stereo baseline)
    front, cam2, cam3 = native.cameras["front"], imported.cameras["image_02"], imported.cameras["image_03"]
    assert cam2.model == "pinhole" and (cam2.width, cam2.height) == (front.width, front.height)
    assert cam2.intrinsics == pytest.approx(front.intrinsics, rel=1e-12)
    np.testing.assert_allclose(cam2.T_rig_camera, front.T_rig_camera, atol=1e-9)
    np.testing.assert_array_equal(cam2.timestamps_us, front.timestamps_us)
    assert cam2.rolling_shutter.direction == "global"
    assert cam3.intrinsics == pytest.approx(dict(zip(("fx", "fy", "cx", "cy"), K_03)), rel=1e-12)
    np.testing.assert_allclose(cam3.T_rig_camera, front.T_rig_camera @ _translation(T_02 - T_03), atol=1e-9)
    np.testing.assert_allclose(imported.lidars["velodyne"].T_rig_lidar, native.lidars["top"].T_rig_lidar, atol=1e-9)
    _check_times_covered(imported)


def test_lidar_model_and_point_times(native, kitti_drive, imported):
    lid = imported.lidars["velodyne"]
    assert lid.rotation == "counterclockwise" and lid.start_azimuth_deg == 180.0
    assert lid.scan_rate_hz == pytest.approx(10.0)
    np.testing.assert_array_equal(lid.timestamps_us, native.lidars["top"].timestamps_us)  # = timestamps_start
    # the table spans the sample's elevations (rings are blurred: each point is seen from
    # where the counterclockwise scanner was, not along the sample's beams)
    assert lid.elevation_deg.min() >= -22.0 - 3.0 and lid.elevation_deg.max() <= 8.0 + 3.0
    for k in (0, 5):
        sweep = lid.load_sweep(k)
        assert len(sweep) == kitti_drive["kept"][k].sum()
        start = lid.sweeps[k].timestamp_us
        assert start <= sweep.timestamps_us.min() and sweep.timestamps_us.max() < start + SWEEP_US
        # behind the car at the start, ahead (the camera trigger) half-way, behind again at the end
        az = np.degrees(np.arctan2(sweep.points[:, 1], sweep.points[:, 0]))
        phase = np.mod(az - 180, 360) / 360
        np.testing.assert_allclose(sweep.timestamps_us - start, phase * SWEEP_US, atol=0.51)
        native_intensity = native.lidars["top"].load_sweep(k).intensity
        np.testing.assert_allclose(sweep.intensity, native_intensity[kitti_drive["kept"][k]])


def test_lidar_points_land_on_the_same_pixels(native, kitti_drive, imported):
    """Each sweep into the pinhole camera at the frame's time: the native points at their
    firing times through the native poses; the imported ones at the times the importer gives
    them (from their azimuths) through the poses it made from the oxts records."""
    assert_sweeps_land_alike(native, imported, ("front", "image_02"), ("top", "velodyne"), atol=0.02,
                             kept=kitti_drive["kept"])


def test_rig_is_extrapolated_to_cover_the_scans(native, drive_copy, tmp_path_factory):
    """Like real KITTI, oxts records stop before the last revolution ends: the rig is extended
    at constant velocity (here by 0.1 s) and stays within 2 cm / 0.05 deg of the truth."""
    oxts = drive_copy / "oxts"
    for k in (19, 20):
        (oxts / "data" / f"{k:010d}.txt").unlink()
    lines = (oxts / "timestamps.txt").read_text().splitlines()
    (oxts / "timestamps.txt").write_text("\n".join(lines[:19]) + "\n")
    cap = load_private(drive_copy, tmp_path_factory)
    assert cap.end_us == native.end_us and cap.metadata["kitti"]["rig_extrapolated_s"] == [0.0, 0.1]
    end = cap.rig.T_world_rig[-1]
    assert np.linalg.norm(end[:3, 3] - native.rig.T_world_rig[-1, :3, 3]) < 0.02
    assert _rotation_error_deg(end[:3, :3], native.rig.T_world_rig[-1, :3, :3]) < 0.05
    _check_times_covered(cap)


def test_revolutions_without_start_and_end_files(native, drive_copy, tmp_path_factory):
    """Without timestamps_start / _end a revolution is centred on its timestamps.txt time."""
    for name in ("timestamps_start.txt", "timestamps_end.txt"):
        (drive_copy / "velodyne_points" / name).unlink()
    with pytest.warns(kitti.KITTIWarning, match="centred on its timestamps.txt"):
        cap = load_private(drive_copy, tmp_path_factory)
    np.testing.assert_array_equal(cap.lidars["velodyne"].timestamps_us, native.lidars["top"].timestamps_us)
    _check_times_covered(cap)


def test_converted_scans_are_cached(kitti_drive, imported, tmp_path_factory):
    folder = imported.lidars["velodyne"].sweeps[0].path.parent
    assert folder.parent == tmp_path_factory.getbasetemp() / "xdg_cache" / "nurec_usd" / "imports"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = load_private(kitti_drive["drive"], tmp_path_factory)
    assert again.lidars["velodyne"].sweeps[0].path.parent == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_calibration_inside_the_drive_folder(drive_copy, tmp_path_factory, imported):
    for name in kitti.CALIB_FILES:
        shutil.move(drive_copy.parent / name, drive_copy / name)
    cap = load_private(drive_copy, tmp_path_factory)
    np.testing.assert_allclose(cap.cameras["image_02"].T_rig_camera, imported.cameras["image_02"].T_rig_camera)


# --------------------------------------------------------------------------------------
# (b) without oxts: the trajectory from lidar odometry


def test_icp_recovers_the_trajectory(native, imported_icp):
    """Poses at the middle of each revolution, relative to the first: within 0.1 m and
    0.5 deg of the sample's lidar poses over its 1 s, 7.7 m drive."""
    cap = imported_icp
    assert cap.metadata["poses_estimated"] == "lidar ICP (open3d)"
    assert any("ICP" in w for w in cap.metadata["warnings"]) and cap.metadata["rig_frame"].startswith("velodyne")
    lid_n = native.lidars["top"]
    mids = lid_n.timestamps_us + SWEEP_US // 2
    truth = _poses_at(native.rig.timestamps_us, native.rig.T_world_rig, mids) @ lid_n.T_rig_lidar
    est = _poses_at(cap.rig.timestamps_us, cap.rig.T_world_rig, mids) @ cap.lidars["velodyne"].T_rig_lidar
    truth, est = np.linalg.inv(truth[0]) @ truth, np.linalg.inv(est[0]) @ est
    assert np.linalg.norm(truth[-1, :3, 3]) > 7.0
    t_err = np.linalg.norm(est[:, :3, 3] - truth[:, :3, 3], axis=1)
    r_err = [_rotation_error_deg(a[:3, :3], b[:3, :3]) for a, b in zip(est, truth)]
    assert t_err.max() < 0.1 and max(r_err) < 0.5, (t_err.round(3), np.round(r_err, 3))
    # the sensors sit on the velodyne rig, and the whole drive is covered
    np.testing.assert_allclose(cap.lidars["velodyne"].T_rig_lidar, np.eye(4))
    np.testing.assert_allclose(cap.cameras["image_02"].T_rig_camera,
                               np.linalg.inv(lid_n.T_rig_lidar) @ native.cameras["front"].T_rig_camera, atol=1e-9)
    _check_times_covered(cap)


def test_summary_says_poses_were_estimated(imported, imported_icp):
    assert "poses     estimated from lidar (ICP)" in format_summary(imported_icp)
    assert "estimated" not in format_summary(imported)


# --------------------------------------------------------------------------------------
# (c) broken inputs: CaptureError naming the file


def _error(path: Path) -> CaptureError:
    with pytest.raises(CaptureError) as info:
        kitti.load(path)
    return info.value


def test_broken_calibration_line_names_file_and_field(drive_copy):
    calib = drive_copy.parent / "calib_cam_to_cam.txt"
    calib.write_text(calib.read_text().replace("P_rect_02: ", "P_rect_02: 7.2e+02 abc "))
    err = _error(drive_copy)
    assert [(p.file, p.field) for p in err.problems] == [("calib_cam_to_cam.txt", "P_rect_02")]
    calib.write_text(calib.read_text() + "this line has no colon\n")
    (p,) = _error(drive_copy).problems
    assert p.file == "calib_cam_to_cam.txt" and p.field.startswith("line ")


def test_missing_calibration_names_the_file(drive_copy):
    (drive_copy.parent / "calib_imu_to_velo.txt").unlink()
    (p,) = _error(drive_copy).problems
    assert p.file == "calib_imu_to_velo.txt" and "does not exist" in p.message


def test_truncated_scan_names_the_file(drive_copy):
    scan = drive_copy / "velodyne_points" / "data" / "0000000003.bin"
    scan.write_bytes(scan.read_bytes()[:-6])
    (p,) = _error(drive_copy).problems
    assert p.file == f"{DRIVE}/velodyne_points/data/0000000003.bin" and "truncated" in p.message


def test_short_timestamps_name_the_file(drive_copy):
    for cam in ("image_02", "image_03"):
        ts = drive_copy / cam / "timestamps.txt"
        ts.write_text("\n".join(ts.read_text().splitlines()[:7]) + "\n")
    problems = {p.file: p for p in _error(drive_copy).problems}  # both, at once
    assert "has 7 lines" in problems[f"{DRIVE}/image_02/timestamps.txt"].message
    assert "has 7 lines" in problems[f"{DRIVE}/image_03/timestamps.txt"].message


def test_bad_timestamp_and_oxts_lines_are_named(drive_copy):
    ts = drive_copy / "velodyne_points" / "timestamps_end.txt"
    lines = ts.read_text().splitlines()
    lines[4] = "2011-09-26 25:61:00.000"
    ts.write_text("\n".join(lines) + "\n")
    oxts = drive_copy / "oxts" / "data" / "0000000002.txt"
    oxts.write_text(" ".join(oxts.read_text().split()[:29]) + "\n")
    problems = {p.file: p for p in _error(drive_copy).problems}
    assert problems[f"{DRIVE}/velodyne_points/timestamps_end.txt"].field == "line 5"
    assert "30 values" in problems[f"{DRIVE}/oxts/data/0000000002.txt"].message


def test_extract_drives_and_ambiguous_folders_are_refused(drive_copy, tmp_path):
    date_dir = drive_copy.parent
    shutil.copytree(drive_copy, date_dir / f"{DATE}_drive_0002_sync")
    (p,) = _error(date_dir).problems
    assert "2 drives" in p.message
    extract = date_dir / f"{DATE}_drive_0003_extract"
    drive_copy.rename(extract)
    (p,) = _error(extract).problems
    assert "_extract" in p.message


# --------------------------------------------------------------------------------------
# (d) copies as they ship: without timestamps.txt; paths stay inside the drive


def test_drive_without_any_timestamps_is_timed_at_the_nominal_10_hz(drive_copy, tmp_path_factory):
    for folder in ("image_02", "image_03", "velodyne_points", "oxts"):
        (drive_copy / folder / "timestamps.txt").unlink()
    with pytest.warns(kitti.KITTIWarning) as record:
        cap = load_private(drive_copy, tmp_path_factory)
    notes = [str(w.message) for w in record]
    assert any("no timestamps.txt in image_02, image_03, velodyne_points, oxts: frames are timed at KITTI's "
               "nominal 10 Hz by index" in n for n in notes), notes
    assert any("timestamps_start.txt / timestamps_end.txt are not used" in n for n in notes), notes
    for cam in cap.cameras.values():
        np.testing.assert_array_equal(cam.timestamps_us, np.arange(10) * 100_000)
    np.testing.assert_array_equal(cap.lidars["velodyne"].timestamps_us, np.arange(10) * 100_000 - 50_000)
    assert set(cap.metadata["kitti"]["timestamps_from"]) == {"image_02", "image_03", "velodyne_points", "oxts"}
    _check_times_covered(cap)


def test_stream_without_timestamps_takes_the_velodyne_times(native, drive_copy, tmp_path_factory):
    (drive_copy / "image_03" / "timestamps.txt").unlink()
    with pytest.warns(kitti.KITTIWarning, match="image_03 has no timestamps.txt: its frames take the times of "
                                                "velodyne_points/timestamps.txt by index"):
        cap = load_private(drive_copy, tmp_path_factory)
    velodyne_times = native.lidars["top"].timestamps_us + SWEEP_US // 2  # what its timestamps.txt holds
    np.testing.assert_array_equal(cap.cameras["image_03"].timestamps_us, velodyne_times)
    np.testing.assert_array_equal(cap.cameras["image_02"].timestamps_us, native.cameras["front"].timestamps_us)
    assert cap.metadata["kitti"]["timestamps_from"] == {"image_03": "velodyne_points/timestamps.txt"}


def test_symlinks_out_of_the_drive_are_refused(drive_copy, tmp_path):
    scan = drive_copy / "velodyne_points" / "data" / "0000000004.bin"
    shutil.move(scan, tmp_path / "scan.bin")
    scan.symlink_to(tmp_path / "scan.bin")
    (p,) = _error(drive_copy).problems
    assert p.file == f"{DRIVE}/velodyne_points/data/0000000004.bin" and "resolves outside the capture" in p.message
    scan.unlink()
    shutil.move(tmp_path / "scan.bin", scan)

    calib = drive_copy.parent / "calib_velo_to_cam.txt"
    shutil.move(calib, tmp_path / "calib.txt")
    calib.symlink_to(tmp_path / "calib.txt")
    (p,) = _error(drive_copy).problems
    assert p.file == "calib_velo_to_cam.txt" and "resolves outside the capture directory" in p.message
    calib.unlink()
    shutil.move(tmp_path / "calib.txt", calib)

    images = drive_copy / "image_03" / "data"
    shutil.move(images, tmp_path / "image_03_data")
    images.symlink_to(tmp_path / "image_03_data")
    (p,) = _error(drive_copy).problems
    assert p.file == f"{DRIVE}/image_03/data" and "resolves outside the capture directory" in p.message


def test_skip_missing_is_accepted_and_gaps_are_skipped_anyway(drive_copy, tmp_path_factory):
    (drive_copy / "image_02" / "data" / "0000000005.png").unlink()
    with helpers.private_cache_env(tmp_path_factory), pytest.warns(kitti.KITTIWarning, match="1 data files are missing"):
        cap = kitti.load(drive_copy, skip_missing=True)
    assert len(cap.cameras["image_02"].frames) == 9
