"""``validate`` on a USD stage: OpenUSD's validators and NVIDIA's, the exit code, one line per issue."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytest.importorskip("pxr")

from test_usd_export import exported, rig, scene  # noqa: E402,F401 (fixtures)

from pxr import Usd, UsdVol, Vt  # noqa: E402

from nurec_usd.export.usd_check import StageOpenError, check_stage, is_usd_path, nvidia_available  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, "-m", "nurec_usd", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _broken_opacity(exported, tmp_path):
    """A copy of the export whose first background Gaussian has opacity 3."""
    bad = tmp_path / "bad"
    shutil.copytree(exported, bad)
    stage = Usd.Stage.Open(str(bad / "background.usdc"))
    attr = UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath("/World/Background/Gaussians")).GetOpacitiesAttr()
    values = list(attr.Get())
    values[0] = 3.0
    attr.Set(Vt.FloatArray(values))
    stage.Save()
    return bad


def test_the_export_validates_clean_from_the_cli(exported):
    for target in (exported, exported / "root.usda"):
        r = run("validate", target)
        assert r.returncode == 0, r.stderr
        assert "valid USD" in r.stdout and "UsdValidation" in r.stdout
        assert ("GaussianSplatSchemaChecker" in r.stdout) == nvidia_available()


def test_an_issue_fails_with_the_prim_and_the_validator_named(exported, tmp_path):
    if not nvidia_available():
        pytest.skip("usd-validation-nvidia is not installed (its Gaussian-splat checker finds this issue)")
    bad = _broken_opacity(exported, tmp_path)
    r = run("validate", bad / "root.usda")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"{bad / 'root.usda'}: 1 USD problem"
    assert lines[1].startswith("  - error: /World/Background/Gaussians: nvidia:GaussianSplatSchemaChecker: ")
    assert "Opacity at index 0 is 3.0" in lines[1] and "Traceback" not in r.stderr


def test_openusd_validators_find_stage_metadata_problems(tmp_path):
    path = tmp_path / "bare.usda"
    path.write_text('#usda 1.0\ndef Xform "World"\n{\n}\n')
    issues, ran = check_stage(path)
    names = {i.validator for i in issues if not i.validator.startswith("nvidia:")}
    assert "usdValidation:StageMetadataChecker.MissingDefaultPrim" in names
    assert "usdGeomValidators:StageMetadataChecker.MissingUpAxisMetadata" in names
    assert all(i.severity == "error" and i.where == "stage" for i in issues if i.validator in names)
    assert ran[0].startswith("OpenUSD UsdValidation")
    r = run("validate", path)
    assert r.returncode == 1 and "MissingDefaultPrim" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("name, content", [("root.usda", b"not usd {{{\n"), ("scene.usdc", bytes(range(256)) * 8),
                                           ("scene.usdz", b"PK\x03\x04garbage")])
def test_a_file_usd_cannot_read_is_one_line(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(StageOpenError, match="not a USD stage USD can read"):
        check_stage(path)
    r = run("validate", path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line
    assert r.stderr.startswith(f"validate: {path}: not a USD stage USD can read (") and "Error in" not in r.stderr


def test_what_counts_as_a_usd_path(tmp_path, exported, handmade_capture):
    assert is_usd_path(tmp_path / "x.usdz") and is_usd_path(tmp_path / "x.USDA") and is_usd_path(exported)
    run_dir = tmp_path / "run"
    (run_dir / "usd").mkdir(parents=True)
    (run_dir / "usd" / "root.usda").write_text("#usda 1.0\n")
    assert is_usd_path(run_dir)
    assert not is_usd_path(handmade_capture) and not is_usd_path(tmp_path / "x.json")
