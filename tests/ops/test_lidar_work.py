"""benchmarks/lidar_work.py: its pair counts keep their order (the ray masks are conservative: no
hit is missed), and the product-only walks' work after the rays' stops is counted where rays stop early."""

import os

import pytest
import torch
from conftest import REPO
from ops.test_lidar_render import make_gaussians, make_lidar, opaque_shells, street_lidar, street_scene

from benchmarks.lidar_work import _block_steps, work_counts
from warp_kernels.lidar_binning import WARPS
from warp_kernels.lidar_raster import BLOCK_WARPS


def _check_order(c: dict) -> None:
    # the ray masks are conservative: every hit has its ray's bit, so lies in a marked warp
    assert c["missed"] == 0, c
    assert 0 < c["needed"] <= c["hit"] <= c["masked"] <= c["marked"] <= c["list"], c
    assert c["needed"] <= c["forward"] <= c["forward_blocks"], c
    # each lane evaluates its own walk's pairs; a window as wide as a batch never takes more steps
    assert c["needed"] <= c["forward_pairs"] <= c["forward_batch"] <= c["forward"], c
    assert c["transmittance_after_stop"] <= c["transmittance"] <= c["transmittance_blocks"], c
    assert c["transmittance_two_waves"] <= c["transmittance"], c


def test_block_steps_hold_each_block_for_its_busiest_warp():
    steps = torch.arange(1, WARPS + 1) * 32  # warp w takes w + 1 steps of 32 lanes
    busiest = torch.arange(BLOCK_WARPS, WARPS + 1, BLOCK_WARPS) * 32  # the last warp of each block
    assert _block_steps(steps) == int(busiest.sum()) * BLOCK_WARPS


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_street_counts(dtype):
    c = work_counts(street_scene(20000, seed=0, dtype=dtype), street_lidar(16, 256, dtype=dtype))
    _check_order(c)
    assert c["rays"] == 16 * 256


def test_transmittance_after_the_stops_on_opaque_shells():
    """Nearly opaque shells stop most rays part-way along their tile's list: cut into chunks of 5, much
    of the product-only walks come after the stops, and with chunks of 200 walks that knew which rays
    their tile's first chunk stopped (a counted variant, not the renderer's) would skip them. Uncut
    lists have no product-only walk at all."""
    params = opaque_shells(torch.float64, size=1.0)
    lidar = make_lidar(torch.float64)
    c = work_counts(params, lidar, chunk=5)
    _check_order(c)
    assert c["transmittance_after_stop"] > 0.3 * c["transmittance"], c
    whole = work_counts(params, lidar, chunk=10 ** 6)
    _check_order(whole)
    assert whole["items"] <= lidar.tiles.num_tiles and whole["transmittance"] == 0, whole
    same = ("list", "marked", "masked", "hit", "needed")  # the chunks change neither the lists nor the rays' walks
    assert {k: whole[k] for k in same} == {k: c[k] for k in same}
    # with chunks of 200 most rays stop within their tile's first chunk: the later chunks could skip them
    two = work_counts(params, lidar, chunk=200)
    _check_order(two)
    assert two["transmittance_two_waves"] < 0.9 * two["transmittance"], two


@pytest.mark.parametrize("band_rows, columns, size, near, far, exact", [
    # small splats; 4-row bands: warps of 2 rows x 16 columns; the last tile part empty
    (4, 1000, 0.05, 3.0, 11.0, True),
    (32, 96, 0.05, 3.0, 11.0, True),  # 32-row bands (16 rows x 2 columns a warp, the bisection over rows)
    (4, 400, 0.3, 3.0, 11.0, True),  # few columns: tiles' half-width 0.25 rad (0.5 with 256 rays), exact rows
    (4, 48, 0.3, 3.0, 11.0, False),  # fewer: half-width 2.1 rad (1.05 with 64 rays), past WIDE: whole rows
    (8, 256, 1.5, 0.6, 2.5, None),  # near, large splats: some past WIDE (whole rows), some not
])
def test_ray_masks_never_miss_a_hit(band_rows, columns, size, near, far, exact):
    """The ray masks are conservative on a moving lidar with uneven channels in any order and per-channel
    azimuth offsets (splats across the sweep's seam too), in float32 (fast-math tests, rounding), tight
    where the exact row test applies, and wider than the hits where whole rows are marked."""
    params = make_gaussians(600, torch.float32, seed=3, near=near, far=far, size=size)
    c = work_counts(params, make_lidar(torch.float32, band_rows=band_rows, channels=32, columns=columns), chunk=10 ** 6)
    _check_order(c)
    if exact is True:
        assert c["masked"] <= 1.02 * c["hit"], c
    elif exact is False:
        assert c["masked"] >= 1.5 * c["hit"], c


@pytest.mark.parametrize("env, words", [
    ({"NUREC_LIDAR_TILE_RAYS": "100"}, "NUREC_LIDAR_TILE_RAYS must be 64, 128 or 256, got 100"),
    ({"NUREC_LIDAR_TILE_RAYS": "many"}, "NUREC_LIDAR_TILE_RAYS='many': expected an integer"),
    ({"NUREC_LIDAR_TILE_RAYS": "64", "NUREC_LIDAR_BLOCK_WARPS": "4"},
     "NUREC_LIDAR_BLOCK_WARPS must be 1, 2, 4 or 8 and at most 2, got 4"),
    ({"NUREC_LIDAR_MIN_BLOCKS": "-1"}, "NUREC_LIDAR_MIN_BLOCKS must be >= 0, got -1"),
    ({"NUREC_CAMERA_TILE_ORDER": "longest"}, "NUREC_CAMERA_TILE_ORDER must be list or index, got 'longest'"),
])
def test_a_bad_tuning_variable_is_refused_at_import(env, words):
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NUREC_LIDAR_", "NUREC_CAMERA_"))}
    r = subprocess.run([sys.executable, "-c", "import warp_kernels.tuning"], capture_output=True, text=True,
                       env={**clean, **env}, timeout=120, cwd=REPO)
    assert r.returncode != 0 and words in r.stderr, r.stderr


def test_the_tuning_defaults_are_the_kernels_sizes():
    from nurec_usd.ops import camera
    from warp_kernels import lidar_binning, lidar_raster, tuning

    if any(k.startswith(("NUREC_LIDAR_", "NUREC_CAMERA_")) for k in os.environ):
        pytest.skip("a tuning variable is set")
    assert camera.TILE_ORDER == tuning.CAMERA_TILE_ORDER == "list"
    assert lidar_binning.TILE_RAYS == tuning.LIDAR_TILE_RAYS == 128
    assert lidar_raster.BLOCK_WARPS == 4 and lidar_raster.SPLIT == 1
    assert lidar_raster.LAUNCH_BOUNDS_WALK_F32 == (128, 9) and lidar_raster.LAUNCH_BOUNDS_BACKWARD_F32 == (128, 8)
