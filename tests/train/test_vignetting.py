"""Each camera's lens falloff (``Scene.vignetting``): how renders apply it, that training can
recover it from images, that the trainer learns it (or not, at a zero rate) and that scene files
keep it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import REPO
from nurec_usd.capture import load_capture
from nurec_usd.render.scene_renderer import SceneRenderer
from nurec_usd.scene.gaussians import GaussianParams, Scene
from nurec_usd.train.data import CaptureData


@pytest.fixture(scope="module")
def data() -> CaptureData:
    return CaptureData(load_capture(REPO / "samples" / "tiny"), "cpu", eval_every=8, downscale=4)


def _sky_scene(data: CaptureData, **fields) -> Scene:
    """A scene of sky alone (no Gaussians), with a sky that varies over directions."""
    g = GaussianParams.create(torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3))
    sky = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(0))
    scene = Scene(g, g, torch.zeros(0, dtype=torch.int32), [], sky, [c.id for c in data.cameras],
                  torch.zeros(len(data.cameras), 6))
    return dataclasses.replace(scene, **fields)


def test_a_scene_without_falloff_has_zeros():
    g = GaussianParams.create(torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3))
    scene = Scene(g, g, torch.zeros(0, dtype=torch.int32), [], torch.zeros(3, 4, 8), ["a", "b", "c"], torch.zeros(3, 6))
    assert torch.equal(scene.vignetting, torch.zeros(3, 2))


@torch.no_grad()
def test_the_falloff_scales_each_pixel_by_its_angle_off_the_axis(data):
    gen = torch.Generator().manual_seed(1)
    exposure = torch.randn(len(data.cameras), 6, generator=gen) * 0.2
    vignetting = torch.randn(len(data.cameras), 2, generator=gen) * 0.3
    plain = SceneRenderer(_sky_scene(data))  # no exposure, no falloff: the colours the camera receives
    lens_scene = SceneRenderer(_sky_scene(data, exposure=exposure, vignetting=vignetting))
    group = data.groups(data.train_frames, 0)[0]
    views = data.camera_views(group)
    assert len(group.frames) == 4, "the sample's four cameras: pinhole, OpenCV, fisheye and f-theta"
    received = plain.cameras(views).image  # [C, H, W, 3]
    got = lens_scene.cameras(views).image
    idx = views.camera_indices
    u = 1.0 - views.rays_camera[..., 2]  # [C, H, W]
    assert float(u.max()) > 0.9, "a wide camera reaches rays near 90 degrees off its axis"
    gain = exposure[idx, None, None, :3] + (vignetting[idx, 0, None, None] * u
                                            + vignetting[idx, 1, None, None] * u * u)[..., None]
    want = received * gain.exp() + exposure[idx, None, None, 3:]
    if views.lens is not None:
        want = want * views.lens[..., None]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the one-view path applies the same
    ref = group.frames[1]
    one = lens_scene.camera(data.camera_view(ref)).image
    torch.testing.assert_close(one, got[1], rtol=1e-5, atol=1e-6)


def test_the_falloff_of_vignetted_images_is_recovered_by_gradient_descent(data):
    """Renders with a known falloff as targets; from zero, the falloff alone is fitted through the
    renderer's gradient and lands on the truth."""
    truth = torch.tensor([[-0.25, 0.1]]).repeat(len(data.cameras), 1)
    truth[1] = torch.tensor([-0.1, -0.05])
    group = data.groups(data.train_frames, 0)[0]
    views = data.camera_views(group)
    with torch.no_grad():
        target = SceneRenderer(_sky_scene(data, vignetting=truth)).cameras(views).image
    vignetting = torch.zeros(len(data.cameras), 2, requires_grad=True)
    renderer = SceneRenderer(_sky_scene(data, vignetting=vignetting))
    optimizer = torch.optim.Adam([vignetting], lr=0.02)
    for _ in range(300):
        optimizer.zero_grad()
        loss = (renderer.cameras(views).image - target).square().mean()
        loss.backward()
        optimizer.step()
    # compared as falloffs over each camera's own field of view: a narrow camera's u stays small,
    # where k2 barely shows
    u = 1.0 - views.rays_camera[..., 2]  # [C, H, W]
    idx = views.camera_indices

    def falloff(k: torch.Tensor) -> torch.Tensor:  # [C, H, W]
        return k[idx, 0, None, None] * u + k[idx, 1, None, None] * u * u

    err = (falloff(vignetting.detach()) - falloff(truth)).abs()
    if views.lens is not None:
        err = err * views.lens
    assert float(err.max()) < 0.005, err.flatten(1).max(1).values
    assert float(falloff(truth).abs().max()) > 0.1  # the truth is far from none


def _trainer(capture, **options):
    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.trainer import Trainer

    torch.manual_seed(0)
    config = make_config("fast", steps=10, downscale=4, **options)
    data = CaptureData(capture, "cpu", eval_every=8, downscale=4)
    return Trainer(initial_scene(capture, data, config.init), data, config.train)


@pytest.mark.parametrize("rate", [1e-2, 0.0])
def test_the_trainer_learns_the_falloff_unless_its_rate_is_zero(handmade_capture, rate):
    trainer = _trainer(load_capture(handmade_capture), lr_vignetting=rate)
    names = [g["name"] for g in trainer.optimizer.param_groups]
    trainer.step(0)
    trainer.step(1)
    moved = float(trainer.scene.vignetting.detach().abs().max())
    if rate > 0:
        assert "vignetting" in names and moved > 1e-3
    else:
        assert "vignetting" not in names and moved == 0.0


def test_scene_files_keep_the_falloff_and_older_ones_have_none(data, tmp_path):
    vignetting = torch.tensor([[-0.2, 0.05], [0.0, 0.0], [0.1, -0.3], [0.02, 0.01]])[:len(data.cameras)]
    scene = _sky_scene(data, vignetting=vignetting)
    scene.save(tmp_path / "scene.pt")
    torch.testing.assert_close(Scene.load(tmp_path / "scene.pt").vignetting, vignetting, atol=0, rtol=0)
    payload = torch.load(tmp_path / "scene.pt", weights_only=True)
    del payload["vignetting"]  # a file written before the falloff was learned
    torch.save(payload, tmp_path / "older.pt")
    assert torch.equal(Scene.load(tmp_path / "older.pt").vignetting, torch.zeros(len(data.cameras), 2))
    payload["vignetting"] = torch.zeros(len(data.cameras), 3)
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad\.pt: vignetting: expected shape \(\d+, 2\)"):
        Scene.load(tmp_path / "bad.pt")
