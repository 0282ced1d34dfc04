"""Folders written all or nothing: built in a hidden sibling, moved into place whole."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path


class OutputExistsError(FileExistsError):
    """An output path that exists where replacing it was not asked for; ``path`` is the path."""

    def __init__(self, path: str | Path, message: str | None = None):
        super().__init__(message or f"{path} already exists (pass overwrite=True to replace it)")
        self.path = Path(path)


class StagedDirectory:
    """A folder that appears at ``out_dir`` only when ``commit`` is called, complete.

    Files go into ``path``, a hidden sibling of ``out_dir`` (same file system, so the final
    rename is atomic; made with ``mkdir``, so it gets ordinary permissions). ``commit``
    replaces an existing ``out_dir`` only with ``overwrite``: the old folder is moved aside,
    the new one in, then the old one deleted, so ``out_dir`` always holds one whole folder.
    ``abort`` removes everything written.
    """

    def __init__(self, out_dir: str | Path, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        self.overwrite = overwrite
        if self.out_dir.exists() and not overwrite:
            raise OutputExistsError(self.out_dir)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir.parent / f".{self.out_dir.name}.{uuid.uuid4().hex[:12]}.partial"
        self.path.mkdir()

    def commit(self) -> Path:
        """Move the finished folder into place. Returns ``out_dir``."""
        old = None
        if self.out_dir.exists():
            if not self.overwrite:
                raise FileExistsError(f"{self.out_dir} appeared while it was being written; not replacing it")
            old = self.path.with_name(self.path.name + ".old")
            self.out_dir.rename(old)
        self.path.rename(self.out_dir)
        if old is not None:
            shutil.rmtree(old)
        return self.out_dir

    def abort(self) -> None:
        """Drop everything written so far."""
        shutil.rmtree(self.path, ignore_errors=True)
