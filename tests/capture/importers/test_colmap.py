"""COLMAP importer: a sparse model written from the bundled synth sample reads back to the same cameras.

The fixtures convert ``samples/tiny`` into a COLMAP workspace (text and binary models) the way
COLMAP writes them: world-to-camera quaternion + translation poses and principal points in
COLMAP's pixel convention (centre of the top-left pixel at (0.5, 0.5)). Importing it back
must give the native poses and intrinsics, and 3D points (the sample's lidar points) must
project onto the same pixels through the imported cameras as through the native ones.
"""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

if str(Path(__file__).resolve().parent) not in sys.path:  # also when loaded by file path (tests/train)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import importer_helpers as helpers  # noqa: E402
from importer_helpers import SAMPLE, camera_to_world, world_points  # noqa: E402
from nurec_usd.capture import Camera, Capture, CaptureError  # noqa: E402
from nurec_usd.capture.importers import colmap  # noqa: E402
from nurec_usd.sensors.se3 import matrix_to_quat  # noqa: E402

# sample camera -> (COLMAP camera id, COLMAP model); ids deliberately non-contiguous.
CAMERAS = {"front": (1, "PINHOLE"), "front_left": (5, "FULL_OPENCV"), "rear_fisheye": (9, "OPENCV_FISHEYE")}
MODEL_IDS = {"SIMPLE_PINHOLE": 0, "PINHOLE": 1, "SIMPLE_RADIAL": 2, "RADIAL": 3, "OPENCV": 4, "OPENCV_FISHEYE": 5,
             "FULL_OPENCV": 6, "FOV": 7, "SIMPLE_RADIAL_FISHEYE": 8, "RADIAL_FISHEYE": 9, "THIN_PRISM_FISHEYE": 10,
             "SIMPLE_FISHEYE": 14, "FISHEYE": 15}

native = helpers.native  # the fixture: the bundled sample, loaded natively


def colours(n: int) -> np.ndarray:
    return (np.arange(3 * n).reshape(n, 3) * 37 % 256).astype(np.uint8)


# --------------------------------------------------------------------------------------
# Writing COLMAP models (our own writer, from COLMAP's documented layout)


def colmap_params(cam: Camera, model: str) -> list[float]:
    """COLMAP parameters of a native camera; principal point moved to COLMAP's pixel convention."""
    i = cam.intrinsics
    cx, cy = i["cx"] + 0.5, i["cy"] + 0.5
    if model == "PINHOLE":
        return [i["fx"], i["fy"], cx, cy]
    if model == "FULL_OPENCV":
        return [i["fx"], i["fy"], cx, cy, i["k1"], i["k2"], i["p1"], i["p2"],
                i.get("k3", 0.0), i.get("k4", 0.0), i.get("k5", 0.0), i.get("k6", 0.0)]
    if model == "OPENCV_FISHEYE":
        return [i["fx"], i["fy"], cx, cy, i["k1"], i["k2"], i["k3"], i["k4"]]
    raise AssertionError(model)


def world_to_camera(T_world_camera: np.ndarray) -> tuple[list[float], list[float]]:
    """COLMAP's pose of an image: qvec (w, x, y, z) and tvec of world -> camera."""
    R = T_world_camera[:3, :3].T
    t = -R @ T_world_camera[:3, 3]
    q = matrix_to_quat(torch.from_numpy(R)).numpy()
    return q.tolist(), t.tolist()


def write_model(model_dir: Path, binary: bool, cameras: list[tuple[int, str, int, int, list[float]]],
                images: list[tuple[int, list[float], list[float], int, str]],
                points: tuple[np.ndarray, np.ndarray] | None) -> None:
    """cameras: (id, model, w, h, params); images: (id, qvec, tvec, camera_id, name); points: (xyz, rgb)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    if binary:
        with open(model_dir / "cameras.bin", "wb") as f:
            f.write(struct.pack("<Q", len(cameras)))
            for cid, model, w, h, params in cameras:
                f.write(struct.pack("<IiQQ", cid, MODEL_IDS[model], w, h))
                f.write(struct.pack(f"<{len(params)}d", *params))
        with open(model_dir / "images.bin", "wb") as f:
            f.write(struct.pack("<Q", len(images)))
            for k, (iid, q, t, cid, name) in enumerate(images):
                f.write(struct.pack("<I7dI", iid, *q, *t, cid))
                f.write(name.encode() + b"\0")
                n2d = k % 3  # some images with observations, some without
                f.write(struct.pack("<Q", n2d))
                for j in range(n2d):
                    f.write(struct.pack("<ddQ", 10.0 + j, 20.0, 2**64 - 1 if j else j))
        if points is not None:
            with open(model_dir / "points3D.bin", "wb") as f:
                f.write(struct.pack("<Q", len(points[0])))
                for k, (p, c) in enumerate(zip(*points)):
                    f.write(struct.pack("<Q3d3BdQ", 1000 + k, *p, *c, 0.5, 2))
                    f.write(struct.pack("<IIII", 1, k, 2, k))
        return
    with open(model_dir / "cameras.txt", "w") as f:
        f.write("# Camera list with one line of data per camera:\n#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n")
        f.write(f"# Number of cameras: {len(cameras)}\n")
        for cid, model, w, h, params in cameras:
            f.write(" ".join([str(cid), model, str(w), str(h), *map(repr, params)]) + "\n")
    with open(model_dir / "images.txt", "w") as f:
        f.write("# Image list with two lines of data per image:\n")
        f.write("#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n#   POINTS2D[] as (X, Y, POINT3D_ID)\n")
        for k, (iid, q, t, cid, name) in enumerate(images):
            f.write(" ".join([str(iid), *map(repr, q), *map(repr, t), str(cid), name]) + "\n")
            # An empty POINTS2D line for some images: the reader must still take it as that image's.
            f.write(" ".join(f"{10.0 + j} 20.0 {-1 if j else 1000}" for j in range(k % 3)) + "\n")
    if points is not None:
        with open(model_dir / "points3D.txt", "w") as f:
            f.write("# 3D point list with one line of data per point:\n")
            for k, (p, c) in enumerate(zip(*points)):
                f.write(" ".join([str(1000 + k), *map(repr, p.tolist()), *map(str, c.tolist()), "0.5", f"1 {k} 2 {k}"])
                        + "\n")


def write_workspace(native: Capture, root: Path, binary: bool) -> dict:
    """A COLMAP workspace of the sample's front / front_left / rear_fisheye cameras.

    Returns what was written: image name -> (native camera id, absolute camera-to-world),
    and the absolute points with their colours.
    """
    cameras, images, truth = [], [], {}
    image_id = 300
    for cam_name, (cid, model) in CAMERAS.items():
        cam = native.cameras[cam_name]
        cameras.append((cid, model, cam.width, cam.height, colmap_params(cam, model)))
        for frame in cam.frames:
            name = f"{cid}/{frame.timestamp_us}.png"
            (root / "images" / str(cid)).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(frame.image_path, root / "images" / name)
            T = camera_to_world(native, cam, frame.timestamp_us)
            q, t = world_to_camera(T)
            images.append((image_id, q, t, cid, name))
            truth[name] = (cam_name, T)
            image_id -= 7  # ids unordered, as COLMAP's are
    images.reverse()  # file order is not name order: the importer must sort by name
    xyz = world_points(native)
    rgb = colours(len(xyz))
    write_model(root / "sparse" / "0", binary, cameras, images, (xyz, rgb))
    return {"images": truth, "xyz": xyz, "rgb": rgb}


@pytest.fixture(scope="module", params=["txt", "bin"])
def workspace(request, native, tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp(f"colmap_{request.param}") / "scene"
    return root, write_workspace(native, root, binary=request.param == "bin")


# --------------------------------------------------------------------------------------
# Round trip


def test_poses_intrinsics_and_points_round_trip(workspace, native):
    root, truth = workspace
    cap = colmap.load(root)
    assert cap.root == root and cap.name == "scene"
    assert list(cap.cameras) == ["camera_1", "camera_5", "camera_9"]
    assert not cap.lidars and not cap.tracks
    names = sorted(truth["images"])
    # One rig key per image, sorted by name, 0.1 s apart; the world starts at the first image.
    np.testing.assert_array_equal(cap.rig.timestamps_us,
                                  colmap.START_US + colmap.FRAME_INTERVAL_US * np.arange(len(names)))
    np.testing.assert_allclose(cap.rig.T_world_rig[0, :3, 3], 0.0, atol=1e-12)
    np.testing.assert_allclose(cap.world_offset_m, truth["images"][names[0]][1][:3, 3], atol=1e-6)

    for cam_name, (cid, _) in CAMERAS.items():
        cam = cap.cameras[f"camera_{cid}"]
        native_cam = native.cameras[cam_name]
        helpers.assert_same_intrinsics(cam, native_cam)
        np.testing.assert_array_equal(cam.T_rig_camera, np.eye(4))
        assert cam.rolling_shutter.direction == "global" and cam.rolling_shutter.readout_time_us == 0
        assert len(cam.frames) == len(native_cam.frames)
        assert set(cam.timestamps_us) <= set(cap.rig.timestamps_us.tolist())
        for frame in cam.frames:
            name = frame.image_path.relative_to(root / "images").as_posix()
            written_cam, T_true = truth["images"][name]
            assert written_cam == cam_name
            assert frame.timestamp_us == colmap.START_US + colmap.FRAME_INTERVAL_US * names.index(name)
            np.testing.assert_allclose(camera_to_world(cap, cam, frame.timestamp_us), T_true, atol=1e-6)
            assert frame.mask_path is None
    assert cap.cameras["camera_1"].frames[0].load_image().shape == (180, 320, 3)

    helpers.assert_sfm_points(cap, truth)
    assert cap.metadata["source_format"] == "colmap"


def test_points_project_onto_the_same_pixels(workspace, native):
    root, _ = workspace
    cap = colmap.load(root)
    cameras = {cam_name: cap.cameras[f"camera_{cid}"] for cam_name, (cid, _) in CAMERAS.items()}
    helpers.assert_points_project_alike(native, cap, cameras, world_points(native, step=2))


def test_detects_the_workspace_its_sparse_folder_and_the_model_folder(workspace, native):
    root, truth = workspace
    loaded = helpers.assert_detected(colmap, [root, root / "sparse", root / "sparse" / "0"], [SAMPLE, root / "images"])
    assert all(cap.root == root for cap in loaded)


# --------------------------------------------------------------------------------------
# Every supported COLMAP model against COLMAP's own projection formulas


def colmap_project(model: str, params: list[float], p: np.ndarray) -> np.ndarray:
    """Pixels (COLMAP convention) of camera-frame points, following colmap/sensor/models.h."""
    u, v = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
    names = {
        "SIMPLE_PINHOLE": "f cx cy", "PINHOLE": "fx fy cx cy", "SIMPLE_RADIAL": "f cx cy k",
        "RADIAL": "f cx cy k1 k2", "OPENCV": "fx fy cx cy k1 k2 p1 p2",
        "FULL_OPENCV": "fx fy cx cy k1 k2 p1 p2 k3 k4 k5 k6", "SIMPLE_RADIAL_FISHEYE": "f cx cy k",
        "RADIAL_FISHEYE": "f cx cy k1 k2", "OPENCV_FISHEYE": "fx fy cx cy k1 k2 k3 k4",
        "SIMPLE_FISHEYE": "f cx cy", "FISHEYE": "fx fy cx cy",
    }[model].split()
    c = dict(zip(names, params))
    fx, fy = c.get("fx", c.get("f")), c.get("fy", c.get("f"))
    k1, k2 = c.get("k1", c.get("k", 0.0)), c.get("k2", 0.0)
    if "FISHEYE" in model:
        r = np.hypot(u, v)
        theta = np.arctan(r)
        t2 = theta * theta
        thetad = theta * (1 + k1 * t2 + k2 * t2**2 + c.get("k3", 0.0) * t2**3 + c.get("k4", 0.0) * t2**4)
        ud, vd = u * thetad / r, v * thetad / r
    else:
        r2 = u * u + v * v
        radial = ((1 + k1 * r2 + k2 * r2**2 + c.get("k3", 0.0) * r2**3)
                  / (1 + c.get("k4", 0.0) * r2 + c.get("k5", 0.0) * r2**2 + c.get("k6", 0.0) * r2**3))
        p1, p2 = c.get("p1", 0.0), c.get("p2", 0.0)
        ud = u * radial + 2 * p1 * u * v + p2 * (r2 + 2 * u * u)
        vd = v * radial + 2 * p2 * u * v + p1 * (r2 + 2 * v * v)
    return np.stack([fx * ud + c["cx"], fy * vd + c["cy"]], axis=1)


MODEL_PARAMS = {
    "SIMPLE_PINHOLE": [80.0, 32.0, 24.0],
    "PINHOLE": [80.0, 82.0, 31.0, 25.0],
    "SIMPLE_RADIAL": [80.0, 32.0, 24.0, -0.05],
    "RADIAL": [80.0, 32.0, 24.0, -0.05, 0.01],
    "OPENCV": [80.0, 82.0, 31.0, 25.0, -0.05, 0.01, 0.001, -0.002],
    "FULL_OPENCV": [80.0, 82.0, 31.0, 25.0, -0.05, 0.01, 0.001, -0.002, 0.003, 0.02, 0.001, 0.0005],
    "SIMPLE_RADIAL_FISHEYE": [40.0, 32.0, 24.0, 0.02],
    "RADIAL_FISHEYE": [40.0, 32.0, 24.0, 0.02, -0.004],
    "OPENCV_FISHEYE": [40.0, 41.0, 31.0, 25.0, 0.02, -0.004, 0.001, -0.0002],
    "SIMPLE_FISHEYE": [40.0, 32.0, 24.0],
    "FISHEYE": [40.0, 41.0, 31.0, 25.0],
}
EXPECTED_MODEL = {"SIMPLE_PINHOLE": "pinhole", "PINHOLE": "pinhole", "SIMPLE_RADIAL": "opencv", "RADIAL": "opencv",
                  "OPENCV": "opencv", "FULL_OPENCV": "opencv"}


def single_camera_workspace(root: Path, model: str, params: list[float], binary: bool = False,
                            width: int = 64, height: int = 48) -> Path:
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (width, height)).save(root / "images" / "a.png")
    write_model(root / "sparse" / "0", binary, [(7, model, width, height, params)],
                [(1, [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 7, "a.png")], None)
    return root


@pytest.mark.parametrize("model", list(MODEL_PARAMS))
def test_each_supported_model_projects_like_colmap(model, tmp_path):
    params = MODEL_PARAMS[model]
    cap = colmap.load(single_camera_workspace(tmp_path / "ws", model, params, binary=model.endswith("FISHEYE")))
    cam = cap.cameras["camera_7"]
    assert cam.model == EXPECTED_MODEL.get(model, "opencv_fisheye")
    assert "sfm_points" not in cap.metadata  # no points3D file: nothing to initialise from
    rng = np.random.default_rng(0)
    z = rng.uniform(1.0, 3.0, 200)  # directions that land on the 64x48 image for every model
    p = np.stack([rng.uniform(-0.3, 0.3, 200) * z, rng.uniform(-0.25, 0.25, 200) * z, z], axis=1)
    uv, valid = cam.sensor_model(dtype=torch.float64).project(torch.from_numpy(p))
    expected = colmap_project(model, params, p) - 0.5  # COLMAP's pixel centres are at +0.5
    assert bool(valid.all())
    np.testing.assert_allclose(uv.numpy(), expected, atol=1e-9)


def test_principal_point_moves_to_our_pixel_convention(tmp_path):
    # COLMAP's image centre for a 64x48 image is (32, 24) (corner convention); ours is (31.5, 23.5).
    cap = colmap.load(single_camera_workspace(tmp_path / "ws", "SIMPLE_PINHOLE", [80.0, 32.0, 24.0]))
    assert cap.cameras["camera_7"].intrinsics == {"fx": 80.0, "fy": 80.0, "cx": 31.5, "cy": 23.5}


def test_unused_camera_with_an_unsupported_model_is_dropped(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0])
    with open(root / "sparse" / "0" / "cameras.txt", "a") as f:
        f.write("8 FOV 64 48 80 80 32 24 0.9\n")
    assert list(colmap.load(root).cameras) == ["camera_7"]


# --------------------------------------------------------------------------------------
# Malformed models


def only_problem(err: pytest.ExceptionInfo) -> str:
    assert len(err.value.problems) >= 1
    return str(err.value)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("model", ["FOV", "THIN_PRISM_FISHEYE"])
def test_unsupported_camera_model_names_file_camera_and_model(model, binary, tmp_path):
    params = [80.0, 80.0, 32.0, 24.0, 0.9] if model == "FOV" else [80.0, 80.0, 32.0, 24.0] + [0.0] * 8
    root = single_camera_workspace(tmp_path / "ws", model, params, binary=binary)
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert problem.file == f"sparse/0/cameras.{'bin' if binary else 'txt'}"
    assert "camera 7" in problem.message and model in problem.message


def test_unknown_model_id_in_binary(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0], binary=True)
    path = root / "sparse" / "0" / "cameras.bin"
    data = bytearray(path.read_bytes())
    data[12:16] = struct.pack("<i", 99)  # after uint64 count and uint32 camera id
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert problem.file == "sparse/0/cameras.bin" and "camera 7" in problem.message and "99" in problem.message


@pytest.mark.parametrize("name", ["cameras.bin", "images.bin", "points3D.bin"])
def test_truncated_binary_file_is_named(name, native, tmp_path):
    root = tmp_path / "scene"
    write_workspace(native, root, binary=True)
    path = root / "sparse" / "0" / name
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert problem.file == f"sparse/0/{name}"
    assert "truncated" in problem.message


def test_trailing_bytes_are_reported(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0], binary=True)
    with open(root / "sparse" / "0" / "images.bin", "ab") as f:
        f.write(b"\0" * 3)
    with pytest.raises(CaptureError, match="sparse/0/images.bin: 3 unexpected bytes"):
        colmap.load(root)


@pytest.mark.parametrize("binary", [False, True])
def test_missing_image_file_is_named(binary, native, tmp_path):
    root = tmp_path / "scene"
    truth = write_workspace(native, root, binary=binary)
    missing = sorted(truth["images"])[4]
    (root / "images" / missing).unlink()
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert problem.file == f"sparse/0/images.{'bin' if binary else 'txt'}"
    assert f"images/{missing}" in problem.message and "does not exist" in problem.message


def test_bad_text_line_is_named(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0])
    path = root / "sparse" / "0" / "images.txt"
    path.write_text(path.read_text().replace("1 1.0 0.0", "1 one 0.0"))
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert problem.file == "sparse/0/images.txt" and problem.field == "line 4"


def test_wrong_parameter_count_and_missing_camera(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0])
    cams = root / "sparse" / "0" / "cameras.txt"
    cams.write_text(cams.read_text().replace("7 PINHOLE 64 48 80.0 80.0 32.0 24.0", "7 PINHOLE 64 48 80.0 32.0 24.0"))
    with pytest.raises(CaptureError, match=r"cameras.txt: line 4: camera 7: PINHOLE has 4 parameters"):
        colmap.load(root)
    cams.write_text("3 PINHOLE 64 48 80.0 80.0 32.0 24.0\n")
    with pytest.raises(CaptureError, match="refers to camera 7, which sparse/0/cameras.txt does not define"):
        colmap.load(root)


def test_not_a_colmap_folder(tmp_path):
    assert not colmap.detect(tmp_path)
    with pytest.raises(CaptureError, match="no COLMAP model"):
        colmap.load(tmp_path)


# --------------------------------------------------------------------------------------
# Paths stay inside the workspace; trimmed copies (--skip-missing)


def _name_image(root: Path, name: str) -> None:
    """Make the one image of a single-camera (text) workspace carry ``name``."""
    path = root / "sparse" / "0" / "images.txt"
    path.write_text(path.read_text().replace(" 7 a.png", f" 7 {name}"))


@pytest.mark.parametrize("name, words", [
    ("../../../outside.png", "leaves the capture directory ('..')"),
    ("/etc/hostname", "is absolute"),
    ("link.png", "resolves outside the capture directory"),
    ("dir/secret.png", "resolves outside the capture directory"),
])
def test_image_names_are_confined_to_the_workspace(name, words, tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0])
    Image.new("RGB", (64, 48)).save(tmp_path / "outside.png")
    (tmp_path / "secret").mkdir()
    Image.new("RGB", (64, 48)).save(tmp_path / "secret" / "secret.png")
    (root / "images" / "link.png").symlink_to(tmp_path / "outside.png")
    (root / "images" / "dir").symlink_to(tmp_path / "secret")
    _name_image(root, name)
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == ("sparse/0/images.txt", "line 4") and words in problem.message


def test_symlinked_model_file_outside_is_refused(tmp_path):
    root = single_camera_workspace(tmp_path / "ws", "PINHOLE", [80.0, 80.0, 32.0, 24.0])
    shutil.move(root / "sparse" / "0" / "cameras.txt", tmp_path / "cameras.txt")
    (root / "sparse" / "0" / "cameras.txt").symlink_to(tmp_path / "cameras.txt")
    with pytest.raises(CaptureError, match="sparse/0/cameras.txt: path 'sparse/0/cameras.txt' resolves outside"):
        colmap.load(root)


def test_skip_missing_drops_the_missing_images(native, tmp_path):
    from nurec_usd.capture.missing import MissingFilesWarning

    root = tmp_path / "scene"
    truth = write_workspace(native, root, binary=True)
    gone = sorted(truth["images"])[2:5]
    for name in gone:
        (root / "images" / name).unlink()
    with pytest.raises(CaptureError) as err:
        colmap.load(root)
    assert len(err.value.problems) == 3 and str(err.value).splitlines()[-1].startswith("hint: 3 files are missing;")
    assert "--skip-missing" in str(err.value).splitlines()[-1]
    with pytest.warns(MissingFilesWarning, match=r"left out 3 frames whose file is missing \(images/"):
        cap = colmap.load(root, skip_missing=True)
    frames = [f.image_path for cam in cap.cameras.values() for f in cam.frames]
    assert len(frames) == len(truth["images"]) - 3 and not any(root / "images" / n in frames for n in gone)
    assert "left out 3 frames" in cap.metadata["warnings"][0]
