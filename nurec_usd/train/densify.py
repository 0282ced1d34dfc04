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
_SPLIT_CHUNK = 1 << 18  # sources whose opacity split is computed at once (about 100 MB of float64 terms)


def _copy_coefficients(max_copies: int = MAX_COPIES) -> torch.Tensor:  # [max_copies + 1, max_copies]
    """T[n, k] = sum_{i=k+1}^{n} C(i-1, k) (-1)^k / sqrt(k+1): the opacity polynomial of n copies."""
    table = torch.zeros(max_copies + 1, max_copies, dtype=torch.float64)
    for n in range(1, max_copies + 1):
        for k in range(n):
            table[n, k] = sum(math.comb(i - 1, k) for i in range(k + 1, n + 1)) * (-1) ** k / math.sqrt(k + 1)
    return table


_COEFFS = _copy_coefficients()
# the table per device, with the pinned host copy it came from (kept alive for the copy)
_COEFFS_ON: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _coefficients_on(device: torch.device) -> torch.Tensor:
    """The table on ``device``; to a GPU from pinned memory without blocking (a copy from pageable
    memory would wait for the device)."""
    if device not in _COEFFS_ON:
        host = _COEFFS.pin_memory() if device.type == "cuda" else _COEFFS
        _COEFFS_ON[device] = (host.to(device, non_blocking=True), host)
    return _COEFFS_ON[device][0]


def split_opacity_and_scale(opacity: torch.Tensor,  # [M] of the sources, in (0, 1)
                            copies: torch.Tensor,  # [M] long, n >= 1: how many Gaussians share the source
                            ) -> tuple[torch.Tensor, torch.Tensor]:  # [M] new opacity, [M] scale factor
    """Opacity and scale factor of each of ``n`` copies so that together they render like the source
    (the compositing of n equal, coincident Gaussians matches the source's opacity profile)."""
    n = copies.clamp(1, MAX_COPIES)
    o = opacity.double().clamp(1e-6, 1 - 1e-6)
    o_new = 1 - (1 - o) ** (1.0 / n.double())
    k = torch.arange(MAX_COPIES, dtype=torch.float64, device=o.device)
    table = _coefficients_on(o.device)
    # in chunks: a row's terms take MAX_COPIES float64 values (relocating a whole set of millions
    # at once would otherwise hold gigabytes)
    denom = torch.cat([(table[n_c] * o_c[:, None] ** (k[None, :] + 1)).sum(-1)
                       for n_c, o_c in zip(n.split(_SPLIT_CHUNK), o_new.split(_SPLIT_CHUNK))])
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
                      ) -> tuple[GaussianParams, torch.Tensor | None, dict[str, int | torch.Tensor]]:
    """One refinement of a Gaussian set: relocate the dead, then add ``add`` new Gaussians.

    - ``max_fraction``: at most this share of the set (rounded up) is relocated, non-finite rows
      first, then the least opaque; the rest stay dead until a later refinement. Copies share
      their source's opacity, so an unbounded relocation can feed itself: copies fall under the
      threshold and are relocated next.
    - ``source_weights``: sources are drawn in proportion to opacity times these (e.g. each
      Gaussian's screen-space position gradient: more copies where the images disagree); None, or
      zero for every live Gaussian: opacity.
    - ``jitter``: the copies' (not the source's) centres are drawn from the source's own Gaussian
      at this many of its (new) standard deviations; 0 places them on the source (MCMC's choice).

    Nothing here waits for the device: the work is sized by the bound, not by the number of dead
    Gaussians (the bound's candidates that are alive are left as they were), so a refinement
    queues behind the training steps like a step does. When no Gaussian of the set is alive,
    nothing is relocated and grown rows copy dead ones (a later refinement relocates them).
    Returns the new parameters (new ``Parameter`` objects, registered in the optimizer), the new
    actor index (sorted by actor) and counts: ``added`` (an int), and as 0-dim device tensors
    (reading them synchronises) ``dead``, how many were under the threshold, and ``relocated``
    of them.
    """
    n = len(params)
    if n == 0:
        return params, actor_index, {"relocated": 0, "added": 0, "dead": 0}
    data = {name: getattr(params, name).detach().clone() for name in GaussianParams.FIELDS}
    opacity = torch.sigmoid(data["opacity_logits"])  # [N]
    finite = torch.ones_like(opacity, dtype=torch.bool)
    for value in data.values():  # a row with any NaN / inf is dead (and never a source)
        finite &= torch.isfinite(value).reshape(n, -1).all(-1)
    dead = (opacity <= dead_opacity) | ~finite  # [N]
    alive_weight = torch.where(dead, torch.zeros_like(opacity), opacity)
    if source_weights is not None:
        weighted = alive_weight * source_weights.clamp_min(0)
        weighted = torch.where(torch.isfinite(weighted), weighted, torch.zeros_like(weighted))
        # no live Gaussian drew a gradient (e.g. actors out of view): opacity
        alive_weight = torch.where(weighted.sum() > 0, weighted, alive_weight)
    any_alive = alive_weight.sum() > 0  # [] bool
    # the bound's candidates: non-finite rows first, then the least opaque (alive ones included
    # when fewer are dead: they are masked off)
    k = min(n, math.ceil(max_fraction * n))
    order_key = torch.where(finite, opacity, torch.full_like(opacity, -1.0))
    candidates = torch.topk(order_key, k, largest=False, sorted=False).indices  # [k]
    moves = dead[candidates] & any_alive  # [k] bool: the candidates relocated
    # at least two draws: torch checks a single draw's distribution on the host
    draw = torch.where(any_alive, alive_weight, torch.ones_like(alive_weight))
    sources = torch.multinomial(draw, max(2, k + add), replacement=True, generator=generator)[:k + add]
    used = torch.cat((moves, torch.ones(add, dtype=torch.bool, device=moves.device)))  # [k + add]
    # the source itself and its copies
    copies = torch.ones(n, dtype=torch.long, device=opacity.device).index_add_(0, sources, used.long())
    shared = copies[sources] > 1  # [k + add]: sources that give copies (repeats write the same values)
    o_new, factor = split_opacity_and_scale(opacity[sources], copies[sources])
    logits = data["opacity_logits"]
    logits[sources] = torch.where(shared, torch.logit(o_new.clamp(1e-6, 1 - 1e-6)), logits[sources])
    data["log_scales"][sources] += torch.where(shared, factor, torch.ones_like(factor)).log()[:, None]
    row_map = torch.arange(n, device=opacity.device)
    row_map[sources] = torch.where(shared, -1, row_map[sources])
    # relocation: moved candidates take the (updated) values of their sources
    reloc_src = sources[:k]
    for name in GaussianParams.FIELDS:
        value = data[name]
        value[candidates] = torch.where(moves.view(-1, *([1] * (value.dim() - 1))), value[reloc_src], value[candidates])
    row_map[candidates] = torch.where(moves, -1, row_map[candidates])
    index = None if actor_index is None else actor_index.clone()
    if index is not None:
        index[candidates] = torch.where(moves, index[reloc_src], index[candidates])
    # growth: appended rows copy theirs
    grow_src = sources[k:]
    if add:
        for name in GaussianParams.FIELDS:
            data[name] = torch.cat((data[name], data[name][grow_src]))
        row_map = torch.cat((row_map, torch.full((add,), -1, device=row_map.device)))
        if index is not None:
            index = torch.cat((index, index[grow_src]))
    if jitter > 0:
        copies_rows = torch.cat((candidates, torch.arange(n, n + add, device=candidates.device)))
        offsets = _gaussian_offsets(data["quats"][copies_rows], data["log_scales"][copies_rows], generator)
        # (a where, not a product: an unmoved row's offset may be inf)
        data["means"][copies_rows] += torch.where(used[:, None], jitter * offsets, torch.zeros_like(offsets))
    if index is not None:  # keep actor Gaussians sorted by actor
        order = torch.argsort(index, stable=True)
        index = index[order].contiguous()
        data = {k_: v[order] for k_, v in data.items()}
        row_map = row_map[order]
    stats = {"relocated": moves.sum(), "added": add, "dead": dead.sum()}
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
