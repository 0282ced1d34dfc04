"""The package ships what it needs: every sub-package, the schemas."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import REPO


def test_every_package_is_listed_in_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top in ("nurec_usd", "warp_kernels"):
        for init in (REPO / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(REPO).parts))
    missing = found - listed
    assert not missing, f"add these packages to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_capture_schema_ships_and_is_a_valid_schema():
    from nurec_usd.capture.manifest import capture_schema

    schema = capture_schema()
    assert schema == json.loads((REPO / "schemas" / "capture.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)


def test_importing_the_package_stays_light():
    import subprocess
    import sys

    code = "import sys, nurec_usd, nurec_usd.capture; print(sorted(m for m in ('torch', 'warp', 'pxr', 'open3d') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
