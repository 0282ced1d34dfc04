"""benchmarks/sweep_drive30.py: one decoded capture, one real build per option set, rows as they finish."""

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _main(monkeypatch, *args: str) -> int:
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks.sweep_drive30 import main

    monkeypatch.setattr(sys, "argv", ["sweep_drive30.py", *args])
    return main()


def test_sweep_builds_the_defaults_then_each_option_set(handmade_capture, tmp_path, monkeypatch, capsys):
    out = tmp_path / "rows.json"
    assert _main(monkeypatch, "--device", "cpu", "--capture", str(handmade_capture), "--steps", "2",
                 "--run", "sh_degree=0 opacity=0.3", "--run", "steps=3", "--json", str(out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["options"] for r in rows] == [{}, {"sh_degree": 0, "opacity": 0.3}, {"steps": 3}]
    assert [r["steps"] for r in rows] == [2, 2, 3]  # a row's own steps before --steps
    for r in rows:
        assert r["status"] == "completed" and r["gaussians"] > 0
        assert math.isfinite(r["psnr"]) and 0 < r["ssim"] <= 1
    table = capsys.readouterr().out
    assert "| (defaults) |" in table and "| sh_degree=0 opacity=0.3 |" in table and "| steps=3 |" in table


@pytest.mark.parametrize("run, message", [
    ("downscale=2", "a load option"),
    ("lr_scale=0.01", "did you mean 'lr_scales'"),
    ("steps=many", "build option 'steps' takes an integer >= 1, got 'many'"),
])
def test_sweep_refuses_bad_runs_before_loading(run, message, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _main(monkeypatch, "--device", "cpu", "--capture", str(tmp_path / "absent"), "--steps", "2", "--run", run)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
