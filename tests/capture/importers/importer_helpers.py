"""What the importer tests share: the bundled sample, poses at times, and the comparisons of
an imported capture with the native one (intrinsics, projected points, projected sweeps).

A plain module, imported by name: pytest puts this folder on ``sys.path`` when it collects
a test file here (the test folders are not packages). Fixtures defined here (``native``,
``private_cache``) take effect in the test modules that import them.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from nurec_usd.capture import Camera, Capture, load_capture
from nurec_usd.capture.importers import detect_format, load_any
from nurec_usd.sensors import interpolate_poses

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "samples" / "tiny"


@pytest.fixture(scope="module")
def native() -> Capture:
    """The bundled sample, loaded natively."""
    return load_capture(SAMPLE)


# --------------------------------------------------------------------------------------
# The importers' cache (converted sweeps and sequences)


def private_cache_dir(tmp_path_factory) -> Path:
    """The test session's cache folder (``XDG_CACHE_HOME``)."""
    return tmp_path_factory.getbasetemp() / "xdg_cache"


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Converted sweeps go to a test cache, never to the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(private_cache_dir(tmp_path_factory)))


@contextmanager
def private_cache_env(tmp_path_factory):
    """The test cache inside the block (for module-scoped fixtures, which cannot use ``monkeypatch``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(private_cache_dir(tmp_path_factory)))
        yield


def load_private(path: Path, tmp_path_factory) -> Capture:
    """``load_any(path)`` with the test cache."""
    with private_cache_env(tmp_path_factory):
        return load_any(path)


# --------------------------------------------------------------------------------------
# Poses


def poses_at(key_us: np.ndarray, key_T: np.ndarray, t_us: np.ndarray | int) -> np.ndarray:
    """Interpolated poses (the capture format's slerp/lerp) at microsecond times. ``[...]`` -> ``[..., 4, 4]``."""
    t0 = int(key_us[0])
    return interpolate_poses(torch.from_numpy((key_us - t0) * 1e-6), torch.from_numpy(key_T),
                             torch.as_tensor((np.asarray(t_us, dtype=np.int64) - t0) * 1e-6)).numpy()


def rig_pose(cap: Capture, t_us: int) -> np.ndarray:
    """T_world_rig (re-centred world) at a time, interpolated like every consumer does."""
    return poses_at(cap.rig.timestamps_us, cap.rig.T_world_rig, t_us)


def camera_to_world(cap: Capture, cam: Camera, t_us: int) -> np.ndarray:
    """Absolute camera-to-world (OpenCV axes) in the coordinates the capture was written in."""
    T = rig_pose(cap, t_us) @ cam.T_rig_camera
    T[:3, 3] += cap.world_offset_m
    return T


def world_points(cap: Capture, step: int = 4) -> np.ndarray:
    """Lidar points of the first sweep in the absolute world: float64 [N, 3]."""
    lidar = cap.lidars["top"]
    sweep = lidar.load_sweep(0)
    T = rig_pose(cap, lidar.sweeps[0].timestamp_us) @ lidar.T_rig_lidar
    p = sweep.points[::step].astype(np.float64)
    return p @ T[:3, :3].T + T[:3, 3] + cap.world_offset_m


# --------------------------------------------------------------------------------------
# Imported against native


def assert_detected(importer, paths: list[Path], not_paths: list[Path]) -> list[Capture]:
    """Each of ``paths`` is detected as ``importer``'s format (by it and by ``detect_format``)
    and loads (through ``load_any``) to the same rig as ``importer.load(paths[0])``; none of
    ``not_paths`` is detected. Returns the captures loaded from ``paths``."""
    name = importer.__name__.rsplit(".", 1)[-1]
    reference = importer.load(paths[0])
    loaded = []
    for path in paths:
        assert importer.detect(path)
        assert detect_format(path) == name
        cap = load_any(path)
        np.testing.assert_array_equal(cap.rig.T_world_rig, reference.rig.T_world_rig)
        loaded.append(cap)
    for path in not_paths:
        assert not importer.detect(path)
    return loaded


def assert_same_intrinsics(imported: Camera, native_cam: Camera) -> None:
    assert imported.model == native_cam.model
    assert (imported.width, imported.height) == (native_cam.width, native_cam.height)
    optional = {"k3": 0.0, "k4": 0.0, "k5": 0.0, "k6": 0.0} if imported.model == "opencv" else {}
    a = {**optional, **imported.intrinsics}
    b = {**optional, **native_cam.intrinsics}
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], abs=1e-6), key


def assert_sfm_points(cap: Capture, truth: dict) -> None:
    """The imported SfM points (``metadata["sfm_points"]``, in the re-centred world) are the
    ones written (``truth["xyz"]``, absolute, and ``truth["rgb"]``)."""
    sfm = cap.metadata["sfm_points"]
    assert sfm["xyz"].dtype == np.float64 and sfm["rgb"].dtype == np.uint8
    np.testing.assert_allclose(sfm["xyz"] + cap.world_offset_m, truth["xyz"], atol=1e-6)
    np.testing.assert_array_equal(sfm["rgb"], truth["rgb"])


def assert_points_project_alike(native: Capture, cap: Capture, cameras: dict[str, Camera], points: np.ndarray) -> None:
    """``points`` (absolute world) through every frame of each native camera and of its
    imported one (``cameras``: native camera name -> imported camera): the same points in
    view, on the same pixels."""
    for cam_name, cam in cameras.items():
        native_cam = native.cameras[cam_name]
        native_model = native_cam.sensor_model(dtype=torch.float64)
        model = cam.sensor_model(dtype=torch.float64)
        seen = 0
        for native_frame, frame in zip(native_cam.frames, cam.frames):
            T_native = camera_to_world(native, native_cam, native_frame.timestamp_us)
            T_imported = camera_to_world(cap, cam, frame.timestamp_us)
            # Points in each camera frame, computed from the world each capture uses.
            p_native = (points - T_native[:3, 3]) @ T_native[:3, :3]
            p_imported = (points - T_imported[:3, 3]) @ T_imported[:3, :3]
            uv_n, ok_n = native_model.project(torch.from_numpy(p_native))
            uv_i, ok_i = model.project(torch.from_numpy(p_imported))
            assert torch.equal(ok_n, ok_i)
            torch.testing.assert_close(uv_i[ok_i], uv_n[ok_n], atol=1e-6, rtol=0)
            seen += int(ok_n.sum())
        assert seen > 1000, f"{cam_name}: too few points in view to compare ({seen})"


def sweep_pixels(cap: Capture, camera: str, lidar: str, k: int, t_frame: int,
                 keep: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """Sweep ``k``'s points (those ``keep`` selects), each through the rig pose at its own
    firing time, into ``camera`` at ``t_frame``: pixels ``[N, 2]`` and whether each is in
    view (and over 0.5 m ahead)."""
    cam, lid = cap.cameras[camera], cap.lidars[lidar]
    sweep = lid.load_sweep(k)
    times, per_point = np.unique(sweep.timestamps_us, return_inverse=True)
    T_w_l = (poses_at(cap.rig.timestamps_us, cap.rig.T_world_rig, times) @ lid.T_rig_lidar)[per_point][keep]
    T_c_w = np.linalg.inv(poses_at(cap.rig.timestamps_us, cap.rig.T_world_rig, t_frame) @ cam.T_rig_camera)
    T = T_c_w @ T_w_l
    p = np.einsum("nij,nj->ni", T[:, :3, :3], sweep.points[keep].astype(np.float64)) + T[:, :3, 3]
    uv, ok = cam.sensor_model(dtype=torch.float64).project(torch.from_numpy(p))
    return uv.numpy(), ok.numpy() & (p[:, 2] > 0.5)


def assert_sweeps_land_alike(native: Capture, cap: Capture, cameras: tuple[str, str], lidars: tuple[str, str],
                             atol: float, kept: list[np.ndarray] | None = None, sweeps=(0, 4, 9)) -> None:
    """Sweeps of the native and the imported lidar (``lidars``: native id, imported id), each
    into the camera (``cameras``, likewise) at the native frame of the same index: the same
    points in view, on the same pixels (within ``atol``).

    ``kept``: per sweep, which native points the imported sweep holds (by default all of
    them, in the same order).
    """
    compared = 0
    for k in sweeps:
        t_frame = int(native.cameras[cameras[0]].timestamps_us[k])
        uv_n, ok_n = sweep_pixels(native, cameras[0], lidars[0], k, t_frame, slice(None) if kept is None else kept[k])
        uv_i, ok_i = sweep_pixels(cap, cameras[1], lidars[1], k, t_frame)
        assert len(uv_n) == len(uv_i)  # same points, same order
        both = ok_n & ok_i
        assert both.sum() > 100 and (ok_n != ok_i).sum() <= 0.001 * len(ok_n)
        np.testing.assert_allclose(uv_i[both], uv_n[both], atol=atol)
        compared += int(both.sum())
    assert compared > 1000
