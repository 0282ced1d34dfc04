"""benchmarks/error_classes.py: a build's held-out error split by the synthetic ground truth's pixel classes."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.error_classes import CLASSES, error_by_class, format_table, main, pixel_classes  # noqa: E402
from test_synth_tiny import tiny_outputs  # noqa: E402


def test_pixel_classes_by_actor_and_distance():
    actor = torch.tensor([[0, 3, 1, -1, -1, -1, -1, -1]])
    distance = torch.tensor([[14.9, 15.0, 50.0, 2.0, 15.0, 80.0, 0.0, 49.99]])
    got = pixel_classes(actor, distance, 15.0, 50.0)[0].tolist()
    assert [CLASSES[i] for i in got] == ["actors, near", "actors, middle", "actors, far", "static, near",
                                         "static, middle", "static, far", "sky", "static, middle"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from nurec_usd.capture import load_capture
    from nurec_usd.synth.groundtruth import load_groundtruth
    from nurec_usd.train.data import CaptureData

    capture, gt_dir = tiny_outputs(tmp_path_factory)
    return CaptureData(load_capture(capture), "cpu", eval_every=8), load_groundtruth(gt_dir)


def test_an_error_on_the_actors_pixels_lands_in_the_actor_classes_only(tiny_data):
    data, truth = tiny_data
    expected_sq = 0.0
    expected_px = 0

    def render(group):  # the held-out images, brightened on the ground truth's actor pixels only
        nonlocal expected_sq, expected_px
        target, mask = data.target_images(group)
        out = target.clone()
        for c, ref in enumerate(group.frames):
            cam = data.cameras[ref.camera]
            _, actor = truth.camera_frame(cam.id, int(data.capture.cameras[cam.id].frames[ref.frame].timestamp_us))
            on = torch.as_tensor(actor >= 0)
            valid = torch.ones_like(on) if mask is None else mask[c]
            if cam.lens is not None:
                valid = valid & cam.lens
            out[c][on] = (target[c][on] + 0.25).clamp(0, 1)
            expected_sq += float(((out[c] - target[c]).double() ** 2).mean(-1)[valid].sum())
            expected_px += int(valid.sum())
        return out

    split = error_by_class(data, truth, render)
    classes = split["classes"]
    assert sum(v["pixels"] for v in classes.values()) == expected_px  # every scored pixel in exactly one class
    actors = sum(classes[n]["squared_error"] for n in CLASSES if n.startswith("actors"))
    assert sum(classes[n]["pixels"] for n in CLASSES if n.startswith("actors")) > 0  # the tiny preset's cars are seen
    assert actors == pytest.approx(expected_sq, rel=1e-9) and expected_sq > 0
    assert all(classes[n]["squared_error"] == 0 for n in CLASSES if not n.startswith("actors"))
    assert classes["sky"]["pixels"] > 0 and classes["static, near"]["pixels"] > 0
    assert sum(v["pixels"] for v in split["cameras"].values()) == expected_px
    table = format_table(split)
    assert "| static, near |" in table and "pooled PSNR per camera" in table


def test_the_command_splits_a_built_scene(tiny_run, tmp_path_factory, tmp_path, capsys):
    capture, gt_dir = tiny_outputs(tmp_path_factory)  # the bundled sample's own capture, with its ground truth
    out = tmp_path / "split.json"
    assert main([str(tiny_run), str(capture), "--groundtruth", str(gt_dir), "--device", "cpu", "--json", str(out)]) == 0
    split = json.loads(out.read_text())
    pixels = sum(v["pixels"] for v in split["classes"].values())
    sq = sum(v["squared_error"] for v in split["classes"].values())
    assert pixels == sum(v["pixels"] for v in split["cameras"].values()) > 0
    assert sq == pytest.approx(sum(v["squared_error"] for v in split["cameras"].values()), rel=1e-9)
    assert 15 < -10 * math.log10(sq / pixels) < 60  # a trained scene: neither blank nor exact
    assert "held-out pixels:" in capsys.readouterr().out

    # the run's ego masks are applied as the build applied them: an ego_mask_dir in its config whose
    # mask covers the front camera's bottom 30 rows takes exactly those pixels out of the split
    run = tmp_path / "masked_run"
    run.mkdir()
    (run / "scene.pt").symlink_to(tiny_run / "scene.pt")
    config = json.loads((tiny_run / "config.json").read_text())
    masks = tmp_path / "masks"
    masks.mkdir()
    ego = np.zeros((180, 320), dtype=np.uint8)
    ego[-30:] = 255
    Image.fromarray(ego).save(masks / "front.png")
    config["train"]["ego_mask_dir"] = str(masks)
    (run / "config.json").write_text(json.dumps(config))
    masked_out = tmp_path / "masked.json"
    assert main([str(run), str(capture), "--groundtruth", str(gt_dir), "--device", "cpu", "--json",
                 str(masked_out)]) == 0
    masked = json.loads(masked_out.read_text())
    front = split["cameras"]["front"]["pixels"]
    assert front % (320 * 180) == 0  # the pinhole front camera: whole frames
    assert masked["cameras"]["front"]["pixels"] == front - front // (320 * 180) * 30 * 320
    assert all(masked["cameras"][k] == v for k, v in split["cameras"].items() if k != "front")


def test_the_command_names_a_missing_ground_truth(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "scene.pt").write_bytes(b"")  # refused before anything is read
    (run / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        main([str(run), str(REPO / "samples" / "tiny"), "--groundtruth", str(tmp_path / "nowhere")])
    assert "nowhere: not a synthetic ground-truth folder" in capsys.readouterr().err
