"""benchmarks/interp_ab.py: a commit's packages exported under baseline names that import each other."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _in_git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not _in_git_checkout(), reason="needs the project's git history")
def test_baseline_export_renames_the_packages_and_their_imports(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks.interp_ab import export_baseline

    export_baseline("HEAD", tmp_path)
    assert not (tmp_path / "nurec_usd").exists() and not (tmp_path / "warp_kernels").exists()
    source = (tmp_path / "baseline_nurec_usd" / "ops" / "interpolate.py").read_text()
    assert "from baseline_nurec_usd.ops.autograd_apply import" in source
    assert "from nurec_usd" not in source and "import warp_kernels" not in source
    # the renamed packages import on their own, beside this tree's
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import baseline_nurec_usd.ops.interpolate as m; print(m.TrackKeys.__module__)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "baseline_nurec_usd.ops.interpolate"
