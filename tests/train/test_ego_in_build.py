"""The ego vehicle in a build (nurec_usd.train.ego): its lidar returns dropped and their rays left
out, its pixels out of the camera masks; and the lidar losses and figures without unknown rays."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from nurec_usd.capture.ego import parse_box
from handmade import LIDAR_ELEVATIONS, LIDAR_POSITION
from nurec_usd.capture.importers import load_any
from nurec_usd.capture.sweep_io import read_nrl, write_nrl
from nurec_usd.train import ego
from nurec_usd.train.data import CaptureData
from nurec_usd.train.losses import lidar_loss
from nurec_usd.train.metrics import lidar_errors

POD_AZIMUTH_DEG = (150.0, 210.0)  # behind the lidar: a sensor pod on the roof
POD_CHANNELS = np.nonzero((LIDAR_ELEVATIONS >= -12.5) & (LIDAR_ELEVATIONS <= -6.5))[0]


def _add_pod(capture_dir) -> int:
    """Put a roof pod into every sweep: the rays it blocks return off it (1.2 to 2 m from the lidar,
    0.25 m below it) instead of the world. Returns the number of pod points written."""
    rng = np.random.default_rng(0)
    total = 0
    for path in sorted((capture_dir / "lidar").rglob("*.nrl")):
        s = read_nrl(path)
        az = np.degrees(np.arctan2(s.points[:, 1], s.points[:, 0])) % 360
        blocked = (az >= POD_AZIMUTH_DEG[0]) & (az <= POD_AZIMUTH_DEG[1]) & np.isin(s.channel, POD_CHANNELS)
        n = 400
        a = np.radians(rng.uniform(*POD_AZIMUTH_DEG, n))
        ch = rng.choice(POD_CHANNELS, n)
        r = 0.25 / np.tan(np.radians(-LIDAR_ELEVATIONS[ch]))  # where each ray meets the pod's top at -0.25 m
        pod = np.c_[r * np.cos(a), r * np.sin(a), np.full(n, -0.25)].astype(np.float32)
        keep = ~blocked
        stamps = np.full(n, int(np.median(s.timestamps_us)), np.int64)
        t0 = int(path.stem)
        write_nrl(path, t0, np.concatenate([s.points[keep], pod]),
                  np.concatenate([s.intensity[keep], np.full(n, 0.3, np.float32)]),
                  np.concatenate([s.timestamps_us[keep], stamps]), np.concatenate([s.channel[keep], ch]))
        total += n
    return total


@pytest.fixture(scope="module")
def pod_capture(handmade_capture, tmp_path_factory):
    dst = tmp_path_factory.mktemp("pod") / "capture"
    shutil.copytree(handmade_capture, dst)
    written = _add_pod(dst)
    return dst, written


def test_the_pod_is_found_and_its_returns_dropped(pod_capture):
    path, written = pod_capture
    cap = load_any(path)
    keep, summary = ego.lidar_filter(cap, "auto", eval_every=8)
    assert keep is not None and summary["box"] is not None and summary["box_source"] == "auto"
    box = parse_box(summary["box"])
    # the pod lies 0.25 m below the lidar, within 2 m of it (rig frame)
    assert box.lo[2] <= LIDAR_POSITION[2] - 0.25 <= box.hi[2]
    assert box.hi[2] < LIDAR_POSITION[2] + 0.5 and box.lo[2] > 0.5  # neither the ground nor the sky
    data = CaptureData(cap, "cpu", eval_every=8, downscale=4, lidar_keep=keep)
    assert data.dropped_points >= 0.95 * written  # the pod's returns (a few grazing ones may be outside)
    assert data.dropped_points <= written + 50  # and little of the world
    unknown = torch.cat([lid.ranges for lid in data.lidars]) < 0
    assert bool(unknown.any())  # the rays the pod blocks: neither a return nor a miss
    # the figures and losses count them in neither
    for ref in data.eval_sweeps:
        true_range, true_int = data.lidar_target(ref)
        e = lidar_errors(true_range.clamp_min(0), (true_range > 0).float(), true_range)
        assert e["hit_accuracy"] == 1.0 and e["rays"] == int((true_range >= 0).sum())


def test_no_box_where_the_lidar_sees_no_ego_body(handmade_capture):
    cap = load_any(handmade_capture)
    keep, summary = ego.lidar_filter(cap, "auto", eval_every=8)
    assert keep is None and summary["box"] is None
    keep, summary = ego.lidar_filter(cap, "off", eval_every=8)
    assert keep is None and summary == {"box": None, "box_source": "off"}
    data = CaptureData(cap, "cpu", eval_every=8, downscale=4)
    assert not bool((torch.cat([lid.ranges for lid in data.lidars]) < 0).any())


def test_a_given_box_drops_what_it_holds(handmade_capture):
    cap = load_any(handmade_capture)
    keep, summary = ego.lidar_filter(cap, "-50,-50,-50,50,50,50", eval_every=8)  # everything
    assert summary["box_source"] == "given"
    points = torch.tensor([[1.0, 0.0, 0.0], [100.0, 0.0, 0.0]])  # lidar frame
    assert keep(next(iter(cap.lidars)), points).tolist() == [False, True]


def test_no_ego_mask_estimated_on_the_handmade_street(handmade_capture):
    """The rig drives 3 m: the estimate runs, and finds nothing (the street has no ego body)."""
    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu", eval_every=8, downscale=2)
    summary = ego.mask_cameras(cap, data, "auto", {})
    assert summary and all(v == {"source": "estimated", "share": 0.0} for v in summary.values()), summary
    assert all(cam.masks is None for cam in data.cameras)


def test_a_mask_folder_masks_its_cameras_at_the_decoded_size(handmade_capture, tmp_path):
    cap = load_any(handmade_capture)
    cam = cap.cameras["front"]
    m = np.zeros((cam.height, cam.width), np.uint8)
    m[-11:] = 255  # the bottom 11 rows: at downscale 2, the bottom 6 (a shrunk pixel is masked if any is)
    Image.fromarray(m).save(tmp_path / "front.png")
    given = ego.given_masks(cap, str(tmp_path))
    data = CaptureData(cap, "cpu", eval_every=8, downscale=2)
    summary = ego.mask_cameras(cap, data, "off", given)
    front = next(c for c in data.cameras if c.id == "front")
    assert summary == {"front": {"source": "given", "share": pytest.approx(6 / front.height)}}
    assert front.masks.shape[0] == len(cap.cameras["front"].frames)
    assert not bool(front.masks[:, -6:].any()) and bool(front.masks[:, :-6].all())
    assert all(c.masks is None for c in data.cameras if c.id != "front")


def test_a_bad_mask_folder_stops_the_build_naming_the_file(handmade_capture, tmp_path):
    from nurec_usd import build
    from nurec_usd.pipeline import BuildError

    (tmp_path / "masks").mkdir()
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(tmp_path / "masks" / "front.png")
    with pytest.raises(BuildError, match=r"ego_mask_dir: .*front\.png: mask is 10x10 pixels, camera 'front' is 160x96"):
        build(handmade_capture, tmp_path / "run", steps=1, ego_mask_dir=str(tmp_path / "masks"), progress=False,
              log=lambda _m: None)
    assert not (tmp_path / "run").exists()


HOOD_RGB = np.array([230, 20, 200], np.uint8)  # a magenta bonnet: a colour the street does not have


def _paint_hood(capture_dir, camera: str = "front") -> None:
    """Paint a bonnet into every frame of ``camera``: the bottom rows up to a curved edge, in the
    same place in every frame (as the ego vehicle's body is)."""
    for path in sorted((capture_dir / "images" / camera).iterdir()):
        pixels = np.array(Image.open(path).convert("RGB"))
        h, w = pixels.shape[:2]
        x = np.arange(w)
        edge = (h - 18 + 8 * ((x - w / 2) / (w / 2)) ** 2).astype(int)  # 10 rows in the middle, 18 at the sides
        pixels[np.arange(h)[:, None] >= edge[None, :]] = HOOD_RGB
        Image.fromarray(pixels).save(path)


@pytest.fixture(scope="module")
def hood_capture(handmade_capture, tmp_path_factory):
    dst = tmp_path_factory.mktemp("hood") / "capture"
    shutil.copytree(handmade_capture, dst)
    _paint_hood(dst)
    return dst


def test_the_hood_is_absent_from_the_exported_scene(hood_capture, handmade_capture, tmp_path):
    """A bonnet in every front frame: the build estimates its mask, and the exported scene (read
    back from its USD alone) rendered at the held-out front frame shows the street where the
    bonnet was: the mean colour there is within 0.02 of the unpainted frame's (0.006 seen), where
    the same build with ``ego_mask=off`` takes on the bonnet's magenta (0.043 seen)."""
    from nurec_usd import build
    from nurec_usd.replay.stage import Replay

    held_out = sorted((hood_capture / "images" / "front").iterdir())[4]  # index 4 of 8: held out
    painted = np.array(Image.open(held_out).convert("RGB")).astype(np.float64) / 255
    truth = np.array(Image.open(handmade_capture / "images" / "front" / held_out.name).convert("RGB")) / 255
    hood = (np.abs(painted - HOOD_RGB / 255).sum(-1) == 0) & (np.abs(painted - truth).sum(-1) > 0)  # [H, W]
    h, w = hood.shape
    hood_small = hood.reshape(h // 2, 2, w // 2, 2).all((1, 3))  # the pixels at downscale 2 wholly on it
    truth_there = truth.reshape(h // 2, 2, w // 2, 2, 3).mean((1, 3))[hood_small].mean(0)  # [3]
    t = (int(held_out.stem) - int(sorted(held_out.parent.iterdir())[0].stem)) * 1e-6
    off_truth = {}
    for mode in ("auto", "off"):
        result = build(hood_capture, tmp_path / mode, steps=30, downscale=2, ego_mask=mode, progress=False,
                       log=lambda _m: None)
        if mode == "auto":
            assert result.metrics["ego"]["cameras"]["front"]["share"] > 0.1  # the bonnet's rows, estimated
            assert all(v["share"] == 0.0 for k, v in result.metrics["ego"]["cameras"].items() if k != "front")
        render = Replay(tmp_path / mode / "usd" / "root.usda", device="cpu").render_camera("front", t, 2)
        there = render.clamp(0, 1).numpy()[hood_small].mean(0)  # [3]
        off_truth[mode] = float(np.abs(there - truth_there).mean())
    assert off_truth["auto"] <= 0.02 and off_truth["off"] >= 2 * off_truth["auto"], off_truth


def test_lidar_loss_and_errors_leave_unknown_rays_out():
    g = torch.Generator().manual_seed(0)
    true = torch.rand(4, 16, generator=g) * 20 + 1  # [C, W]
    true[:, :3] = 0  # no return
    true[0, 5:9] = -1  # unknown
    pred_r = (true.clamp_min(0) + torch.randn(4, 16, generator=g)).requires_grad_()
    pred_h = torch.rand(4, 16, generator=g).requires_grad_()
    pred_i = torch.rand(4, 16, generator=g)
    loss = lidar_loss(pred_r, pred_h, pred_i, true, torch.rand(4, 16, generator=g), 1.0, 0.5, 0.1)
    loss.backward()
    assert float(pred_r.grad[0, 5:9].abs().sum()) == 0 and float(pred_h.grad[0, 5:9].abs().sum()) == 0
    # the same as without those rays: the hit term is a mean over the known rays
    known = true >= 0
    hit = pred_h.detach().clamp(1e-4, 1 - 1e-4)[known]
    bce = torch.nn.functional.binary_cross_entropy(hit, (true[known] > 0).float())
    pred_h2 = pred_h.detach().clone()
    pred_h2[0, 5:9] = 0.999  # whatever is predicted there
    moved = lidar_loss(pred_r.detach(), pred_h2, pred_i, true, torch.rand(4, 16, generator=g) * 0, 1.0, 0.5, 0.0)
    unmoved = lidar_loss(pred_r.detach(), pred_h.detach(), pred_i, true, torch.zeros(4, 16), 1.0, 0.5, 0.0)
    assert float(moved) == pytest.approx(float(unmoved))
    rel = ((pred_r.detach() - true).abs() / true.clamp_min(1))[true > 0].mean()
    assert float(unmoved) == pytest.approx(float(rel + 0.5 * bce), rel=1e-5)
    e = lidar_errors(pred_r.detach(), pred_h.detach(), true)
    assert e["rays"] == 60 and e["returns"] == int((true > 0).sum())
    assert e["hit_accuracy"] == pytest.approx(float(((true > 0) == (pred_h.detach() > 0.5))[known].float().mean()))
