"""The ego parts of a build on the real captures (../shared/data): the KITTI drive's lidar sees
its own car (a box is found and its returns dropped), the DGP sample's ego stands still (no
estimate). A few steps on tiny images: the point is that the parts run, not the quality."""

from __future__ import annotations

import json
import math
import warnings

import pytest

from conftest import shared_data_dir


def _real(relative: str):
    data = shared_data_dir()
    if data is None or not (data / relative).exists():
        pytest.skip(f"real test data (../shared/data/{relative} or $NUREC_USD_TEST_DATA) is not available")
    return data / relative


def test_kitti_build_drops_the_cars_own_returns_and_learns_frame_colours(tmp_path):
    from nurec_usd import build

    drive = _real("kitti_udacity/2011_09_26")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the importer's notes on the drive's missing oxts and timestamps
        result = build(drive, tmp_path / "run", steps=2, downscale=8, eval_every=4, voxel_m=0.5,
                       max_gaussians=30_000, lidar_every=0, frame_appearance="gain_bias", progress=False,
                       log=lambda _m: None)
    assert result.status == "completed"
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    ego = m["ego"]
    assert ego["box_source"] == "auto" and ego["box"] is not None
    lo_z, hi_z = float(ego["box"].split(",")[2]), float(ego["box"].split(",")[5])
    assert -1.7 < lo_z < hi_z < 0  # below the roof-mounted lidar, above the road (1.73 m below it)
    assert 100 < ego["dropped_lidar_points"] < 20_000  # the car's own returns: a few hundred of ~1.7 M
    assert set(ego["cameras"]) == {"image_02"}  # estimated (the rig drives), found nothing: no hood in view
    assert ego["cameras"]["image_02"]["share"] == 0.0
    assert m["frame_appearance"]["mode"] == "gain_bias" and m["frame_appearance"]["frames"] == 15
    assert math.isfinite(m["psnr"]) and math.isfinite(m["lidar_median_range_error_m"])


def test_dgp_build_estimates_nothing_for_a_standing_ego(tmp_path):
    from nurec_usd import build

    dataset = _real("tri_dgp/scene_dataset_v1.0.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dataset lists a scene that is not there
        build(dataset, tmp_path / "run", steps=2, downscale=8, eval_every=2, voxel_m=0.5, max_gaussians=30_000,
              lidar_every=0, progress=False, log=lambda _m: None)
    ego = json.loads((tmp_path / "run" / "metrics.json").read_text())["ego"]
    assert ego == {"box": None, "box_source": "auto", "cameras": {}, "dropped_lidar_points": 0}
