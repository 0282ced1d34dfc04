"""Files and folders written all or nothing: built in a hidden sibling, moved into place whole."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path
from typing import Iterator

from nurec_usd.util.io_errors import naming

OWNER_FILE = ".nurec_owner.json"  # inside a staging folder: which process writes it


@contextlib.contextmanager
def atomic_file(path: str | Path, *, keep_suffix: bool = False) -> Iterator[Path]:
    """A hidden temporary sibling of ``path`` to write in the block; moved onto ``path`` when the
    block ends without an error (a rename: readers see the old file or the new one, never half of
    one), removed when it raises.

    ``keep_suffix``: the temporary name ends in ``path``'s suffix (``.NAME.tmp.png``), for writers
    that choose the format from it (PIL, OpenCV, USD); otherwise it is ``.NAME.tmp``. Both forms are
    shown as ``path`` in error messages (``nurec_usd.util.io_errors``).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}" if keep_suffix else f".{path.name}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name, then move it into place; a file error
    names ``path``."""
    with atomic_file(path) as tmp, naming(Path(path)):
        tmp.write_bytes(data)


class OutputExistsError(FileExistsError):
    """An output path that exists where replacing it was not asked for; ``path`` is the path."""

    def __init__(self, path: str | Path, message: str | None = None):
        super().__init__(message or f"{path} already exists (pass overwrite=True to replace it)")
        self.path = Path(path)


class StagedDirectory:
    """A folder that appears at ``out_dir`` only when ``commit`` is called, complete.

    Files go into ``path``, a hidden sibling of ``out_dir`` named
    ``.NAME.<pid>-<random>.partial`` (same file system, so the final rename is atomic; made
    with ``mkdir``, so it gets ordinary permissions). ``commit`` replaces an existing
    ``out_dir`` only with ``overwrite``: the old folder is moved aside, the new one in, then the
    old one deleted, so ``out_dir`` always holds one whole folder. ``abort`` removes everything
    written.

    A process killed outright (kill -9, power loss) leaves its staging folder behind; the next
    ``StagedDirectory`` of the same ``out_dir`` removes it once its writer is gone (same host,
    no process of that id: see :func:`stale_partials`).

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is False.
        NotADirectoryError: a parent of ``out_dir`` is a file (it names that file).
    """

    def __init__(self, out_dir: str | Path, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        self.overwrite = overwrite
        ensure_folder(self.out_dir.parent)
        if self.out_dir.exists() and not overwrite:
            raise OutputExistsError(self.out_dir)
        self.removed_stale = remove_stale_partials(self.out_dir)
        self.path = self.out_dir.parent / f".{self.out_dir.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.partial"
        self.path.mkdir()
        try:
            (self.path / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def commit(self) -> Path:
        """Move the finished folder into place. Returns ``out_dir``."""
        old = None
        if self.out_dir.exists():
            if not self.overwrite:
                raise FileExistsError(f"{self.out_dir} appeared while it was being written; not replacing it")
            old = self.path.with_name(self.path.name + ".old")
            self.out_dir.rename(old)
        self.path.rename(self.out_dir)
        (self.out_dir / OWNER_FILE).unlink(missing_ok=True)
        if old is not None:
            shutil.rmtree(old)
        return self.out_dir

    def abort(self) -> None:
        """Drop everything written so far."""
        shutil.rmtree(self.path, ignore_errors=True)


def ensure_folder(folder: str | Path) -> Path:
    """Create ``folder`` and its missing parents.

    Raises ``NotADirectoryError`` naming the first part of the path that exists as a file (mkdir
    would report it as an existing file, which reads like a name clash with the output).
    """
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder: nothing can be created under it",
                                         str(part))
            break
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _partial_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^\.{re.escape(name)}\.(\d+)-[0-9a-f]{{12}}\.partial(\.old)?$")


def stale_partials(out_dir: str | Path) -> list[Path]:
    """The staging folders of ``out_dir`` left by writers that are gone: on this host, with no
    process of their id alive. Folders of other hosts (a shared disk) or of live processes are
    not listed, nor the previous folder a commit had moved aside when ``out_dir`` is missing."""
    out_dir = Path(out_dir)
    pattern = _partial_pattern(out_dir.name)
    host = socket.gethostname()
    found = []
    try:
        siblings = list(out_dir.parent.iterdir())
    except OSError:
        return []
    for path in siblings:
        match = pattern.match(path.name)
        if match is None or not path.is_dir() or path.is_symlink():
            continue
        pid = int(match.group(1))
        owner = _owner(path)
        if owner is not None and (owner.get("host") != host or owner.get("pid") != pid):
            continue  # another host's writer (a shared disk): its processes are not visible here
        if match.group(2) is not None and not out_dir.exists():
            continue  # the previous folder, moved aside by a commit that did not finish: keep it
        if pid != os.getpid() and not _alive(pid):
            found.append(path)
    return found


def remove_stale_partials(out_dir: str | Path) -> list[Path]:
    """Remove :func:`stale_partials` of ``out_dir``; returns those removed."""
    removed = []
    for path in stale_partials(out_dir):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


def _owner(path: Path) -> dict | None:
    try:
        owner = json.loads((path / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _alive(pid: int) -> bool:
    """Whether a process of id ``pid`` exists here (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True
