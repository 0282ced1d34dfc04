"""Package an exported stage as one ``.usdz`` file.

A ``.usdz`` is an uncompressed zip. USD's zip writer has no ZIP64 extensions, so every member
and the archive's offsets must stay below 4 GiB: :func:`package_usdz` refuses (with the
largest members named) instead of writing a file that readers would reject. Past the limit,
keep the folder of layers, or export fewer Gaussians.
"""

from __future__ import annotations

from pathlib import Path

from nurec_usd.export.usd_schema import register_schema
from nurec_usd.util.staging import atomic_file

__all__ = ["ZIP_LIMIT_BYTES", "UsdzTooLarge", "package_usdz"]

ZIP_LIMIT_BYTES = 2**32 - 1
# Headers and 64-byte alignment padding per member, with room to spare.
_PER_MEMBER_OVERHEAD = 512


class UsdzTooLarge(ValueError):
    """The stage does not fit a ``.usdz`` without ZIP64."""


def _dependencies(root: Path) -> list[Path]:
    """Files the stage at ``root`` uses: its layers and assets (textures), resolved."""
    from pxr import Sdf, UsdUtils

    layers, assets, unresolved = UsdUtils.ComputeAllDependencies(Sdf.AssetPath(str(root)))
    if unresolved:
        raise FileNotFoundError(f"{root}: the stage refers to missing files: {', '.join(unresolved)}")
    return [Path(layer.realPath) for layer in layers] + [Path(a) for a in assets]


def package_usdz(root: str | Path, out: str | Path, limit_bytes: int = ZIP_LIMIT_BYTES) -> Path:
    """Write the stage at ``root`` (with every layer and asset it uses) into the package ``out``.

    Args:
        root: the stage's root layer (``root.usda``).
        out: the ``.usdz`` to write (under a temporary name first, then moved into place).
        limit_bytes: the zip limit (4 GiB - 1; smaller values exist for tests).

    Raises:
        UsdzTooLarge: a member, or the whole package, would pass ``limit_bytes``.
    """
    register_schema()
    from pxr import Sdf, UsdUtils

    root, out = Path(root), Path(out)
    if out.suffix != ".usdz":
        raise ValueError(f"{out}: a USD package must end in .usdz")
    files = _dependencies(root)
    sizes = sorted(((f.stat().st_size, f) for f in files), reverse=True)
    total = sum(size + _PER_MEMBER_OVERHEAD for size, _ in sizes)
    largest = ", ".join(f"{f.name} {size / 2**30:.2f} GiB" for size, f in sizes[:3])
    if sizes and sizes[0][0] > limit_bytes:
        raise UsdzTooLarge(f"{out}: {sizes[0][1].name} is {sizes[0][0]:,} bytes; a .usdz member must stay under "
                           f"{limit_bytes:,} bytes (USD's zip writer has no ZIP64). Largest: {largest}. Keep the "
                           "folder of layers instead, or export fewer Gaussians (build --max-gaussians)")
    if total > limit_bytes:
        raise UsdzTooLarge(f"{out}: the package would be about {total:,} bytes; a .usdz must stay under "
                           f"{limit_bytes:,} bytes (no ZIP64). Largest: {largest}. Keep the folder of layers "
                           "instead, or export fewer Gaussians (build --max-gaussians)")
    with atomic_file(out, keep_suffix=True) as tmp:  # USD picks the package writer by the suffix
        if not UsdUtils.CreateNewUsdzPackage(Sdf.AssetPath(str(root)), str(tmp)):
            raise RuntimeError(f"{out}: USD could not write the package (see its messages above)")
    return out
