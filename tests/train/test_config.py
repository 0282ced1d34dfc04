"""Build configuration: presets and overrides, checked by name and type."""

from __future__ import annotations

import numpy as np
import pytest

from nurec_usd.train.config import PRESETS, make_config, option_names


def test_overrides_land_in_train_and_init_with_their_option_types():
    cfg = make_config("fast", steps=np.int64(120), lidar_range_weight=2, voxel_m=0.2, refine_tracks=True,
                      lr_means=np.float32(0.5), init={"max_points": 5000})
    assert cfg.train.steps == 120 and type(cfg.train.steps) is int
    assert cfg.train.lidar_range_weight == 2.0 and type(cfg.train.lidar_range_weight) is float
    assert cfg.init.voxel_m == 0.2 and cfg.train.refine_tracks is True
    assert cfg.train.lr_means == 0.5 and type(cfg.train.lr_means) is float
    assert cfg.init.max_points == 5000
    assert make_config("fast", steps=None).train.steps == PRESETS["fast"]["train"]["steps"]  # None: the preset's
    assert make_config("fast").train.lidar_actor_motion is True
    assert make_config("fast", lidar_actor_motion=False).train.lidar_actor_motion is False


@pytest.mark.parametrize("key, value, kind", [
    ("steps", 2.5, "an integer >= 1"), ("steps", "10", "an integer >= 1"), ("steps", True, "an integer >= 1"),
    ("lidar_range_weight", "high", "a number from 0 to 1000"), ("lidar_range_weight", False, "a number from 0 to 1000"),
    ("refine_tracks", 1, "True or False"), ("voxel_m", "0.1", "a number from 0.001 to 100"),
])
def test_a_value_of_the_wrong_type_is_refused_by_name(key, value, kind):
    with pytest.raises(ValueError, match=f"build option '{key}' takes {kind}, got {value!r}"):
        make_config("fast", **{key: value})
    with pytest.raises(ValueError, match=f"build option '{key}' takes {kind}"):
        section = "init" if key == "voxel_m" else "train"
        make_config("fast", **{section: {key: value}})


def test_an_unknown_option_names_the_nearest_one():
    with pytest.raises(ValueError, match="unknown build option 'lidar_range_weigth'; did you mean "
                                         "'lidar_range_weight'"):
        make_config("fast", lidar_range_weigth=1.0)
    with pytest.raises(ValueError, match=r"unknown build option 'zzz'$"):
        make_config("fast", zzz=1)
    assert "lidar_range_weight" in option_names() and "voxel_m" in option_names()
