"""Shared fixtures: the analytic hand-made capture, written once per test session, and a build of
the bundled sample, made once per session for the tests that need a trained scene."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_STEPS = 64  # steps of all four cameras: enough for test_build's quality bar (28.6 dB when this was written)
# CPU-sized: half-resolution images, a sweep every other step, and at most 60,000 Gaussians (the
# sample's lidar alone gives about 200,000, whose 64 steps took 290 s on two cores against 130 s)
QUICK = {"downscale": 2, "lidar_every": 2, "max_points": 50_000, "max_gaussians": 60_000}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The run folder of ``build samples/tiny`` (TINY_STEPS steps, QUICK options). Do not modify it."""
    from nurec_usd import build

    out = tmp_path_factory.mktemp("build") / "run"
    result = build(REPO / "samples" / "tiny", out, steps=TINY_STEPS, progress=False, log=lambda _m: None, **QUICK)
    assert result.status == "completed", result.message
    return out


@pytest.fixture(scope="session")
def usd_only(tiny_run, tmp_path_factory) -> Path:
    """The USD folder of ``tiny_run``, alone in a fresh directory: what a user gets from export.
    Do not modify it."""
    dst = tmp_path_factory.mktemp("usd_only") / "scene"
    shutil.copytree(tiny_run / "usd", dst)
    return dst


@pytest.fixture(scope="session")
def handmade_capture(tmp_path_factory) -> Path:
    """A valid capture directory (every camera model, a lidar, two tracks). Do not modify it."""
    from handmade import write_handmade_capture

    return write_handmade_capture(tmp_path_factory.mktemp("handmade") / "capture")


@pytest.fixture
def capture_copy(handmade_capture, tmp_path) -> Path:
    """A private copy of the hand-made capture that a test may break."""
    dst = tmp_path / "capture"
    shutil.copytree(handmade_capture, dst)
    return dst


def shared_data_dir() -> Path | None:
    """The real third-party test data (``../shared/data`` or ``$NUREC_USD_TEST_DATA``), or None."""
    import os

    env = os.environ.get("NUREC_USD_TEST_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def assert_openusd_valid(stage) -> None:
    """Every validator pxr registers passes on ``stage``."""
    from pxr import UsdValidation

    validators = UsdValidation.ValidationRegistry().GetOrLoadAllValidators()
    errors = UsdValidation.ValidationContext(validators).Validate(stage)
    assert not errors, [f"{e.GetName()}: {e.GetMessage()}" for e in errors]


def assert_gaussian_splats_valid(stage) -> None:
    """NVIDIA's Gaussian splat schema checker finds nothing on ``stage`` (skips without the validator)."""
    uvn = pytest.importorskip("usd_validation_nvidia")
    engine = uvn.ValidationEngine()
    engine.enable_rule(uvn.GaussianSplatSchemaChecker)
    issues = list(engine.validate(stage).issues)
    assert not issues, [f"{i.rule}: {i.message} at {i.at}" for i in issues]
