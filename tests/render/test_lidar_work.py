"""benchmarks/lidar_work.py: its pair counts keep their order (the warp masks are conservative), and
the transmittance pass's work after the rays' stops is counted where rays stop early."""

import torch

from benchmarks.lidar_work import work_counts
from render.test_lidar_render import make_gaussians, make_lidar, street_lidar, street_scene


def _check_order(c: dict) -> None:
    # the warp masks are conservative: every hit lies in a marked warp
    assert 0 < c["needed"] <= c["hit"] <= c["marked"] <= c["list"], c
    assert c["needed"] <= c["forward"] <= c["marked"], c
    assert c["transmittance_after_stop"] <= c["transmittance"], c


def test_street_counts():
    c = work_counts(street_scene(20000, seed=0, dtype=torch.float64), street_lidar(16, 256, dtype=torch.float64))
    _check_order(c)
    assert c["rays"] == 16 * 256


def test_transmittance_after_the_stops_on_opaque_shells():
    """Nearly opaque shells stop every ray within the first of its tile's chunks of 5: much of the
    transmittance pass comes after the stops. Uncut lists have no transmittance pass at all."""
    params = make_gaussians(1000, torch.float64, seed=5, near=4.0, far=6.0, size=1.0)
    params[3] = torch.full_like(params[3], 0.98)
    lidar = make_lidar(torch.float64)
    c = work_counts(params, lidar, chunk=5)
    _check_order(c)
    assert c["transmittance_after_stop"] > 0.3 * c["transmittance"], c
    whole = work_counts(params, lidar, chunk=10 ** 6)
    _check_order(whole)
    assert whole["items"] <= lidar.tiles.num_tiles and whole["transmittance"] == 0, whole
    same = ("list", "marked", "hit", "needed")  # the chunks change neither the lists nor the rays' walks
    assert {k: whole[k] for k in same} == {k: c[k] for k in same}
