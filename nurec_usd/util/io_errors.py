"""File-system failures (a full disk, a read-only folder, a file where a folder should be) as
one line a user can act on: which file, what happened, what to do.

Writers that go through libraries which lose the file name or the error number (torch's
zip writer, USD's layer writer) re-raise here as an ``OSError`` naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from typing import Iterator

# A staging folder's name (see nurec_usd.util.staging), and a file's temporary name while it
# is written (".NAME.tmp", ".STEM.tmp.SUFFIX"): shown as the output they become.
_STAGED = re.compile(r"(^|/)\.([^/]+)\.\d+-[0-9a-f]{12}\.partial(?=/|$)")
_TEMPORARY = re.compile(r"(^|/)\.([^/]+?)\.tmp(\.[A-Za-z0-9]+)?$")

_WHAT = {
    errno.ENOSPC: ("the disk is full", "free some space or write the output to another disk"),
    errno.EDQUOT: ("the disk quota is used up", "free some space or write the output elsewhere"),
    errno.EFBIG: ("the file grew past the largest size allowed here (the file system's or the process's limit)",
                  "write the output to another disk or raise the limit (ulimit -f)"),
    errno.EROFS: ("the file system is read-only", "write the output to a writable folder"),
    errno.EACCES: ("permission denied", "write the output to a folder you may write to"),
    errno.EPERM: ("operation not permitted", "write the output to a folder you may write to"),
    errno.ENOTDIR: ("is a file, not a folder", "choose an output path whose parents are folders"),
    errno.EISDIR: ("is a folder, not a file", "choose a file name for the output"),
    errno.ENAMETOOLONG: ("the file name is too long", "choose a shorter output path"),
}


def display_path(path: str | os.PathLike | None) -> str:
    """``path`` as the user named it: a staging folder (``.run.<id>.partial``) shown as the
    output it becomes (``run``)."""
    if path is None:
        return "(unknown file)"
    text = _STAGED.sub(lambda m: f"{m.group(1)}{m.group(2)}", os.fspath(path))
    return _TEMPORARY.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}", text)


def describe_os_error(err: OSError, output: str | os.PathLike | None = None) -> str:
    """One line for a failed file operation: ``FILE: what happened (the system's words); what to do``.
    ``output``: named instead (``while writing OUTPUT``) when the error does not say which file."""
    name = display_path(err.filename) if err.filename is not None else None
    if name is None and output is not None:
        name = f"while writing {display_path(output)}"
    what, todo = _WHAT.get(err.errno, (None, None))
    system = err.strerror or str(err)
    if err.errno == errno.ENOTDIR and err.filename is not None:
        return f"{name}: {what}; {todo}"
    head = f"{name}: " if name else ""
    if what is None:
        return f"{head}{system}"
    return f"{head}{what} ({system}); {todo}"


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise an ``OSError`` without a file name (a write through a file object) as one naming
    ``path``; also when a library's clean-up turned it into a ``RuntimeError`` (torch's zip
    writer, closing after a failed write, reports only "unexpected pos")."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise type(err)(err.errno, err.strerror or os.strerror(err.errno), os.fspath(path)) from err
        raise
    except RuntimeError as err:
        cause = err.__context__
        if isinstance(cause, OSError) and cause.errno is not None:
            raise type(cause)(cause.errno, cause.strerror or os.strerror(cause.errno),
                              cause.filename or os.fspath(path)) from err
        raise


_ERRNO_OF = {os.strerror(code): code for code in sorted(errno.errorcode)}
_USD_WRITE = re.compile(r"Error occurred writing file: ([^'\n]+)")


def usd_write_error(err: Exception, path: str | os.PathLike) -> OSError | None:
    """An ``OSError`` naming ``path`` for USD's failure to write a layer (a ``Tf.ErrorException``
    saying why the file could not be written), or None when ``err`` is something else."""
    text = str(err)
    match = _USD_WRITE.search(text)
    if match is None:
        if "Failed to write bytes" in text or "Could not close" in text:
            return OSError(errno.EIO, "USD could not write the file", os.fspath(path))
        return None
    reason = match.group(1).strip()
    code = _ERRNO_OF.get(reason, errno.EIO)
    return OSError(code, reason, os.fspath(path))
