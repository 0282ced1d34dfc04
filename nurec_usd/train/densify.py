"""Densification under a Gaussian budget: MCMC-style relocation and growth.

Why this strategy: the count only ever changes at refinement steps and never beyond the cap,
so memory is known in advance (a 30 s capture must not run out of GPU memory at step 20k) and
every buffer between refinements keeps its size. Following the idea of "3D Gaussian Splatting
as Markov Chain Monte Carlo" (Kheradmand et al., 2024):

- *relocation*: Gaussians whose opacity fell below ``dead_opacity`` are moved onto live
  ones, sampled in proportion to opacity (times, by default, each one's screen-space position
  gradient summed since the last refinement: a short run has few refinements, and copies pay
  most where the images disagree); a source copied into n places shares its opacity and
  shrinks its scale so that n + 1 coincident copies would render like the original did. By
  default the copies are then spread over the source's own Gaussian (stacked on it they would
  get nearly the same gradients and stay together), so together they render wider and fainter
  at the centre than the source until training adjusts them;
- *growth*: every refinement adds ``grow_factor - 1`` of the count (until the cap) the same way;
- *noise*: near-transparent Gaussians drift (by about their own size), so they explore
  instead of sitting where they are useless.

Adam's moments of every moved row are reset. Relocation stays within a set: static Gaussians
onto static ones, actor Gaussians onto actor Gaussians (taking the source's actor), and actor
Gaussians are kept sorted by actor (the interpolation's backward is faster that way).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from nurec_usd.ops import perturb as ops_perturb
from nurec_usd.scene.gaussians import GaussianParams

if TYPE_CHECKING:
    from nurec_usd.ops.adam import FusedAdam

MAX_COPIES = 51  # a source shares its opacity among at most this many copies


def _copy_coefficients(max_copies: int = MAX_COPIES) -> torch.Tensor:  # [max_copies + 1, max_copies]
    """T[n, k] = sum_{i=k+1}^{n} C(i-1, k) (-1)^k / sqrt(k+1): the opacity polynomial of n copies."""
    table = torch.zeros(max_copies + 1, max_copies, dtype=torch.float64)
    for n in range(1, max_copies + 1):
        for k in range(n):
            table[n, k] = sum(math.comb(i - 1, k) for i in range(k + 1, n + 1)) * (-1) ** k / math.sqrt(k + 1)
    return table


_COEFFS = _copy_coefficients()


def split_opacity_and_scale(opacity: torch.Tensor,  # [M] of the sources, in (0, 1)
                            copies: torch.Tensor,  # [M] long, n >= 1: how many Gaussians share the source
                            ) -> tuple[torch.Tensor, torch.Tensor]:  # [M] new opacity, [M] scale factor
    """Opacity and scale factor of each of ``n`` copies so that together they render like the source
    (the compositing of n equal, coincident Gaussians matches the source's opacity profile)."""
    n = copies.clamp(1, MAX_COPIES)
    o = opacity.double().clamp(1e-6, 1 - 1e-6)
    o_new = 1 - (1 - o) ** (1.0 / n.double())
    k = torch.arange(MAX_COPIES, dtype=torch.float64, device=o.device)
    powers = o_new[:, None] ** (k[None, :] + 1)
    denom = (_COEFFS.to(o.device)[n] * powers).sum(-1)
    factor = (o / denom.clamp_min(1e-12)).clamp(0.05, 1.0)  # the series loses precision for large n
    factor = torch.where(n == 1, torch.ones_like(factor), factor)
    return o_new.to(opacity.dtype), factor.to(opacity.dtype)


def remap_rows(optimizer: FusedAdam, old: torch.nn.Parameter, data: torch.Tensor,
               row_map: torch.Tensor) -> torch.nn.Parameter:
    """Replace parameter ``old`` by a new one holding ``data``, carrying Adam's state along the rows.

    ``row_map[j]`` is the old row whose moments new row j keeps, or -1 for fresh (zero) moments.
    """
    new = torch.nn.Parameter(data.contiguous())
    state = optimizer.state.pop(old, None)
    for group in optimizer.param_groups:
        group["params"] = [new if p is old else p for p in group["params"]]
    if state:
        keep = row_map >= 0
        src = row_map.clamp_min(0)
        moved = {}
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.shape[:1] == old.shape[:1] and value.dim() > 0:
                v = value[src]
                v.masked_fill_((~keep).view(-1, *([1] * (v.dim() - 1))), 0)  # (a boolean index would sync)
                moved[key] = v.contiguous()
            else:
                moved[key] = value
        optimizer.state[new] = moved
    return new


def _apply(params: GaussianParams, optimizer: FusedAdam, data: dict[str, torch.Tensor],
           row_map: torch.Tensor) -> GaussianParams:
    return GaussianParams(**{name: remap_rows(optimizer, getattr(params, name), data[name], row_map)
                             for name in GaussianParams.FIELDS})


@torch.no_grad()
def relocate_and_grow(params: GaussianParams, optimizer: FusedAdam, *, dead_opacity: float,
                      add: int, generator: torch.Generator | None = None,
                      actor_index: torch.Tensor | None = None,  # [N] int32 for actor sets
                      max_fraction: float = 1.0, source_weights: torch.Tensor | None = None,  # [N] >= 0
                      jitter: float = 0.0,
                      ) -> tuple[GaussianParams, torch.Tensor | None, dict[str, int]]:
    """One refinement of a Gaussian set: relocate the dead, then add ``add`` new Gaussians.

    - ``max_fraction``: at most this share of the set (rounded up) is relocated, the least opaque
      first, and every non-finite row; the rest stay dead until a later refinement. Copies share
      their source's opacity, so an unbounded relocation can feed itself: copies fall under the
      threshold and are relocated next.
    - ``source_weights``: sources are drawn in proportion to opacity times these (e.g. each
      Gaussian's screen-space position gradient: more copies where the images disagree); None, or
      zero for every live Gaussian: opacity.
    - ``jitter``: the copies' (not the source's) centres are drawn from the source's own Gaussian
      at this many of its (new) standard deviations; 0 places them on the source (MCMC's choice).

    Synchronises with the device (the number of dead Gaussians sizes the work): call it at
    refinement steps only. Returns the new parameters (new ``Parameter`` objects, registered
    in the optimizer), the new actor index (sorted by actor) and counts (``dead``: how many
    were under the threshold, ``relocated`` of them).
    """
    n = len(params)
    stats = {"relocated": 0, "added": 0, "dead": 0}
    if n == 0:
        return params, actor_index, stats
    data = {name: getattr(params, name).detach().clone() for name in GaussianParams.FIELDS}
    opacity = torch.sigmoid(data["opacity_logits"])
    finite = torch.ones_like(opacity, dtype=torch.bool)
    for value in data.values():  # a row with any NaN / inf is dead (and never a source)
        finite &= torch.isfinite(value).reshape(n, -1).all(-1)
    dead = (opacity <= dead_opacity) | ~finite
    alive_weight = torch.where(dead, torch.zeros_like(opacity), opacity)
    if source_weights is not None:
        weighted = alive_weight * source_weights.clamp_min(0)
        weighted = torch.where(torch.isfinite(weighted), weighted, torch.zeros_like(weighted))
        if weighted.sum() > 0:  # else (no live Gaussian drew a gradient, e.g. actors out of view): opacity
            alive_weight = weighted
    if alive_weight.sum() <= 0:
        return params, actor_index, stats
    stats["dead"] = n_dead = int(dead.sum())
    row_map = torch.arange(n, device=opacity.device)
    index = None if actor_index is None else actor_index.clone()
    dead_rows = torch.nonzero(dead).flatten()
    # non-finite rows always go; a small set still moves one a refinement
    limit = max(math.ceil(max_fraction * n), int((~finite).sum()))
    if n_dead > limit:  # the least opaque first (non-finite rows before all)
        order = torch.argsort(torch.where(finite, opacity, torch.full_like(opacity, -1.0))[dead_rows])
        dead_rows, n_dead = dead_rows[order[:limit]], limit
    sources = torch.multinomial(alive_weight, n_dead + add, replacement=True, generator=generator) \
        if n_dead + add > 0 else torch.zeros(0, dtype=torch.long, device=opacity.device)
    if sources.numel():
        copies = torch.bincount(sources, minlength=n) + 1  # the source itself and its copies
        touched = torch.nonzero(copies > 1).flatten()
        o_new, factor = split_opacity_and_scale(opacity[touched], copies[touched])
        data["opacity_logits"][touched] = torch.logit(o_new.clamp(1e-6, 1 - 1e-6))
        data["log_scales"][touched] += factor.log()[:, None]
        row_map[touched] = -1
        # relocation: dead rows take the (updated) values of their sources
        reloc_src = sources[:n_dead]
        for name in GaussianParams.FIELDS:
            data[name][dead_rows] = data[name][reloc_src]
        row_map[dead_rows] = -1
        if index is not None:
            index[dead_rows] = index[reloc_src]
        # growth: appended rows copy theirs
        grow_src = sources[n_dead:]
        if grow_src.numel():
            for name in GaussianParams.FIELDS:
                data[name] = torch.cat((data[name], data[name][grow_src]))
            row_map = torch.cat((row_map, torch.full((grow_src.numel(),), -1, device=row_map.device)))
            if index is not None:
                index = torch.cat((index, index[grow_src]))
        if jitter > 0:
            copies_rows = torch.cat((dead_rows, torch.arange(n, n + grow_src.numel(), device=dead_rows.device)))
            data["means"][copies_rows] += jitter * _gaussian_offsets(
                data["quats"][copies_rows], data["log_scales"][copies_rows], generator)
        stats.update(relocated=n_dead, added=int(grow_src.numel()))
    if index is not None:  # keep actor Gaussians sorted by actor
        order = torch.argsort(index, stable=True)
        index = index[order].contiguous()
        data = {k: v[order] for k, v in data.items()}
        row_map = row_map[order]
    return _apply(params, optimizer, data, row_map), index, stats


def _gaussian_offsets(quats: torch.Tensor,  # [M, 4] (w, x, y, z), any norm
                      log_scales: torch.Tensor,  # [M, 3]
                      generator: torch.Generator | None) -> torch.Tensor:  # [M, 3]
    """One draw from each Gaussian's own distribution, about its centre: R diag(s) z, z ~ N(0, I)."""
    z = torch.randn(log_scales.shape, dtype=log_scales.dtype, device=log_scales.device, generator=generator)
    w, x, y, zq = torch.nn.functional.normalize(quats, dim=-1).unbind(-1)
    v = z * log_scales.exp()
    # v rotated by the unit quaternion: v + 2 w (q x v) + 2 q x (q x v)
    q = torch.stack((x, y, zq), -1)
    t = 2 * torch.linalg.cross(q, v)
    return v + w[:, None] * t + torch.linalg.cross(q, t)


@torch.no_grad()
def perturb_transparent(params: GaussianParams, scale: float, dead_opacity: float,
                        generator: torch.Generator | None = None) -> None:
    """Move near-transparent Gaussians by noise shaped like themselves (their rotation and scales),
    in place: :func:`nurec_usd.ops.perturb.perturb_transparent` on the set's tensors."""
    ops_perturb.perturb_transparent(params.means, params.quats, params.log_scales, params.opacity_logits,
                                    scale, dead_opacity, generator)
