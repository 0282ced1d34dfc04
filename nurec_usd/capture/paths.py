"""Resolving the paths a capture names without ever leaving its directory.

The native loader and every importer read files through these two functions, so that a
capture (a manifest, a transforms.json, a COLMAP model, a dataset's tables, or a folder
listing with symlinks in it) cannot make the tool read a file outside the folder it lives in.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath


class RealFolders:
    """The real paths of folders, each resolved once: for reading the thousands of files of one
    capture, whose frames share a few folders. A file's own name is still checked for a symlink
    every time. Meant for one load (a folder's links are read when first seen), and safe to
    share between threads."""

    def __init__(self) -> None:
        self._real: dict[Path, Path] = {}

    def folder(self, path: Path) -> Path:
        real = self._real.get(path)
        if real is None:
            real = self._real[path] = path.resolve()
        return real

    def resolve(self, path: Path) -> Path:
        """``path.resolve()``, through the real path of its folder."""
        if path.name in ("", ".", ".."):
            return path.resolve()
        joined = self.folder(path.parent) / path.name
        return joined.resolve() if joined.is_symlink() else joined


def resolve_inside(root: Path, relpath: str, folders: RealFolders | None = None) -> Path:
    """The file ``relpath`` names inside ``root``.

    Refuses (``ValueError`` with the reason) absolute paths, backslashes, ``..``
    components, and symlinks whose target lies outside ``root``: a capture must not be
    able to make the tool read arbitrary files. ``folders``: resolves the folders of many
    files once each.
    """
    if "\\" in relpath:
        raise ValueError(f"path {relpath!r} uses '\\'; capture paths are '/'-separated")
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or PureWindowsPath(relpath).drive:
        raise ValueError(f"path {relpath!r} is absolute; capture paths are relative to the capture directory")
    if ".." in pure.parts:
        raise ValueError(f"path {relpath!r} leaves the capture directory ('..')")
    return ensure_inside(root, root / pure, relpath, folders)


def ensure_inside(root: Path, path: Path, shown: str | None = None, folders: RealFolders | None = None) -> Path:
    """``path`` itself when it lies inside ``root`` once symlinks are resolved (both sides).

    For paths that were not written in a file but found by listing a folder, or built by
    joining folder names: a symlink among them must not point outside ``root``. ``shown``
    is how the path appears in the message (default: relative to ``root``); ``folders``
    resolves the folders of many paths once each.

    Raises:
        ValueError: the path resolves outside ``root`` (the message names the target).
    """
    root_real = root.resolve() if folders is None else folders.folder(root)
    real = path.resolve() if folders is None else folders.resolve(path)
    if real != root_real and root_real not in real.parents:
        if shown is None:
            try:
                shown = path.relative_to(root).as_posix()
            except ValueError:
                shown = str(path)
        raise ValueError(f"path {shown!r} resolves outside the capture directory (a symlink to {real})")
    return path
