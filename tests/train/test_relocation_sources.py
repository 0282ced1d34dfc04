"""The trainer's relocation sources: each Gaussian's screen-space gradient summed over the steps
since the last refinement (``relocate_weight="gradient"``, or its mean over the views that gave it
with "gradient_mean"), handed to ``relocate_and_grow`` split as the renderer places the Gaussians
(static, then actors), and started afresh after a refinement."""

from __future__ import annotations

import pytest
import torch

import nurec_usd.train.trainer as trainer_module
from nurec_usd.capture.importers import load_any
from nurec_usd.pipeline import initial_scene
from nurec_usd.train.config import make_config
from nurec_usd.train.data import CaptureData
from nurec_usd.train.trainer import Trainer


@pytest.fixture(scope="module")
def capture(handmade_capture):
    return load_any(handmade_capture)


def _trainer(capture, **options) -> Trainer:
    torch.manual_seed(0)
    config = make_config("fast", steps=10, downscale=4, **options)
    data = CaptureData(capture, "cpu", eval_every=8, downscale=4)
    return Trainer(initial_scene(capture, data, config.init), data, config.train)


def test_gradient_sums_accumulate_and_reach_the_refinement(capture, monkeypatch):
    trainer = _trainer(capture)
    scene = trainer.scene
    assert len(scene.static) > 0 and len(scene.actors) > 0, "the capture should have both sets"
    trainer.step(0)
    first = trainer.grad2d_sums.clone()
    assert first.shape == (scene.num_gaussians,) and float(first.min()) >= 0
    assert int((first[:len(scene.static)] > 0).sum()) > 10 and float(first[len(scene.static):].sum()) > 0
    trainer.step(1)
    assert bool((trainer.grad2d_sums >= first).all()) and float(trainer.grad2d_sums.sum()) > float(first.sum())
    summed = trainer.grad2d_sums.clone()

    seen = []
    real = trainer_module.relocate_and_grow

    def recording(params, optimizer, **kwargs):
        seen.append((len(params), kwargs["source_weights"].clone(), kwargs["jitter"], kwargs["max_fraction"]))
        return real(params, optimizer, **kwargs)

    monkeypatch.setattr(trainer_module, "relocate_and_grow", recording)
    n_static = len(scene.static)
    trainer._refine()
    (n_s, w_s, jitter, bound), (n_a, w_a, _, _) = seen
    assert (n_s, n_a) == (n_static, len(summed) - n_static)
    assert torch.equal(torch.cat((w_s, w_a)), summed)  # static first, then actors: the renderer's order
    assert (jitter, bound) == (trainer.cfg.relocate_jitter, trainer.cfg.relocate_max_fraction)
    # afresh after the refinement: the next step's sums alone, sized for the count it left
    assert trainer.grad2d_sums is None
    trainer.step(2)
    assert trainer.grad2d_sums.shape == (scene.num_gaussians,)
    assert 0 < float(trainer.grad2d_sums.sum()) < float(summed.sum())


def test_opacity_sources_keep_no_sums(capture, monkeypatch):
    trainer = _trainer(capture, relocate_weight="opacity")
    trainer.step(0)
    assert trainer.grad2d_sums is None
    seen = []
    real = trainer_module.relocate_and_grow

    def recording(params, optimizer, **kwargs):
        seen.append(kwargs["source_weights"])
        return real(params, optimizer, **kwargs)

    monkeypatch.setattr(trainer_module, "relocate_and_grow", recording)
    trainer._refine()
    assert seen == [None, None]


def test_gradient_mean_divides_by_the_views_that_gave_each(capture, monkeypatch):
    trainer = _trainer(capture, relocate_weight="gradient_mean")
    trainer.step(0)
    trainer.step(1)
    sums, counts = trainer.grad2d_sums.clone(), trainer.grad2d_counts.clone()
    assert counts.shape == sums.shape and float(counts.max()) > 1, "some Gaussians should be seen in several views"
    assert bool(((counts > 0) == (sums > 0)).all()), "a view gives a count exactly when it gives a gradient"
    assert bool((counts == counts.round()).all())
    seen = []
    real = trainer_module.relocate_and_grow

    def recording(params, optimizer, **kwargs):
        seen.append(kwargs["source_weights"].clone())
        return real(params, optimizer, **kwargs)

    monkeypatch.setattr(trainer_module, "relocate_and_grow", recording)
    trainer._refine()
    torch.testing.assert_close(torch.cat(seen), sums / counts.clamp_min(1), atol=0, rtol=0)
    assert trainer.grad2d_sums is None and trainer.grad2d_counts is None
    trainer.step(2)
    assert trainer.grad2d_counts.shape == (trainer.scene.num_gaussians,)
    assert 0 < float(trainer.grad2d_counts.sum()) < float(counts.sum())


@pytest.mark.parametrize("noise_opacity, centre", [(0.0, "dead_opacity"), (0.3, 0.3)])
def test_the_noise_gate_centres_on_noise_opacity_or_dead_opacity(capture, monkeypatch, noise_opacity, centre):
    trainer = _trainer(capture, noise_opacity=noise_opacity, dead_opacity=0.05)
    gates = []
    monkeypatch.setattr(trainer_module, "perturb_transparent", lambda p, scale, gate, gen: gates.append(gate))
    trainer.step(0)
    expected = 0.05 if centre == "dead_opacity" else centre
    assert gates == [expected, expected]  # static and actor Gaussians
