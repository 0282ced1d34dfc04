"""Resolving the paths a capture names without ever leaving its directory.

The native loader and every importer read files through these two functions, so that a
capture (a manifest, a transforms.json, a COLMAP model, a dataset's tables, or a folder
listing with symlinks in it) cannot make the tool read a file outside the folder it lives in.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath


def resolve_inside(root: Path, relpath: str) -> Path:
    """The file ``relpath`` names inside ``root``.

    Refuses (``ValueError`` with the reason) absolute paths, backslashes, ``..``
    components, and symlinks whose target lies outside ``root``: a capture must not be
    able to make the tool read arbitrary files.
    """
    if "\\" in relpath:
        raise ValueError(f"path {relpath!r} uses '\\'; capture paths are '/'-separated")
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or PureWindowsPath(relpath).drive:
        raise ValueError(f"path {relpath!r} is absolute; capture paths are relative to the capture directory")
    if ".." in pure.parts:
        raise ValueError(f"path {relpath!r} leaves the capture directory ('..')")
    return ensure_inside(root, root / pure, relpath)


def ensure_inside(root: Path, path: Path, shown: str | None = None) -> Path:
    """``path`` itself when it lies inside ``root`` once symlinks are resolved (both sides).

    For paths that were not written in a file but found by listing a folder, or built by
    joining folder names: a symlink among them must not point outside ``root``. ``shown``
    is how the path appears in the message (default: relative to ``root``).

    Raises:
        ValueError: the path resolves outside ``root`` (the message names the target).
    """
    root_real = root.resolve()
    real = path.resolve()
    if real != root_real and root_real not in real.parents:
        if shown is None:
            try:
                shown = path.relative_to(root).as_posix()
            except ValueError:
                shown = str(path)
        raise ValueError(f"path {shown!r} resolves outside the capture directory (a symlink to {real})")
    return path
