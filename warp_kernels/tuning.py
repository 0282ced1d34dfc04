"""The kernels' sizes that benchmarks may choose, read once from the environment at import.

Every such knob is here, so a run's configuration is in one place; the kernel modules take their
values from this module and explain the defaults (``lidar_binning``: tiles; ``lidar_raster``:
blocks and launch bounds). Unset variables give the defaults the kernels are tuned for.

- ``NUREC_LIDAR_TILE_RAYS``: rays per lidar tile, 64, 128 (default) or 256
  (``benchmarks/raster_lidar.py --tile-rays``).
- ``NUREC_LIDAR_BLOCK_WARPS``: CUDA warps per block of the lidar rasterizer's per-item kernels,
  1, 2, 4 or 8 and at most a tile's warps (default: 4, or a tile's warps where it has fewer;
  ``--block-warps``).
- ``NUREC_LIDAR_MIN_BLOCKS``: blocks per SM of the lidar rasterizer's float32 launch bounds, 0 for
  none (default: the kernels' own budgets; ``--min-blocks``).
- ``NUREC_CAMERA_TILE_ORDER``: the order in which the camera rasterizer's blocks take the tiles,
  ``list`` (longest list first, the default) or ``index`` (the tiles' own order; ``nurec_usd.ops.camera``).
"""

from __future__ import annotations

import os


def _int(name: str, default: int | None) -> int | None:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected an integer") from None


LIDAR_TILE_RAYS = _int("NUREC_LIDAR_TILE_RAYS", 128)
if LIDAR_TILE_RAYS not in (64, 128, 256):
    raise ValueError(f"NUREC_LIDAR_TILE_RAYS must be 64, 128 or 256, got {LIDAR_TILE_RAYS}")
_TILE_WARPS = LIDAR_TILE_RAYS // 32
LIDAR_BLOCK_WARPS = _int("NUREC_LIDAR_BLOCK_WARPS", min(4, _TILE_WARPS))
if LIDAR_BLOCK_WARPS not in (1, 2, 4, 8) or LIDAR_BLOCK_WARPS > _TILE_WARPS:
    raise ValueError(f"NUREC_LIDAR_BLOCK_WARPS must be 1, 2, 4 or 8 and at most {_TILE_WARPS}, "
                     f"got {LIDAR_BLOCK_WARPS}")
LIDAR_MIN_BLOCKS = _int("NUREC_LIDAR_MIN_BLOCKS", None)  # None: the kernels' own budgets
if LIDAR_MIN_BLOCKS is not None and LIDAR_MIN_BLOCKS < 0:
    raise ValueError(f"NUREC_LIDAR_MIN_BLOCKS must be >= 0, got {LIDAR_MIN_BLOCKS}")
CAMERA_TILE_ORDER = os.environ.get("NUREC_CAMERA_TILE_ORDER") or "list"
if CAMERA_TILE_ORDER not in ("list", "index"):
    raise ValueError(f"NUREC_CAMERA_TILE_ORDER must be list or index, got {CAMERA_TILE_ORDER!r}")
