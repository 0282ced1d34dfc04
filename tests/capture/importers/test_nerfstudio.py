"""nerfstudio importer: a transforms.json written from the bundled synth sample reads back to the same cameras.

The fixtures convert ``samples/tiny`` into nerfstudio's conventions: camera-to-world
``transform_matrix`` in OpenGL camera axes (x right, y up, z back), principal points in
nerfstudio's pixel convention (pixel centres at index + 0.5), intrinsics shared at the top
level or given per frame, and a PLY of sparse points. Importing it back must give the native
poses and intrinsics, and 3D points (the sample's lidar points) must project onto the same
pixels through the imported cameras as through the native ones.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

if str(Path(__file__).resolve().parent) not in sys.path:  # also when loaded by file path (tests/train)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import importer_helpers as helpers  # noqa: E402
from importer_helpers import SAMPLE, camera_to_world, world_points  # noqa: E402
from nurec_usd.capture import Camera, Capture, CaptureError  # noqa: E402
from nurec_usd.capture.importers import colmap, nerfstudio  # noqa: E402

GL_FROM_CV = np.diag([1.0, -1.0, -1.0, 1.0])  # its own inverse

native = helpers.native  # the fixture: the bundled sample, loaded natively


# --------------------------------------------------------------------------------------
# Writing transforms.json (our own writer, from nerfstudio's documented conventions)


def ns_intrinsics(cam: Camera) -> dict:
    """nerfstudio intrinsics of a native camera; principal point in nerfstudio's pixel convention."""
    i = cam.intrinsics
    out = {"w": cam.width, "h": cam.height, "fl_x": i["fx"], "fl_y": i["fy"], "cx": i["cx"] + 0.5, "cy": i["cy"] + 0.5}
    if cam.model == "pinhole":
        out.update(camera_model="OPENCV", k1=0.0, k2=0.0, p1=0.0, p2=0.0)  # as ns-process-data writes PINHOLE-like data
    elif cam.model == "opencv":
        out.update(camera_model="OPENCV", k1=i["k1"], k2=i["k2"], k3=i.get("k3", 0.0), p1=i["p1"], p2=i["p2"])
    elif cam.model == "opencv_fisheye":
        out.update(camera_model="OPENCV_FISHEYE", k1=i["k1"], k2=i["k2"], k3=i["k3"], k4=i["k4"])
    else:
        raise AssertionError(cam.model)
    return out


def write_ply_ascii(path: Path, xyz: np.ndarray, rgb: np.ndarray) -> None:
    lines = ["ply", "format ascii 1.0", "comment written by the test", f"element vertex {len(xyz)}",
             "property double x", "property double y", "property double z",
             "property uint8 red", "property uint8 green", "property uint8 blue", "end_header"]
    lines += [" ".join([*map(repr, p.tolist()), *map(str, c.tolist())]) for p, c in zip(xyz, rgb)]
    path.write_text("\n".join(lines) + "\n")


def write_ply_binary(path: Path, xyz: np.ndarray, rgb: np.ndarray) -> None:
    # A face element before the vertices (fixed size) and float colours in [0, 1]: both must be handled.
    header = ["ply", "format binary_little_endian 1.0", "element camera 1", "property float focal",
              f"element vertex {len(xyz)}", "property double x", "property double y", "property double z",
              "property float red", "property float green", "property float blue", "end_header"]
    table = np.zeros(len(xyz), dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8"),
                                      ("red", "<f4"), ("green", "<f4"), ("blue", "<f4")])
    for k, name in enumerate("xyz"):
        table[name] = xyz[:, k]
    for k, name in enumerate(("red", "green", "blue")):
        table[name] = rgb[:, k] / 255.0
    path.write_bytes(("\n".join(header) + "\n").encode() + np.float32(1.0).tobytes() + table.tobytes())


def write_dataset(native: Capture, root: Path, cameras: tuple[str, ...], per_frame: bool,
                  ply: str | None = "ascii", masks: bool = False) -> dict:
    """A nerfstudio dataset of some sample cameras.

    With ``per_frame`` every frame carries its own intrinsics (and camera_model); otherwise the
    (single) camera's intrinsics sit at the top level. Returns file_path -> (camera, absolute
    camera-to-world) and the points written to the PLY.
    """
    root.mkdir(parents=True)
    frames, truth = [], {}
    for cam_name in cameras:
        cam = native.cameras[cam_name]
        (root / "images" / cam_name).mkdir(parents=True)
        for k, frame in enumerate(cam.frames):
            rel = f"images/{cam_name}/{frame.timestamp_us}.png"
            shutil.copyfile(frame.image_path, root / rel)
            T = camera_to_world(native, cam, frame.timestamp_us)
            entry = {"file_path": rel, "transform_matrix": (T @ GL_FROM_CV).tolist(), "colmap_im_id": k}
            if per_frame:
                entry.update(ns_intrinsics(cam))
            if masks and k % 2 == 0:
                (root / "masks" / cam_name).mkdir(parents=True, exist_ok=True)
                mask_rel = f"masks/{cam_name}/{frame.timestamp_us}.png"
                Image.new("L", (cam.width, cam.height), 255).save(root / mask_rel)
                entry["mask_path"] = mask_rel
            frames.append(entry)
            truth[rel] = (cam_name, T)
    frames.reverse()  # file order is not name order: the importer must sort by file_path
    meta: dict = {"camera_model": "OPENCV"}
    if not per_frame:
        (cam_name,) = cameras
        meta.update(ns_intrinsics(native.cameras[cam_name]))
    meta["frames"] = frames
    xyz = world_points(native)
    rgb = (np.arange(3 * len(xyz)).reshape(-1, 3) * 53 % 256).astype(np.uint8)
    if ply is not None:
        meta["ply_file_path"] = "sparse_pc.ply"
        (write_ply_ascii if ply == "ascii" else write_ply_binary)(root / "sparse_pc.ply", xyz, rgb)
    (root / "transforms.json").write_text(json.dumps(meta, indent=2))
    return {"frames": truth, "xyz": xyz, "rgb": rgb}


VARIANTS = {
    # shared intrinsics (top level), one camera, the opencv one, ascii PLY
    "shared": dict(cameras=("front_left",), per_frame=False, ply="ascii", masks=True),
    # per-frame intrinsics: pinhole, opencv and fisheye frames in one file, binary PLY
    "per_frame": dict(cameras=("front", "front_left", "rear_fisheye"), per_frame=True, ply="binary"),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def dataset(request, native, tmp_path_factory) -> tuple[Path, dict, dict]:
    root = tmp_path_factory.mktemp(f"ns_{request.param}") / "scene"
    variant = VARIANTS[request.param]
    return root, write_dataset(native, root, **variant), variant


# --------------------------------------------------------------------------------------
# Round trip


def camera_of(cap: Capture, root: Path, truth: dict) -> dict[str, Camera]:
    """native camera name -> imported camera, found through the frames' files."""
    out = {}
    for cam in cap.cameras.values():
        names = {truth["frames"][f.image_path.relative_to(root).as_posix()][0] for f in cam.frames}
        assert len(names) == 1, f"{cam.id} mixes images of {names}"
        out[names.pop()] = cam
    return out


def test_poses_intrinsics_and_points_round_trip(dataset, native):
    root, truth, variant = dataset
    cap = nerfstudio.load(root)
    assert cap.root == root and cap.name == "scene"
    assert not cap.lidars and not cap.tracks
    # Cameras numbered in file-name order: images/front < images/front_left < images/rear_fisheye.
    assert list(cap.cameras) == [f"camera_{k}" for k in range(len(variant["cameras"]))]
    by_native = camera_of(cap, root, truth)
    assert list(by_native) == list(variant["cameras"])

    names = sorted(truth["frames"])
    np.testing.assert_array_equal(cap.rig.timestamps_us,
                                  colmap.START_US + colmap.FRAME_INTERVAL_US * np.arange(len(names)))
    np.testing.assert_allclose(cap.rig.T_world_rig[0, :3, 3], 0.0, atol=1e-12)
    np.testing.assert_allclose(cap.world_offset_m, truth["frames"][names[0]][1][:3, 3], atol=1e-6)
    for cam_name, cam in by_native.items():
        helpers.assert_same_intrinsics(cam, native.cameras[cam_name])
        np.testing.assert_array_equal(cam.T_rig_camera, np.eye(4))
        assert cam.rolling_shutter.direction == "global"
        assert len(cam.frames) == len(native.cameras[cam_name].frames)
        for k, frame in enumerate(cam.frames):
            rel = frame.image_path.relative_to(root).as_posix()
            assert frame.timestamp_us == colmap.START_US + colmap.FRAME_INTERVAL_US * names.index(rel)
            np.testing.assert_allclose(camera_to_world(cap, cam, frame.timestamp_us), truth["frames"][rel][1],
                                       atol=1e-6)
            if variant.get("masks"):
                assert (frame.mask_path is not None) == (k % 2 == 0)
                if frame.mask_path is not None:
                    assert frame.load_mask().all()
            else:
                assert frame.mask_path is None

    helpers.assert_sfm_points(cap, truth)
    assert cap.metadata["source_format"] == "nerfstudio"


def test_points_project_onto_the_same_pixels(dataset, native):
    root, truth, _ = dataset
    cap = nerfstudio.load(root)
    helpers.assert_points_project_alike(native, cap, camera_of(cap, root, truth), world_points(native, step=2))


def test_detects_the_folder_and_the_file(dataset):
    root, _, _ = dataset
    helpers.assert_detected(nerfstudio, [root, root / "transforms.json"], [SAMPLE, root / "images"])


# --------------------------------------------------------------------------------------
# Conventions and defaults, on a hand-written one-image file


def one_image(root: Path, meta: dict, frame: dict | None = None, size: tuple[int, int] = (64, 48)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "images").mkdir(exist_ok=True)
    Image.new("RGB", size).save(root / "images" / "a.png")
    entry = {"file_path": "images/a.png", "transform_matrix": np.eye(4).tolist(), **(frame or {})}
    (root / "transforms.json").write_text(json.dumps({**meta, "frames": [entry]}))
    return root


def test_opengl_axes_and_pixel_convention(tmp_path):
    # The identity OpenGL pose looks down world -z with world +y up: in OpenCV axes the camera's
    # y (down) is world -y and its z (forward) is world -z.
    cap = nerfstudio.load(one_image(tmp_path / "a", {"fl_x": 50.0, "fl_y": 50.0, "cx": 32.0, "cy": 24.0,
                                                      "w": 64, "h": 48, "camera_model": "PINHOLE"}))
    cam = cap.cameras["camera_0"]
    np.testing.assert_array_equal(cap.rig.T_world_rig[0], np.diag([1.0, -1.0, -1.0, 1.0]))
    # nerfstudio's image centre (32, 24) for 64x48 pixels is ours (31.5, 23.5).
    assert cam.model == "pinhole" and cam.intrinsics == {"fx": 50.0, "fy": 50.0, "cx": 31.5, "cy": 23.5}


def test_blender_style_defaults(tmp_path):
    # camera_angle_x only, no size, no principal point, a file_path without suffix.
    root = one_image(tmp_path / "b", {"camera_angle_x": 2 * math.atan(0.5)}, {"file_path": "images/a"})
    cam = nerfstudio.load(root).cameras["camera_0"]
    assert (cam.width, cam.height) == (64, 48) and cam.frames[0].image_path == root / "images" / "a.png"
    assert cam.intrinsics == pytest.approx({"fx": 64.0, "fy": 64.0, "cx": 31.5, "cy": 23.5})


def test_frames_with_identical_intrinsics_share_a_camera(native, tmp_path):
    root = tmp_path / "c"
    write_dataset(native, root, cameras=("front", "front_left"), per_frame=True, ply=None)
    cap = nerfstudio.load(root)
    assert [len(c.frames) for c in cap.cameras.values()] == [10, 10]
    assert "sfm_points" not in cap.metadata


# --------------------------------------------------------------------------------------
# Malformed files


def test_broken_json_names_the_file(tmp_path):
    root = one_image(tmp_path / "d", {"fl_x": 50.0, "w": 64, "h": 48})
    (root / "transforms.json").write_text('{"frames": [')
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    (problem,) = err.value.problems
    assert problem.file == "transforms.json" and "not valid JSON" in problem.message


@pytest.mark.parametrize("model", ["EQUIRECTANGULAR", "FISHEYE624"])
def test_unknown_camera_model_is_named(model, tmp_path):
    root = one_image(tmp_path / "e", {"fl_x": 50.0, "w": 64, "h": 48, "camera_model": model})
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    (problem,) = err.value.problems
    assert problem.file == "transforms.json" and problem.field == "camera_model" and model in problem.message


def test_per_frame_unknown_model_names_the_frame(tmp_path):
    root = one_image(tmp_path / "e2", {"fl_x": 50.0, "w": 64, "h": 48}, {"camera_model": "VR180_L"})
    with pytest.raises(CaptureError, match=r"transforms.json: frames\[0\].camera_model: camera model 'VR180_L'"):
        nerfstudio.load(root)


def test_missing_image_file_is_named(native, tmp_path):
    root = tmp_path / "f"
    truth = write_dataset(native, root, cameras=("front",), per_frame=False, ply=None)
    missing = sorted(truth["frames"])[3]
    (root / missing).unlink()
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    (problem,) = err.value.problems
    assert problem.file == "transforms.json" and problem.field.endswith(".file_path")
    assert missing in problem.message and "does not exist" in problem.message


def test_unrepresentable_distortion_is_refused(tmp_path):
    root = one_image(tmp_path / "g", {"fl_x": 50.0, "w": 64, "h": 48, "camera_model": "OPENCV", "k4": 0.01})
    with pytest.raises(CaptureError, match="transforms.json: k4: OPENCV with k4 != 0 cannot be represented"):
        nerfstudio.load(root)
    root = one_image(tmp_path / "g2", {"fl_x": 50.0, "w": 64, "h": 48, "camera_model": "OPENCV_FISHEYE", "p1": 0.01})
    with pytest.raises(CaptureError, match="tangential"):
        nerfstudio.load(root)


def test_bad_pose_and_wrong_size_are_named(tmp_path):
    root = one_image(tmp_path / "h", {"fl_x": 50.0, "w": 64, "h": 48},
                     {"transform_matrix": (2 * np.eye(4)).tolist()})
    with pytest.raises(CaptureError, match=r"frames\[0\].transform_matrix: the last row must be"):
        nerfstudio.load(root)
    root = one_image(tmp_path / "i", {"fl_x": 50.0, "w": 80, "h": 48})
    with pytest.raises(CaptureError, match="images/a.png is 64x48 pixels; the camera's width x height is 80x48"):
        nerfstudio.load(root)


def test_truncated_point_cloud_is_named(native, tmp_path):
    root = tmp_path / "j"
    write_dataset(native, root, cameras=("front",), per_frame=False, ply="binary")
    ply = root / "sparse_pc.ply"
    ply.write_bytes(ply.read_bytes()[:-10])
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    (problem,) = err.value.problems
    assert problem.file == "sparse_pc.ply" and "truncated" in problem.message


def test_not_a_nerfstudio_folder(tmp_path):
    assert not nerfstudio.detect(tmp_path)
    with pytest.raises(CaptureError, match="no transforms.json"):
        nerfstudio.load(tmp_path)


# --------------------------------------------------------------------------------------
# Paths stay inside the dataset's folder


@pytest.mark.parametrize("key, value, words", [
    ("file_path", "../../../../etc/passwd", "leaves the capture directory ('..')"),
    ("file_path", "/etc/passwd", "is absolute"),
    ("file_path", "images/link.png", "resolves outside the capture directory"),
    ("file_path", "images\\..\\..\\outside.png", "leaves the capture directory ('..')"),  # Windows separators
    ("mask_path", "../outside.png", "leaves the capture directory ('..')"),
    ("mask_path", "images/link.png", "resolves outside the capture directory"),
])
def test_frame_paths_are_confined_to_the_folder(key, value, words, tmp_path):
    root = one_image(tmp_path / "k" / "scene", {"fl_x": 50.0, "w": 64, "h": 48}, {key: value})
    Image.new("RGB", (64, 48)).save(tmp_path / "k" / "outside.png")
    (root / "images" / "link.png").symlink_to(tmp_path / "k" / "outside.png")
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == ("transforms.json", f"frames[0].{key}") and words in problem.message


def test_point_cloud_path_is_confined_to_the_folder(native, tmp_path):
    root = tmp_path / "l"
    write_dataset(native, root, cameras=("front",), per_frame=False, ply="binary")
    shutil.move(root / "sparse_pc.ply", tmp_path / "points.ply")
    meta = json.loads((root / "transforms.json").read_text())
    meta["ply_file_path"] = "../points.ply"
    (root / "transforms.json").write_text(json.dumps(meta))
    with pytest.raises(CaptureError, match=r"transforms.json: ply_file_path: path '../points.ply' leaves the capture"):
        nerfstudio.load(root)


# --------------------------------------------------------------------------------------
# Trimmed copies: --skip-missing


def write_instant_ngp(native: Capture, root: Path, drop: tuple[int, ...] = ()) -> dict:
    """An instant-ngp ``transforms.json`` of the front camera (colmap2nerf's layout: top-level
    intrinsics, ``./images/NNNN.jpg`` paths, ``sharpness``), without the images of frames ``drop``."""
    cam = native.cameras["front"]
    (root / "images").mkdir(parents=True)
    frames = []
    for k, frame in enumerate(cam.frames):
        name = f"./images/{k + 1:04d}.jpg"
        if k not in drop:
            Image.open(frame.image_path).convert("RGB").save(root / name, quality=95)
        T = camera_to_world(native, cam, frame.timestamp_us)
        frames.append({"file_path": name, "sharpness": 30.0 + k, "transform_matrix": (T @ GL_FROM_CV).tolist()})
    i = cam.intrinsics
    meta = {"camera_angle_x": 2 * math.atan(cam.width / (2 * i["fx"])), "camera_angle_y": 1.0,
            "fl_x": i["fx"], "fl_y": i["fy"], "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0,
            "cx": i["cx"] + 0.5, "cy": i["cy"] + 0.5, "w": cam.width, "h": cam.height, "aabb_scale": 16,
            "frames": frames}
    (root / "transforms.json").write_text(json.dumps(meta, indent=2))
    return meta


def test_skip_missing_drops_frames_without_their_image(native, tmp_path):
    from nurec_usd.capture.missing import MissingFilesWarning

    root = tmp_path / "ngp"
    write_instant_ngp(native, root, drop=(1, 5, 6))
    with pytest.raises(CaptureError) as err:
        nerfstudio.load(root)
    assert [p.field for p in err.value.problems] == [f"frames[{k}].file_path" for k in (1, 5, 6)]
    assert all("does not exist" in p.message for p in err.value.problems)
    assert "--skip-missing" in str(err.value).splitlines()[-1]
    with pytest.warns(MissingFilesWarning, match=r"left out 3 frames whose file is missing \(images/0002.jpg, "):
        cap = nerfstudio.load(root, skip_missing=True)
    (cam,) = cap.cameras.values()
    assert [f.image_path.name for f in cam.frames] == [f"{k + 1:04d}.jpg" for k in (0, 2, 3, 4, 7, 8, 9)]
    for p in (root / "images").iterdir():
        p.unlink()
    with pytest.raises(CaptureError, match=r"none of the listed images is present \(10 missing\)"):
        nerfstudio.load(root, skip_missing=True)


# --------------------------------------------------------------------------------------
# Blender-style splits: one capture, the test frames held out

SPLIT_OF = {0: "train", 1: "train", 2: "test", 3: "train", 4: "val", 5: "train", 6: "test", 7: "train",
            8: "val", 9: "train"}


def write_blender(native: Capture, root: Path, splits: tuple[str, ...] = ("train", "val", "test")) -> None:
    """The NeRF-synthetic layout: ``transforms_<split>.json`` beside ``<split>/r_<n>.png``, paths
    without a suffix, ``camera_angle_x`` only, a ``rotation`` per frame."""
    cam = native.cameras["front"]
    fov = 2 * math.atan(cam.width / (2 * cam.intrinsics["fx"]))
    for split in splits:
        (root / split).mkdir(parents=True)
        frames = []
        for k, frame in enumerate(cam.frames):
            if SPLIT_OF[k] != split:
                continue
            n = len(frames)
            shutil.copyfile(frame.image_path, root / split / f"r_{n}.png")
            T = camera_to_world(native, cam, frame.timestamp_us)
            frames.append({"file_path": f"./{split}/r_{n}", "rotation": 0.012566370614359171,
                           "transform_matrix": (T @ GL_FROM_CV).tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": fov, "frames": frames}))


def test_splits_load_as_one_capture_with_the_test_frames_held_out(native, tmp_path):
    from nurec_usd.train.data import CaptureData

    root = tmp_path / "lego"
    write_blender(native, root)
    assert nerfstudio.detect(root)
    with pytest.warns(nerfstudio.NerfstudioWarning, match="transforms_val.json: the val frames are not used"):
        cap = nerfstudio.load(root)
    (cam,) = cap.cameras.values()
    splits = {f.image_path.parent.name: [] for f in cam.frames}
    for f in cam.frames:
        splits[f.image_path.parent.name].append(f.held_out)
    assert splits == {"test": [True, True], "train": [False] * 6}
    assert cap.metadata["nerfstudio_splits"] == {"frames": {"train": 6, "test": 2}, "held_out": "test"}
    # the build's data follows the dataset's split, whatever eval_every says
    data = CaptureData(cap, "cpu", eval_every=8, downscale=4)
    assert sorted(cam.frames[f.frame].image_path.name for f in data.eval_frames) == ["r_0.png", "r_1.png"]
    assert all(cam.frames[f.frame].image_path.parent.name == "test" for f in data.eval_frames)
    assert len(data.train_frames) == 6


def test_without_a_test_split_the_val_frames_are_held_out(native, tmp_path):
    root = tmp_path / "lego"
    write_blender(native, root, splits=("train", "val"))
    cap = nerfstudio.load(root)
    held = {f.image_path.parent.name: f.held_out for cam in cap.cameras.values() for f in cam.frames}
    assert held == {"train": False, "val": True}
    # one split file given by its path loads alone, with the build's own rule
    single = nerfstudio.load(root / "transforms_train.json")
    assert all(f.held_out is None for cam in single.cameras.values() for f in cam.frames)
    assert "nerfstudio_splits" not in single.metadata
