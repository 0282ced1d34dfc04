"""Per-frame colour corrections (nurec_usd.train.appearance): learnt in training, absorbing what
differs between the frames, and left out of the scene, its export and the held-out figures."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nurec_usd.capture.importers import load_any
from nurec_usd.train.appearance import FrameAppearance
from nurec_usd.train.data import CaptureData

SHIFT = 0.12  # of the 0..1 range: training frames alternately brighter and darker


@pytest.fixture(scope="module")
def capture(handmade_capture):
    return load_any(handmade_capture)


def _shifted_data(capture) -> tuple[CaptureData, dict[tuple[int, int], float]]:
    """The capture's data with its training frames' colours shifted by +-SHIFT (alternating, per
    camera); the held-out frames are left as they are. Returns the data and the shift by frame."""
    data = CaptureData(capture, "cpu", eval_every=8, downscale=4)
    shifts = {}
    for ci, cam in enumerate(data.cameras):
        frames = [f.frame for f in data.train_frames if f.camera == ci]
        for k, f in enumerate(frames):
            s = SHIFT if k % 2 == 0 else -SHIFT
            cam.images[f] = (cam.images[f].float() + 255 * s).clamp(0, 255).round().to(torch.uint8)
            shifts[(ci, f)] = s
    return data, shifts


def test_corrections_centre_per_camera_and_map_colours():
    class _Data:  # what FrameAppearance reads: the device, the cameras' frame counts, the training frames
        device = torch.device("cpu")
        cameras = [type("C", (), {"images": torch.zeros(3, 1, 1, 3)})(), type("C", (), {"images": torch.zeros(2, 1, 1, 3)})()]
        train_frames = [type("F", (), {"camera": c, "frame": f})() for c, f in ((0, 0), (0, 2), (1, 0), (1, 1))]

    fa = FrameAppearance(_Data(), "gain_bias")
    with torch.no_grad():
        fa.delta[:, 3] = torch.tensor([0.3, 9.0, 0.1, 0.2, 0.4])  # row 1 is held out: not in the mean
    c = fa.centred(torch.arange(5))
    assert c[:, 3].tolist() == pytest.approx([0.1, 8.8, -0.1, -0.1, 0.1])
    group = type("G", (), {"frames": (_Data.train_frames[0],)})()
    image = torch.full((1, 2, 2, 3), 0.5)
    out, used = fa.apply(image, group)
    assert out[..., 0].flatten().tolist() == pytest.approx([0.6] * 4) and out[..., 1].flatten().tolist() == [0.5] * 4
    lens = torch.tensor([[[True, False], [True, True]]])
    assert float(fa.apply(image, group, lens)[0][0, 0, 1].detach().abs().sum()) == 0  # black outside the lens
    affine = FrameAppearance(_Data(), "affine")
    with torch.no_grad():
        affine.delta[0, 1] = 0.5  # red gets half of green
    out, _ = affine.apply(torch.tensor([[[[0.2, 0.4, 0.0]]]]), group)
    assert out.flatten().tolist() == pytest.approx([0.2 + 0.5 * 0.4 - 0.25 * 0.4, 0.4, 0.0])  # minus the camera's mean
    with pytest.raises(ValueError, match="gain_bias, affine"):
        FrameAppearance(_Data(), "curves")


def _train(capture, mode: str, tmp_path):
    from nurec_usd.evaluation import evaluate
    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.trainer import Trainer

    torch.manual_seed(0)
    config = make_config("fast", steps=24, downscale=4, lidar_every=4, frame_appearance=mode,
                         lr_frame_appearance=0.01, frame_appearance_reg=0.01, log_interval=8)
    data, shifts = _shifted_data(capture)
    scene = initial_scene(capture, data, config.init)
    trainer = Trainer(scene, data, config.train)
    result = trainer.run()
    assert result.status == "completed", result.message
    (tmp_path / mode).mkdir()
    metrics = evaluate(scene, data, tmp_path / mode)
    return trainer, scene, shifts, result, metrics


def test_a_colour_shift_of_the_frames_goes_into_the_corrections_not_the_scene(capture, tmp_path):
    on, scene, shifts, result_on, held_on = _train(capture, "gain_bias", tmp_path)
    off, _, _, result_off, held_off = _train(capture, "off", tmp_path)
    assert off.appearance is None
    rows = torch.tensor([on.appearance.offsets[c] + f for c, f in shifts])
    bias = on.appearance.centred(rows)[:, 3:].mean(1).detach()  # [T] the learnt bias of each training frame
    want = torch.tensor(list(shifts.values()))
    assert float((torch.sign(bias) == torch.sign(want)).float().mean()) >= 0.9, (bias, want)
    assert float((bias * want).sum() / (want * want).sum()) > 0.3  # a good part of the shift is absorbed
    # the training fit on the shifted frames is better with the corrections
    assert result_on.history[-1]["psnr"] > result_off.history[-1]["psnr"] + 1.0
    # the scene is what it was without them: nothing of the corrections in it or its figures
    assert {f.name for f in dataclasses.fields(scene)} == {f.name for f in dataclasses.fields(off.scene)}
    assert held_on["psnr"] > held_off["psnr"] - 0.5  # the held-out frames (not shifted) are not worse
    summary = on.appearance.summary()
    assert summary["mode"] == "gain_bias" and summary["frames"] == len(shifts)
    assert summary["mean_abs_bias"] > 0.03
