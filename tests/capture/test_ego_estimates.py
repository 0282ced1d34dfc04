"""The ego vehicle's estimates on hand-made data: a static image region, a box of persistent lidar
returns, the given box and the mask folder (nurec_usd.capture.ego)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from nurec_usd.capture import ego

H, W = 120, 200


def _frames(n: int, hood: np.ndarray | None, seed: int = 0) -> list[np.ndarray]:
    """Frames whose every pixel changes (textured noise, another at each place) except the hood's."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        im = rng.integers(0, 256, (H // 4, W // 4, 3)).repeat(4, 0).repeat(4, 1).astype(np.uint8)
        if hood is not None:
            im[hood] = (40, 60, 90)  # the paint, the same in every frame
        out.append(im)
    return out


def _hood() -> np.ndarray:  # [H, W] bool: a rounded bonnet rising from the bottom border
    yy, xx = np.mgrid[:H, :W]
    return ((xx - W / 2) / (W * 0.45)) ** 2 + ((yy - H) / (H * 0.3)) ** 2 < 1


def test_static_mask_finds_the_constant_bottom_region():
    hood = _hood()
    mask = ego.estimate_static_mask(_frames(8, hood))
    assert mask.shape == (H, W) and mask.dtype == bool
    iou = (mask & hood).sum() / (mask | hood).sum()
    assert iou > 0.85, iou
    assert mask[hood].mean() > 0.98  # the body is covered (the mask errs on the safe side)
    assert not mask[: H // 2].any()  # the moving scene above it is not


def test_static_mask_of_torch_frames_equals_that_of_numpy_frames():
    """A build passes its decoded images (torch, on their device) and the lens as a tensor."""
    import torch

    hood = _hood()
    frames = _frames(8, hood, seed=3)
    yy, xx = np.mgrid[:H, :W]
    lens = ((xx - W / 2) / (W * 0.6)) ** 2 + ((yy - H / 2) / (H * 0.7)) ** 2 < 1
    want = ego.estimate_static_mask(frames, lens)
    got = ego.estimate_static_mask([torch.from_numpy(f) for f in frames], torch.from_numpy(lens))
    assert want.any() and isinstance(got, np.ndarray) and np.array_equal(got, want)


def test_static_mask_is_empty_without_a_static_region_or_frames():
    assert not ego.estimate_static_mask(_frames(8, None)).any()  # everything changes
    still = _frames(1, None)[0]
    assert not ego.estimate_static_mask([still] * 8).any()  # nothing changes: not a hood
    assert not ego.estimate_static_mask(_frames(ego.MIN_MASK_FRAMES - 1, _hood())).any()  # too few frames
    with pytest.raises(ValueError, match="shape"):
        ego.estimate_static_mask([np.zeros((H, W), np.uint8)] * 8)


def test_static_mask_ignores_a_plain_surface_and_a_fisheye_rim():
    """An even road at the bottom looks the same as the rig moves, but its edge blurs in the
    frames' mean (the scene beside it moves): not a body. A fisheye's black rim is static too."""
    yy, xx = np.mgrid[:H, :W]
    # a smooth scene sliding past (stripes at 8 phases: their mean is an even grey), an even road below
    waves = [np.repeat((128 + 100 * np.sin(2 * np.pi * (xx / 23 + yy / 17) + k * np.pi / 4))[..., None], 3, -1)
             for k in range(8)]
    road = yy >= H - 30
    frames = [np.where(road[..., None], 128, w).round().astype(np.uint8) for w in waves]
    assert not ego.estimate_static_mask(frames).any()
    hood = _hood()  # the same scene with a body of another colour: found
    mask = ego.estimate_static_mask([np.where(hood[..., None], 60, w).round().astype(np.uint8) for w in waves])
    assert (mask & hood).sum() / (mask | hood).sum() > 0.85
    lens = ((xx - W / 2) / (W / 2)) ** 2 + ((yy - H / 2) / (H / 2)) ** 2 < 1
    rimmed = [np.where(lens[..., None], im, 0).astype(np.uint8) for im in _frames(8, None)]
    assert not ego.estimate_static_mask(rimmed, lens).any()
    hood = _hood() & lens
    with_hood = [np.where(lens[..., None], im, 0).astype(np.uint8) for im in _frames(8, hood)]
    mask = ego.estimate_static_mask(with_hood, lens)
    assert not (mask & ~lens).any() and (mask & hood).sum() / (mask | hood).sum() > 0.8


def test_static_mask_keeps_only_what_reaches_the_bottom():
    """A static patch in the middle of the image (a sign the rig drove past slowly) is not the ego's."""
    patch = np.zeros((H, W), bool)
    patch[40:70, 80:120] = True
    assert not ego.estimate_static_mask(_frames(8, patch)).any()


def _sweeps(n: int, with_ego: bool, seed: int = 1) -> list[np.ndarray]:
    """Sweeps in the rig frame: flat ground (z = 0) and walls that move past, a roof pod that does not."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        ground = np.c_[rng.uniform(-15, 15, (4000, 2)), rng.normal(0, 0.01, 4000)]
        wall = np.c_[rng.uniform(-15, 15, 800), np.full(800, 6.0), rng.uniform(0, 4, 800)]
        passer = np.c_[rng.uniform(-2, 2, (30, 2)) + k, rng.uniform(0.5, 2.0, 30)]  # a different one each time
        parts = [ground, wall, passer]
        if with_ego:
            parts.append(np.c_[rng.uniform(-1.2, -0.4, 600), rng.uniform(-0.6, 0.6, 600), rng.uniform(1.7, 1.9, 600)])
        out.append(np.concatenate(parts))
    return out


def test_ego_box_bounds_the_returns_that_stay_put():
    box = ego.estimate_ego_box(_sweeps(8, True))
    assert box is not None
    lo, hi = np.asarray(box.lo), np.asarray(box.hi)
    # the pod [-1.2, -0.4] x [-0.6, 0.6] x [1.7, 1.9], give or take a voxel and the margin
    assert np.all(lo <= [-1.2, -0.6, 1.7]) and np.all(lo >= [-1.2 - 0.35, -0.6 - 0.35, 1.7 - 0.35])
    assert np.all(hi >= [-0.4, 0.6, 1.9]) and np.all(hi <= [-0.4 + 0.35, 0.6 + 0.35, 1.9 + 0.35])
    inside = box.contains(_sweeps(1, False, seed=5)[0])
    assert inside.mean() < 0.01  # ground and walls are kept


def test_ego_box_is_none_where_nothing_stays_put():
    assert ego.estimate_ego_box(_sweeps(8, False)) is None
    assert ego.estimate_ego_box(_sweeps(ego.MIN_BOX_SWEEPS - 1, True)) is None  # too few sweeps
    assert ego.estimate_ego_box([np.zeros((0, 3))] * 8) is None


def test_ego_box_refuses_a_box_larger_than_a_vehicle():
    """Something large that drives along (a truck beside the rig): no box, rather than a wrong one."""
    x, z = np.meshgrid(np.arange(-2.4, 2.4, 0.1), np.arange(0.5, 4.5, 0.1))
    side = np.c_[x.ravel(), np.full(x.size, -2.0), z.ravel()]  # its side panel, 4 m high, 2 m away
    sweeps = [np.concatenate([s, side]) for s in _sweeps(8, False)]
    assert ego.estimate_ego_box(sweeps) is None


def test_parse_box_and_its_errors():
    box = ego.parse_box("-1, -0.5, 0, 2, 0.5, 1.5")
    assert box.lo == (-1.0, -0.5, 0.0) and box.hi == (2.0, 0.5, 1.5)
    assert ego.parse_box(box.text()) == box
    with pytest.raises(ValueError, match="six numbers"):
        ego.parse_box("1,2,3")
    with pytest.raises(ValueError, match="x0 < x1"):
        ego.parse_box("1,0,0,0,1,1")


def test_spaced_samples_skip_a_rig_standing_still():
    still = np.zeros((10, 3))
    moving = np.c_[np.arange(10) * 1.0, np.zeros(10), np.zeros(10)]
    assert ego.spaced_samples(np.concatenate([still, moving])) == [0, *range(11, 20)]
    assert len(ego.spaced_samples(np.c_[np.arange(100.0), np.zeros((100, 2))], most=16)) == 16
    assert ego.spaced_samples(np.zeros((0, 3))) == []


def test_mask_folder_reads_masks_and_names_bad_files(tmp_path):
    good = np.zeros((H, W), np.uint8)
    good[-20:] = 255
    Image.fromarray(good).save(tmp_path / "front.png")
    masks = ego.read_mask_folder(tmp_path, {"front": (W, H), "rear": (W, H)})
    assert set(masks) == {"front"} and masks["front"][-20:].all() and not masks["front"][:-20].any()

    Image.fromarray(good[:, :-1]).save(tmp_path / "rear.png")
    with pytest.raises(ValueError, match=r"rear\.png: mask is 199x120 pixels, camera 'rear' is 200x120"):
        ego.read_mask_folder(tmp_path, {"front": (W, H), "rear": (W, H)})
    (tmp_path / "rear.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"rear\.png: not a readable image"):
        ego.read_mask_folder(tmp_path, {"front": (W, H), "rear": (W, H)})
    with pytest.raises(ValueError, match="no ego mask for any camera"):
        ego.read_mask_folder(tmp_path, {"side": (W, H)})
    with pytest.raises(ValueError, match="does not exist"):
        ego.read_mask_folder(tmp_path / "missing", {"front": (W, H)})
