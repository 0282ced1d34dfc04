"""Importers: captures in other formats read into the same in-memory ``Capture`` as the native loader.

Each format is one module here with two functions:

- ``detect(path: Path) -> bool``: whether ``path`` (a directory or a file) looks like that format;
- ``load(path: Path, *, skip_missing: bool = False) -> Capture``: the capture, or ``CaptureError``
  naming the file and field. ``skip_missing`` leaves out the frames (and sweeps) whose file is
  missing, with one ``MissingFilesWarning`` (``nurec_usd.capture.missing``).

Every path an importer reads is confined to the dataset's folder (``nurec_usd.capture.paths``),
with the native format's errors.

``load_any`` picks the format (``detect`` of each, native first) unless one is forced.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from nurec_usd.capture.errors import CaptureError, Problem
from nurec_usd.capture.model import Capture

# format name -> module (the native loader is not an importer, but it is detected first)
IMPORTERS = {
    "nerfstudio": "nurec_usd.capture.importers.nerfstudio",
    "colmap": "nurec_usd.capture.importers.colmap",
    # before dgp: a nuScenes table folder holds a scene.json, a file name DGP also uses
    "nuscenes": "nurec_usd.capture.importers.nuscenes",
    "dgp": "nurec_usd.capture.importers.dgp",
    "kitti": "nurec_usd.capture.importers.kitti",
    "ncore": "nurec_usd.capture.importers.ncore",
}
# Options of load_any that only some formats have: option -> the formats that take it.
FORMAT_OPTIONS = {"scene": ("nuscenes",)}
FORMATS = ("native", *IMPORTERS)


def _module(name: str):
    try:
        return importlib.import_module(IMPORTERS[name])
    except ModuleNotFoundError as err:
        if err.name == IMPORTERS[name]:
            return None  # not written yet
        raise


def available_formats() -> list[str]:
    """The formats this installation can read."""
    return ["native"] + [name for name in IMPORTERS if _module(name) is not None]


def _is_native(path: Path) -> bool:
    manifest = path / "capture.json" if path.is_dir() else path
    return manifest.name == "capture.json" and manifest.is_file()


def detect_format(path: str | Path) -> str:
    """The format of the capture at ``path``; ``CaptureError`` when no reader recognises it."""
    path = Path(path)
    if not path.exists():
        raise CaptureError([Problem(str(path), "", "no such capture directory (or file)")])
    if _is_native(path):
        return "native"
    for name in IMPORTERS:
        module = _module(name)
        if module is not None and module.detect(path):
            return name
    raise CaptureError([Problem(str(path), "", "not a capture in any known format (looked for: "
                                + ", ".join(available_formats()) + "); force one with --format")])


def load_any(path: str | Path, format: str | None = None, *, skip_missing: bool = False,
             scene: str | None = None) -> Capture:
    """Load a capture in any supported format (detected unless ``format`` is given).

    Args:
        path: the capture (a folder or file, as the format has it).
        format: force the format instead of detecting it.
        skip_missing: leave out frames and sweeps whose file is missing (one warning with the
            count) instead of refusing the capture.
        scene: which scene of a multi-scene dataset (nuScenes) to load, by name; default: the first.

    Raises:
        CaptureError: the capture has problems (each names its file and field).
        ValueError: an unknown format, or an option the format does not have.
    """
    from nurec_usd.capture.loader import load_capture

    name = format or detect_format(path)
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    extra = {"scene": scene} if scene is not None else {}
    for option in extra:
        if name not in FORMAT_OPTIONS[option]:
            raise ValueError(f"--{option} applies to {', '.join(FORMAT_OPTIONS[option])} captures only "
                             f"({path} is a {name} capture)")
    if name == "native":
        return load_capture(path, skip_missing=skip_missing)
    module = _module(name)
    if module is None:
        raise ValueError(f"the {name} importer is not available in this version")
    return checked_import(module.load(Path(path), skip_missing=skip_missing, **extra), name)


def checked_import(capture: Capture, format: str) -> Capture:
    """An imported capture through the native loader's checks of what it holds (the importer
    checked its files): plausible intrinsics, lidar tables of a size that fits in memory. Each
    lidar learns the rig poses' time range, so that its sweeps are checked against it when read,
    as a native capture's are. ``CaptureError`` naming the camera or lidar otherwise."""
    import dataclasses

    from nurec_usd.capture.loader import MAX_LIDAR_RAYS, intrinsics_problems

    where = f"({format} import)"
    problems = []
    for cam in capture.cameras.values():
        for key, message in intrinsics_problems(cam.model, cam.width, cam.height, cam.intrinsics):
            problems.append(Problem(where, f"camera {cam.id}: intrinsics.{key}", message))
    for lidar_id, lidar in list(capture.lidars.items()):
        rays = lidar.channels * lidar.columns
        if rays > MAX_LIDAR_RAYS:
            problems.append(Problem(where, f"lidar {lidar_id}: columns", f"{lidar.channels} channels x "
                                    f"{lidar.columns} columns = {rays:,} rays per sweep, more than the "
                                    f"{MAX_LIDAR_RAYS:,} supported"))
        if lidar.time_range_us is None:
            capture.lidars[lidar_id] = dataclasses.replace(lidar, time_range_us=(capture.start_us, capture.end_us))
    if problems:
        raise CaptureError(problems, str(capture.root))
    return capture
