"""benchmarks/build_drive30.py: --set options are checked by name and type before any capture is generated."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("option, message", [
    ("lr_scales=high", "build option 'lr_scales' takes a number from 0 to 10, got 'high'"),
    ("device=cpu", "unknown build option 'device'"),  # a flag of the script's own
    ("lidar_range_weigth=1", "did you mean 'lidar_range_weight'"),
])
def test_bad_set_options_are_usage_errors(option, message):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "build_drive30.py"), "--device", "cpu",
                           "--set", option], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "synth" not in done.stdout  # refused before generating a capture
