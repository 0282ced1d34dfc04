"""``build`` on a real capture: the DGP sample (../shared/data/tri_dgp), through its importer.

Three frames per camera: the middle one is held out (``eval_every=2``), images are shrunk 8x
so that the CPU can afford a short run. The point is that a real capture goes through every
stage and reports its metrics, not the quality of a 40-step build.
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import shared_data_dir


@pytest.fixture(scope="module")
def dgp_dataset():
    data = shared_data_dir()
    if data is None or not (data / "tri_dgp" / "scene_dataset_v1.0.json").is_file():
        pytest.skip("real test data (../shared/data/tri_dgp or $NUREC_USD_TEST_DATA/tri_dgp) is not available")
    return data / "tri_dgp"


def test_build_runs_on_the_real_dgp_sample(dgp_dataset, tmp_path):
    from nurec_usd import build

    out = tmp_path / "run"
    with pytest.warns(Warning, match="scene_02"):  # the dataset lists a scene that is not there
        result = build(dgp_dataset / "scene_dataset_v1.0.json", out, steps=40, downscale=8, eval_every=2,
                       lidar_every=2, progress=False, log=lambda _m: None)
    assert result.status == "completed"
    m = json.loads((out / "metrics.json").read_text())
    assert m["held_out_frames"] == 3  # the middle frame of each of the 3 cameras
    assert m["held_out_sweeps"] == 1
    assert math.isfinite(m["psnr"]) and m["psnr"] > m["baseline_psnr"]
    assert math.isfinite(m["lidar_median_range_error_m"])
    assert m["actor_gaussians"] > 0  # the moving and parked cars of the boxes
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["capture_name"] and manifest["inputs"]["files"]
