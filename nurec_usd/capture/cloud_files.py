"""Headers of ``.ply`` and ``.pcd`` point-cloud sweeps, checked against the file's size.

open3d reads a binary PLY whose body is shorter than its header says as that many points, the
missing ones zeros (a truncated copy "loads" as a million points at the origin), so the
header is read here first: a binary file must hold exactly the bytes its header declares, an
ASCII one at least as many lines as it declares points. The same check runs in ``validate
--quick`` (header and size only) and before every read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nurec_usd.capture.errors import SweepFormatError

_PLY_SIZES = {"char": 1, "uchar": 1, "int8": 1, "uint8": 1, "short": 2, "ushort": 2, "int16": 2, "uint16": 2,
              "int": 4, "uint": 4, "int32": 4, "uint32": 4, "float": 4, "float32": 4, "double": 8, "float64": 8}
_HEADER_LIMIT = 1 << 16  # bytes: a header longer than this is not a point cloud's


@dataclass(frozen=True)
class CloudHeader:
    """What a point-cloud file's header declares."""

    points: int
    encoding: str  # "ascii", "binary" (either byte order) or "binary_compressed" (.pcd)
    body_offset: int  # where the data starts
    body_bytes: int | None  # the data's size in bytes when the header fixes it (binary, no list properties)


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(_HEADER_LIMIT)


def read_ply_header(path: Path) -> CloudHeader:
    """The header of a ``.ply``; ``SweepFormatError`` naming the header line that is wrong."""
    head = _head(path)
    if not head.startswith(b"ply"):
        raise SweepFormatError(path, "header", "not a PLY file (it must start with 'ply')")
    end = head.find(b"end_header")
    if end < 0:
        raise SweepFormatError(path, "header", "no end_header line (a truncated or damaged PLY header)")
    newline = head.find(b"\n", end)
    body_offset = (newline + 1) if newline >= 0 else len(head)
    encoding, vertices, body, fixed, element = None, None, 0, True, None
    for raw in head[:end].decode("ascii", errors="replace").splitlines()[1:]:
        words = raw.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format":
            if len(words) < 2 or words[1] not in ("ascii", "binary_little_endian", "binary_big_endian"):
                raise SweepFormatError(path, "header.format", f"unknown PLY format line {raw.strip()!r}")
            encoding = "ascii" if words[1] == "ascii" else "binary"
        elif words[0] == "element":
            if len(words) != 3 or not words[2].isdigit():
                raise SweepFormatError(path, "header.element", f"bad element line {raw.strip()!r}")
            element = (words[1], int(words[2]))
            if words[1] == "vertex":
                vertices = int(words[2])
        elif words[0] == "property":
            if element is None:
                raise SweepFormatError(path, "header.property", f"a property before any element: {raw.strip()!r}")
            if len(words) >= 2 and words[1] == "list":
                fixed = False  # variable-size rows: the body's size is not known from the header
            elif len(words) != 3 or words[1] not in _PLY_SIZES:
                raise SweepFormatError(path, "header.property", f"unknown property type in {raw.strip()!r}")
            else:
                body += _PLY_SIZES[words[1]] * element[1]
    if encoding is None:
        raise SweepFormatError(path, "header.format", "the PLY header has no format line")
    if vertices is None:
        raise SweepFormatError(path, "header.element", "the PLY header declares no vertex element")
    return CloudHeader(vertices, encoding, body_offset, body if encoding == "binary" and fixed else None)


def read_pcd_header(path: Path) -> CloudHeader:
    """The header of a ``.pcd``; ``SweepFormatError`` naming the header field that is wrong."""
    head = _head(path)
    fields: dict[str, list[str]] = {}
    offset = 0
    for raw in head.split(b"\n"):
        offset += len(raw) + 1
        line = raw.decode("ascii", errors="replace").strip()
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        fields[key.upper()] = values
        if key.upper() == "DATA":
            break
    else:
        raise SweepFormatError(path, "header", "not a PCD file (no DATA line in its header)")
    try:
        points = int(fields["POINTS"][0]) if "POINTS" in fields else \
            int(fields["WIDTH"][0]) * int(fields["HEIGHT"][0])
    except (KeyError, IndexError, ValueError):
        raise SweepFormatError(path, "header.POINTS", "the PCD header declares no valid point count") from None
    encoding = fields["DATA"][0].lower() if fields["DATA"] else ""
    if encoding not in ("ascii", "binary", "binary_compressed"):
        raise SweepFormatError(path, "header.DATA", f"unknown PCD data encoding {encoding!r}")
    body = None
    if encoding == "binary":
        try:
            sizes = [int(v) for v in fields["SIZE"]]
            counts = [int(v) for v in fields.get("COUNT", ["1"] * len(sizes))]
        except (KeyError, ValueError):
            raise SweepFormatError(path, "header.SIZE", "the PCD header's SIZE / COUNT are not numbers") from None
        if len(counts) != len(sizes):
            raise SweepFormatError(path, "header.COUNT", f"{len(counts)} counts for {len(sizes)} fields (SIZE)")
        body = points * sum(s * c for s, c in zip(sizes, counts))
    return CloudHeader(points, encoding, min(offset, len(head)), body)


def check_cloud_file(path: Path) -> CloudHeader:
    """Read a ``.ply`` / ``.pcd`` header and check the file's size against it (binary: exactly
    the declared bytes; ASCII: not checked here, see :func:`check_ascii_rows`).

    Raises ``SweepFormatError`` naming the header field that disagrees with the file.
    """
    header = read_ply_header(path) if path.suffix.lower() == ".ply" else read_pcd_header(path)
    if header.body_bytes is not None:
        size = path.stat().st_size
        expected = header.body_offset + header.body_bytes
        if size != expected:
            what = "truncated" if size < expected else "has trailing bytes"
            field = "header.element vertex" if path.suffix.lower() == ".ply" else "header.POINTS"
            raise SweepFormatError(path, field, f"file {what}: {header.points:,} points need {expected:,} bytes, "
                                                f"the file has {size:,}")
    return header


def check_ascii_rows(path: Path, header: CloudHeader) -> None:
    """An ASCII cloud must hold at least as many data lines as its header declares points."""
    if header.encoding != "ascii":
        return
    with open(path, "rb") as f:
        f.seek(header.body_offset)
        rows = sum(1 for line in f if line.strip())
    if rows < header.points:
        field = "header.element vertex" if path.suffix.lower() == ".ply" else "header.POINTS"
        raise SweepFormatError(path, field, f"file truncated: the header declares {header.points:,} points, "
                                            f"the file holds {rows:,} rows")
