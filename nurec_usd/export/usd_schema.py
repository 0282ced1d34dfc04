"""Make nurec_usd's own codeless USD schemas (``schemas/usd/``) known to USD.

The schemas (``NurecSpinningLidarAPI`` for lidar Xforms, ``NurecCameraSensorAPI`` for
cameras) are codeless: USD learns them from ``plugInfo.json`` + ``generatedSchema.usda``
found through ``PXR_PLUGINPATH_NAME``. Call :func:`register_schema` before the first
``import pxr`` of the process (export and replay modules do it at the top of every function
that imports ``pxr``).

Why the order matters: USD's plugin registry reads ``PXR_PLUGINPATH_NAME`` once, when it is
first created (on the first import of ``pxr``), and ``Usd.SchemaRegistry`` is a singleton
that builds its table of schemas once, from the plugins registered at that moment. A path
added to the environment afterwards is never read, and a plugin registered by hand after the
schema registry exists is not turned into prim definitions. So: environment first, then
``pxr``. When ``pxr`` is already imported we still register the folder with
``Plug.Registry`` (enough if nothing has used the schema registry yet) and report whether
the schemas became known.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from nurec_usd.util.resources import schemas_dir

__all__ = ["LIDAR_API", "CAMERA_API", "INTENSITY_PRIMVAR", "CV_TO_USD", "schema_dir", "register_schema", "schemas_known",
           "intrinsic_items", "intrinsics_from_items"]

LIDAR_API = "NurecSpinningLidarAPI"
CAMERA_API = "NurecCameraSensorAPI"
ENV = "PXR_PLUGINPATH_NAME"


def schema_dir() -> Path:
    """The folder holding ``plugInfo.json``, ``generatedSchema.usda`` and ``schema.usda``.

    Found through ``importlib.resources`` of ``nurec_usd.schemas`` (the top-level
    ``schemas/`` folder, mapped into the package when installed); from a source tree the
    repository's ``schemas/`` folder.
    """
    path = Path(str(schemas_dir() / "usd"))
    if not (path / "plugInfo.json").is_file():
        raise FileNotFoundError(f"{path}: plugInfo.json of the nurec_usd USD schemas is missing")
    return path


def schemas_known() -> bool:
    """Whether USD (already imported) knows our API schemas."""
    from pxr import Usd

    return bool(Usd.SchemaRegistry().FindAppliedAPIPrimDefinition(LIDAR_API))


def register_schema() -> Path:
    """Point ``PXR_PLUGINPATH_NAME`` at our schemas (idempotent). Returns the folder.

    Before ``pxr`` is imported this is all USD needs. If ``pxr`` was imported already, the
    folder is registered with ``Plug.Registry`` too; that works only while nothing has used
    the schema registry yet, so a RuntimeError says so when the schemas stay unknown.
    """
    path = schema_dir()
    entries = [e for e in os.environ.get(ENV, "").split(os.pathsep) if e]
    if str(path) not in entries:
        os.environ[ENV] = os.pathsep.join([str(path), *entries])
    if "pxr" in sys.modules:
        from pxr import Plug

        Plug.Registry().RegisterPlugins(str(path))
        if not schemas_known():
            raise RuntimeError(
                f"pxr was imported and used before nurec_usd registered its USD schemas; set "
                f"{ENV}={path} (or import nurec_usd.export first) so that the schemas load")
    return path


# Names and conventions the writer and the readers of the USD share.

# Primvar of the splat prims holding each Gaussian's modelled lidar return intensity.
INTENSITY_PRIMVAR = "nurec:lidarIntensity"
# OpenCV camera axes (x right, y down, z forward) -> USD camera axes (x right, y up, -z forward);
# its own inverse.
CV_TO_USD = np.diag([1.0, -1.0, -1.0, 1.0])


def intrinsic_items(intr: dict) -> tuple[list[str], list[float]]:
    """A camera's intrinsics as ``nurec:camera:intrinsicNames/Values``: list entries (f-theta
    polynomials) become ``name_0``, ``name_1``, ...; :func:`intrinsics_from_items` reverses it."""
    names, values = [], []
    for key in sorted(intr):
        v = intr[key]
        if isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                names.append(f"{key}_{i}")
                values.append(float(x))
        else:
            names.append(key)
            values.append(float(v))
    return names, values


def intrinsics_from_items(names: list[str], values: list[float]) -> dict:
    """Back from :func:`intrinsic_items`: ``name_i`` entries become lists again."""
    out: dict = {}
    lists: dict[str, dict[int, float]] = {}
    for name, value in zip(names, values):
        base, _, index = name.rpartition("_")
        if base and index.isdigit():
            lists.setdefault(base, {})[int(index)] = float(value)
        else:
            out[name] = float(value)
    for base, items in lists.items():
        out[base] = [items[i] for i in sorted(items)]
    return out
