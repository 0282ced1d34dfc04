"""Resolving manifest paths without ever leaving the capture directory."""

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
    root_real = root.resolve()
    path = root / pure
    real = path.resolve()
    if real != root_real and root_real not in real.parents:
        raise ValueError(f"path {relpath!r} resolves outside the capture directory (a symlink to {real})")
    return path
