"""``benchmarks/build_drive30.py --set KEY=VALUE``: how a value is read."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.build_drive30 import _option


def test_set_values_are_python_literals_or_strings():
    assert _option("lidar_every=2") == ("lidar_every", 2)
    assert _option("lidar_range_weight=0.5") == ("lidar_range_weight", 0.5)
    assert _option("refine_tracks=True") == ("refine_tracks", True)
    assert _option("voxel_m=1e-1") == ("voxel_m", 0.1)
    assert _option("name=fast") == ("name", "fast")  # not a literal: kept as text
    assert _option("name=a=b") == ("name", "a=b")  # split at the first '='


@pytest.mark.parametrize("text", ["lidar_every", "=2", ""])
def test_set_needs_a_key_and_an_equals_sign(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
        _option(text)
