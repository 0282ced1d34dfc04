"""Gaussians as a standard 3D Gaussian Splatting PLY, and a reader of that layout.

The layout is the one the original 3DGS code writes and gsplat, nerfstudio and viewers such as
SuperSplat read. Checked against:

- graphdeco-inria/gaussian-splatting, ``scene/gaussian_model.py``: ``construct_list_of_attributes``
  names the properties in the order below; ``save_ply`` writes zero normals and flattens
  ``_features_rest`` ([N, K-1, 3]) after ``transpose(1, 2)``, i.e. channel-major, and ``load_ply``
  reshapes the f_rest columns to (N, 3, K-1); opacity, scales and rotations are the raw
  (pre-activation) parameters. ``utils/general_utils.py`` ``build_rotation`` takes ``rot_0``
  as the real part (w, x, y, z).
- gsplat's exporter (``export_splats``: ``shN.permute(0, 2, 1)`` before flattening; the same
  order without the normals).
- PlayCanvas's "The PLY Format" page (developer.playcanvas.com/user-manual/gaussian-splatting/
  formats/ply): ``binary_little_endian 1.0``, one ``vertex`` element, ``f_rest_0..f_rest_44``;
  three.js's GaussianSplatPLYLoader docs: 0/9/24/45 f_rest properties = SH degree 0/1/2/3.

The file::

    ply
    format binary_little_endian 1.0
    element vertex N
    property float x, y, z              the mean
    property float nx, ny, nz           zero (unused)
    property float f_dc_0..f_dc_2       the DC SH coefficient (R, G, B)
    property float f_rest_0..f_rest_M-1 M = 3 (K - 1), K = (d + 1)^2, CHANNEL-major:
                                        f_rest_{c (K-1) + (k-1)} is coefficient k >= 1 of channel c
    property float opacity              logit (opacity = sigmoid)
    property float scale_0..scale_2     log scales (scale = exp)
    property float rot_0..rot_3         the quaternion (w, x, y, z) as stored, not normalised
    end_header
    N records of little-endian float32, in that order

Our ``shN`` is coefficient-major ([N, 15, 3]: coefficient, channel), hence the transposes.
A PLY carries no lidar intensity: the reader returns ``intensity_logits`` of 0 (intensity 0.5).
Only numpy and torch are needed here (no ``plyfile``).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nurec_usd.scene.gaussians import SH_COEFFS, GaussianParams
from nurec_usd.util.staging import atomic_file

MAX_SH_DEGREE = 3
_MAX_HEADER_BYTES = 1 << 20

# PLY scalar types (both the classic and the sized spellings) -> numpy type codes.
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_FORMATS = {"binary_little_endian": "<", "binary_big_endian": ">", "ascii": None}
_REST = re.compile(r"f_rest_(0|[1-9][0-9]*)")


def num_rest(sh_degree: int) -> int:
    """How many ``f_rest_*`` properties SH degree ``sh_degree`` has: 3 ((d + 1)^2 - 1)."""
    return 3 * ((sh_degree + 1) ** 2 - 1)


def gaussian_ply_properties(sh_degree: int) -> list[str]:
    """The vertex property names, in file order, for SH degree ``sh_degree``."""
    d = _check_degree(sh_degree)
    return ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2",
            *(f"f_rest_{i}" for i in range(num_rest(d))),
            "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]


def _check_degree(sh_degree: int) -> int:
    try:
        if isinstance(sh_degree, bool):
            raise TypeError
        d = operator.index(sh_degree)
    except TypeError:
        raise ValueError(f"sh_degree: expected an integer in [0, {MAX_SH_DEGREE}], got {sh_degree!r}") from None
    if not 0 <= d <= MAX_SH_DEGREE:
        raise ValueError(f"sh_degree: expected an integer in [0, {MAX_SH_DEGREE}], got {d}")
    return d


def write_gaussian_ply(params: GaussianParams, sh_degree: int, path: str | Path,
                       pad_to_degree: int | None = None) -> Path:
    """Write ``params`` as a 3DGS PLY with SH degrees ``0..sh_degree``; returns the path.

    ``pad_to_degree``: write the layout of this higher degree instead (3: the 45 ``f_rest`` the
    INRIA loader and many viewers expect), with zero coefficients past ``sh_degree``, so the
    file renders as the scene does. Values are written pre-activation and as float32 (float64
    parameters are rounded). The file goes to a temporary name next to ``path`` and is then
    moved into place.
    """
    path = Path(path)
    d = _check_degree(sh_degree)
    padded = d if pad_to_degree is None else _check_degree(pad_to_degree)
    if padded < d:
        raise ValueError(f"pad_to_degree: {padded} is below the scene's SH degree {d} (padding does not truncate)")
    params.check(f"write_gaussian_ply({path})")
    n, k, kp = len(params), (d + 1) ** 2, (padded + 1) ** 2

    def host(t: torch.Tensor) -> np.ndarray:
        return t.detach().to(device="cpu", dtype=torch.float32).numpy()

    # [N, K-1, 3] (coefficient, channel), zero past the degree in use -> [N, 3, K-1] -> channel-major rows
    coeffs = np.zeros((n, kp - 1, 3), dtype=np.float32)
    coeffs[:, : k - 1] = host(params.shN[:, : k - 1, :])
    rest = coeffs.transpose(0, 2, 1).reshape(n, num_rest(padded))
    table = np.concatenate([
        host(params.means),
        np.zeros((n, 3), dtype=np.float32),
        host(params.sh0).reshape(n, 3),
        rest,
        host(params.opacity_logits).reshape(n, 1),
        host(params.log_scales),
        host(params.quats),
    ], axis=1).astype("<f4", copy=False)
    names = gaussian_ply_properties(padded)
    assert table.shape == (n, len(names))
    header = "".join(["ply\n", "format binary_little_endian 1.0\n", f"element vertex {n}\n",
                      *(f"property float {name}\n" for name in names), "end_header\n"])

    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(np.ascontiguousarray(table).reshape(-1).view(np.uint8))  # no copy
    return path


@dataclass
class _Element:
    name: str
    count: int
    properties: list[tuple[str, str | None]]  # (name, numpy type code), None for a list property

    def scalar_dtype(self, order: str) -> np.dtype | None:
        """The record dtype, or None when a list property makes records variable-sized."""
        if any(t is None for _, t in self.properties):
            return None
        return np.dtype([(name, order + t) for name, t in self.properties])


def _read_header(path: Path) -> tuple[str, list[_Element], int]:
    """(format, elements, header length in bytes). ValueError naming the file on a bad header."""
    with open(path, "rb") as f:
        first = f.readline(16)
        if first.rstrip(b"\r\n") != b"ply":
            raise ValueError(f"{path}: not a PLY file (it does not start with 'ply')")
        size, lines = len(first), []
        while True:
            line = f.readline(_MAX_HEADER_BYTES)
            if not line:
                raise ValueError(f"{path}: header: the file ends before 'end_header' (truncated?)")
            size += len(line)
            if size > _MAX_HEADER_BYTES:
                raise ValueError(f"{path}: header: no 'end_header' in the first {_MAX_HEADER_BYTES} bytes")
            try:
                words = line.decode("ascii").split()
            except UnicodeDecodeError:
                raise ValueError(f"{path}: header: line {len(lines) + 2} is not ASCII "
                                 "(no 'end_header' before the data?)") from None
            if words == ["end_header"]:
                break
            lines.append(words)

    fmt, elements = None, []
    for number, words in enumerate(lines, start=2):
        where = f"{path}: header line {number}"
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format":
            if fmt is not None or len(words) != 3 or words[1] not in _FORMATS or words[2] != "1.0":
                raise ValueError(f"{where}: format: expected one of {sorted(_FORMATS)} version 1.0, "
                                 f"got {' '.join(words[1:])!r}")
            fmt = words[1]
        elif words[0] == "element":
            if len(words) != 3 or not words[2].isdigit():
                raise ValueError(f"{where}: element: expected 'element <name> <count>', got {' '.join(words)!r}")
            elements.append(_Element(words[1], int(words[2]), []))
        elif words[0] == "property":
            if not elements:
                raise ValueError(f"{where}: property {words[-1]!r} comes before any element")
            element = elements[-1]
            if len(words) == 5 and words[1] == "list":
                name, code = words[4], None
                if words[2] not in _PLY_TYPES or words[3] not in _PLY_TYPES:
                    raise ValueError(f"{where}: property {name!r}: unknown list type {words[2]!r} {words[3]!r}")
            elif len(words) == 3:
                name, code = words[2], _PLY_TYPES.get(words[1])
                if code is None:
                    raise ValueError(f"{where}: property {name!r}: unknown type {words[1]!r}")
            else:
                raise ValueError(f"{where}: property: cannot parse {' '.join(words)!r}")
            if any(name == other for other, _ in element.properties):
                raise ValueError(f"{where}: property {name!r} appears twice in element {element.name!r}")
            element.properties.append((name, code))
        else:
            raise ValueError(f"{where}: unknown header keyword {words[0]!r}")
    if fmt is None:
        raise ValueError(f"{path}: header: no 'format' line")
    return fmt, elements, size


def _read_vertex_columns(path: Path) -> tuple[dict[str, np.ndarray], int]:
    """The ``vertex`` element's scalar columns by name, and the vertex count."""
    fmt, elements, header_size = _read_header(path)
    found = [i for i, e in enumerate(elements) if e.name == "vertex"]
    if len(found) != 1:
        raise ValueError(f"{path}: header: expected one 'vertex' element, found {len(found)}")
    index = found[0]
    vertex = elements[index]
    n = vertex.count
    for name, code in vertex.properties:
        if code is None:
            raise ValueError(f"{path}: vertex: property {name!r} is a list; a Gaussian PLY has scalar properties")

    if fmt == "ascii":
        text = path.read_bytes()[header_size:]
        try:
            rows = text.decode("ascii").splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"{path}: ascii body is not ASCII") from None
        skip = sum(e.count for e in elements[:index])
        rows = rows[skip: skip + n]
        if len(rows) < n:
            raise ValueError(f"{path}: truncated: the header declares {n} vertices, the file holds {len(rows)}")
        width = len(vertex.properties)
        for i, row in enumerate(rows):
            if len(row.split()) != width:
                raise ValueError(f"{path}: vertex {i}: expected {width} values, got {len(row.split())} (truncated?)")
        try:
            values = np.array([row.split() for row in rows], dtype=np.float64).reshape(n, width)
        except ValueError as err:
            raise ValueError(f"{path}: vertex: a value is not a number ({err})") from None
        return {name: values[:, j] for j, (name, _) in enumerate(vertex.properties)}, n

    order = _FORMATS[fmt]
    offset = header_size
    for e in elements[:index]:
        dtype = e.scalar_dtype(order)
        if dtype is None:
            raise ValueError(f"{path}: element {e.name!r} before 'vertex' has list properties, "
                             "which this reader cannot skip in a binary file")
        offset += e.count * dtype.itemsize
    dtype = vertex.scalar_dtype(order)
    end = offset + n * dtype.itemsize
    later = [e.scalar_dtype(order) for e in elements[index + 1:]]
    file_size = path.stat().st_size
    if file_size < end:
        raise ValueError(f"{path}: truncated: the header declares {n} vertices of {dtype.itemsize} bytes "
                         f"({end - offset} bytes), {max(file_size - offset, 0)} bytes follow")
    if all(t is not None for t in later):
        total = end + sum(e.count * t.itemsize for e, t in zip(elements[index + 1:], later))
        if file_size < total:
            raise ValueError(f"{path}: truncated: {total - file_size} bytes missing after the vertex element")
        if file_size > total:
            raise ValueError(f"{path}: {file_size - total} unexpected bytes after the last element")
    table = np.fromfile(path, dtype=dtype, count=n, offset=offset)
    return {name: table[name] for name, _ in vertex.properties}, n


def read_gaussian_ply(path: str | Path) -> tuple[GaussianParams, int]:
    """Read a 3DGS PLY (ours or another tool's); returns the Gaussians (float32, CPU) and the SH degree.

    Properties are found by name, in any order and of any numeric type; others (normals,
    colours) are ignored. Binary (either byte order) and ASCII files are read. ``shN`` is
    zero beyond the file's degree. Raises ValueError naming the file (and the property)
    when the file is not such a PLY.
    """
    path = Path(path)
    columns, n = _read_vertex_columns(path)

    def column(name: str) -> np.ndarray:
        if name not in columns:
            raise ValueError(f"{path}: vertex: missing property {name!r}")
        return np.asarray(columns[name], dtype=np.float32)

    def stack(*names: str) -> np.ndarray:
        cols = [column(name) for name in names]
        return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype=np.float32)

    means = stack("x", "y", "z")
    sh0 = stack("f_dc_0", "f_dc_1", "f_dc_2")
    opacity = column("opacity")
    log_scales = stack("scale_0", "scale_1", "scale_2")
    quats = stack("rot_0", "rot_1", "rot_2", "rot_3")

    present = sorted(int(m.group(1)) for name in columns if (m := _REST.fullmatch(name)))
    degrees = {num_rest(d): d for d in range(MAX_SH_DEGREE + 1)}
    if len(present) not in degrees:
        raise ValueError(f"{path}: vertex: {len(present)} f_rest_* properties; a PLY of SH degree "
                         f"0-{MAX_SH_DEGREE} has {', '.join(str(m) for m in degrees)}")
    expected = list(range(len(present)))
    if present != expected:
        missing = min(set(expected) - set(present))
        raise ValueError(f"{path}: vertex: missing property 'f_rest_{missing}' "
                         f"(f_rest_0..f_rest_{len(present) - 1} expected)")
    degree = degrees[len(present)]
    k = (degree + 1) ** 2
    rest = stack(*(f"f_rest_{i}" for i in range(len(present))))
    shN = np.zeros((n, SH_COEFFS - 1, 3), dtype=np.float32)
    shN[:, : k - 1, :] = rest.reshape(n, 3, k - 1).transpose(0, 2, 1)  # channel-major -> [N, K-1, 3]

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    params = GaussianParams(t(means), t(quats), t(log_scales), t(opacity), t(sh0.reshape(n, 1, 3)), t(shN),
                            torch.zeros(n, dtype=torch.float32))
    params.check(str(path))
    return params, degree
