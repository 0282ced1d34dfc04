"""Fused time interpolation of Gaussians (torch API over ``warp_kernels.interpolate``).

For a time t, :func:`interpolate_gaussians` computes every actor's pose from its keyframed track
(binary search, slerp of rotations, lerp of translations), moves each actor's Gaussians (means,
rotations) from the actor's box frame into the world, and writes them after the static
Gaussians into the arrays the renderer consumes, in two kernel launches without any host
synchronisation (``t`` stays on the device): the actors' poses and the static copy, then the
actor Gaussians. (Two launches take less GPU time than one in which every actor Gaussian
searches its own track: benchmarks/RESULTS.md, interp.) Both are queued
before the autograd node is built; under ``torch.no_grad()``, or when no input needs a
gradient, none is built.

Choices:
  * Tracks are CSR (:class:`TrackKeys`); actor a's keys are ``key_offsets[a]:key_offsets[a+1]``.
  * Outside its track's time range an actor is held at the nearest end pose and flagged
    invisible: the third output is an opacity multiplier (1 visible, 0 not) the renderer
    multiplies into the activated opacities. Static Gaussians are always 1.
  * Optional pose corrections (track refinement) are per key: a translation delta ``dt`` [K, 3]
    and a rotation vector ``w`` [K, 3] (axis * angle, rad) applied on the left,
    ``corrected key pose = (exp(w) * q_k, p_k + dt)``; interpolation then runs between corrected
    keys. Zero corrections reproduce the uncorrected result bit for bit.
  * World rotation of an actor Gaussian = q_pose * q_local (unnormalised q_local stays
    unnormalised; its norm is kept).
  * Gradients flow to static means/quats (identity, no kernel), actor means/quats, and pose
    corrections; key times, translations and quaternions are constants.

Quaternions are (w, x, y, z) here; the kernels convert to Warp's (x, y, z, w) internally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch

from nurec_usd.ops.autograd_apply import direct_apply

__all__ = ["TrackKeys", "PoseCorrections", "interpolate_gaussians", "actor_poses"]

_FLOATS = (torch.float32, torch.float64)


# ---------------------------------------------------------------------------------------------
# Data


class PoseCorrections(NamedTuple):
    """Per-key pose corrections: corrected key pose = (exp(rotations) * q_k, p_k + translations)."""

    translations: torch.Tensor  # [K, 3]
    rotations: torch.Tensor  # [K, 3] rotation vectors (axis * angle, rad)


@dataclass(frozen=True)
class TrackKeys:
    """Keyframed actor tracks in CSR layout, ready for the kernels.

    Shapes and dtypes are checked on construction (no device synchronisation); :meth:`check`
    also checks the contents (synchronises). Use :meth:`from_tracks` to build one from
    per-actor tensors: it checks and normalises the quaternions.

    Attributes:
        key_offsets: actor a owns keys ``key_offsets[a]:key_offsets[a+1]``, int32.  # [A+1]
        key_times: key times in seconds since the capture start, strictly increasing per
            actor.  # [K]
        key_translations: box-to-world translations of the keys (p_world = R p_box + t).  # [K, 3]
        key_quats: box-to-world rotations (w, x, y, z) of the keys, unit length.  # [K, 4]
    """

    key_offsets: torch.Tensor
    key_times: torch.Tensor
    key_translations: torch.Tensor
    key_quats: torch.Tensor

    def __post_init__(self) -> None:
        off, kt = self.key_offsets, self.key_times
        if not isinstance(off, torch.Tensor) or off.ndim != 1 or off.shape[0] < 1:
            raise ValueError(f"key_offsets must be a tensor of shape [A+1], got {_shape(off)}")
        if off.dtype != torch.int32:
            raise ValueError(f"key_offsets must be int32, got {off.dtype}")
        if not isinstance(kt, torch.Tensor) or kt.ndim != 1:
            raise ValueError(f"key_times must be a tensor of shape [K], got {_shape(kt)}")
        if kt.dtype not in _FLOATS:
            raise ValueError(f"key_times must be float32 or float64, got {kt.dtype}")
        K = kt.shape[0]
        for name, n in (("key_translations", 3), ("key_quats", 4)):
            x = getattr(self, name)
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != (K, n):
                raise ValueError(f"{name} must have shape [{K}, {n}], got {_shape(x)}")
            if x.dtype != kt.dtype:
                raise ValueError(f"{name} must have the dtype of key_times ({kt.dtype}), got {x.dtype}")
        for name in ("key_offsets", "key_translations", "key_quats"):
            if getattr(self, name).device != kt.device:
                raise ValueError(f"{name} is on {getattr(self, name).device}, key_times on {kt.device}")
        for name in ("key_offsets", "key_times", "key_translations", "key_quats"):
            # The kernels read these in place: keep contiguous, detached copies (no-ops usually).
            object.__setattr__(self, name, getattr(self, name).detach().contiguous())

    @property
    def num_actors(self) -> int:
        """A, the number of tracks."""
        return self.key_offsets.shape[0] - 1

    @property
    def num_keys(self) -> int:
        """K, the number of keys of all tracks together."""
        return self.key_times.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        """Float dtype of times, translations and quaternions."""
        return self.key_times.dtype

    @property
    def device(self) -> torch.device:
        """Device of the tensors."""
        return self.key_times.device

    @classmethod
    def from_tracks(
        cls,
        tracks: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> TrackKeys:
        """Pack per-actor tracks into CSR (checked; quaternions normalised).

        Args:
            tracks: per actor, (times [k] seconds, translations [k, 3], quaternions (w, x, y, z)
                [k, 4]) with k >= 1 and strictly increasing times.
            dtype: float dtype of the result.
            device: device of the result (default: the first track's).

        Returns:
            The packed tracks.
        """
        times, trans, quats, counts = [], [], [], [0]
        for a, (kt, kp, kq) in enumerate(tracks):
            kt, kp, kq = (torch.as_tensor(x).detach() for x in (kt, kp, kq))
            k = kt.shape[0] if kt.ndim == 1 else -1
            if k < 1 or tuple(kp.shape) != (k, 3) or tuple(kq.shape) != (k, 4):
                raise ValueError(
                    f"tracks[{a}]: expected times [k], translations [k, 3], quats [k, 4] with k >= 1, "
                    f"got {tuple(kt.shape)}, {tuple(kp.shape)}, {tuple(kq.shape)}"
                )
            times.append(kt)
            trans.append(kp)
            quats.append(kq)
            counts.append(k)
        if device is None:
            device = times[0].device if times else "cpu"

        def cat(xs: list[torch.Tensor], empty_shape: tuple[int, ...]) -> torch.Tensor:
            if not xs:
                return torch.zeros(empty_shape, dtype=dtype, device=device)
            return torch.cat([x.to(device=device, dtype=dtype) for x in xs])

        offsets = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(device=device, dtype=torch.int32)
        q = cat(quats, (0, 4))
        norm = torch.linalg.vector_norm(q, dim=-1, keepdim=True)
        if not bool((norm > 0).all()):
            raise ValueError("tracks: key quaternions must be non-zero")
        keys = cls(offsets, cat(times, (0,)), cat(trans, (0, 3)), q / norm)
        keys.check()
        return keys

    def check(self) -> None:
        """Check the contents: offsets, finite values, increasing times, unit quaternions.

        Synchronises with the device; call it once when building tracks, not per step.
        """
        off = self.key_offsets.long().cpu()
        if int(off[0]) != 0 or int(off[-1]) != self.num_keys:
            raise ValueError(f"key_offsets must start at 0 and end at K={self.num_keys}, got {off.tolist()}")
        counts = off[1:] - off[:-1]
        if bool((counts < 1).any()):
            bad = torch.nonzero(counts < 1).flatten().tolist()
            raise ValueError(f"every track needs at least one key; tracks without keys: {bad}")
        for name in ("key_times", "key_translations", "key_quats"):
            if not bool(torch.isfinite(getattr(self, name)).all()):
                raise ValueError(f"{name} must be finite")
        kt = self.key_times.cpu()
        if self.num_keys > 1:
            same_track = torch.ones(self.num_keys - 1, dtype=torch.bool)
            same_track[(off[1:-1] - 1).clamp(0, self.num_keys - 2)] = False  # last key of a track
            bad = same_track & (kt[1:] <= kt[:-1])
            if bool(bad.any()):
                k = int(torch.nonzero(bad)[0])
                raise ValueError(f"key_times must increase strictly within a track (key {k + 1})")
        norm = torch.linalg.vector_norm(self.key_quats.double(), dim=-1)
        if bool(((norm - 1).abs() > 1e-5).any()):
            raise ValueError("key_quats must have unit length")

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> TrackKeys:
        """A copy on another device and/or float dtype (offsets stay int32)."""
        f = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
        offsets = self.key_offsets.to(device=device)
        return TrackKeys(offsets, f(self.key_times), f(self.key_translations), f(self.key_quats))


# ---------------------------------------------------------------------------------------------
# Warp plumbing


def _shape(x: object) -> object:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


_kernels = None  # the module warp_kernels.interpolate, imported on first use
_warp_torch = None  # the module nurec_usd.ops.warp_torch, likewise
_overloads: dict[tuple[str, torch.dtype], object] = {}  # (kernel name, dtype) -> concrete kernel


def _warp():
    """Import Warp and the kernels lazily (keeps ``import nurec_usd.ops.interpolate`` light)."""
    global _kernels
    if _kernels is None:
        import warp as wp

        from nurec_usd.ops.warp_torch import init_warp

        init_warp()
        import warp_kernels.interpolate as kernels
        from nurec_usd.ops import warp_torch

        global _warp_torch
        _warp_torch = warp_torch

        for torch_dtype, scalar in ((torch.float32, wp.float32), (torch.float64, wp.float64)):
            for name, ovl in kernels.overloads(scalar).items():
                _overloads[name, torch_dtype] = ovl
        _kernels = kernels
    return _kernels


def _launch(name: str, dtype: torch.dtype, device: torch.device, dim: int, inputs: list, **kwargs) -> None:
    """Launch a concrete kernel overload on torch's current stream.

    Host time matters here (a launch per training step): kernels are the concrete overloads
    (no type inference per call) and launches are replayed (``warp_torch.launch``).
    """
    if _kernels is None:
        _warp()
    _warp_torch.launch(_overloads[name, dtype], dim, inputs, device=_warp_torch.warp_device(device), **kwargs)


def _track_arrays(tracks: TrackKeys, corr_t, corr_w) -> list:
    return [
        tracks.key_offsets,
        tracks.key_times,
        tracks.key_translations,
        tracks.key_quats,
        corr_t,
        corr_w,
        int(corr_t is not None),
    ]


def _query_time(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The kernels read t[0] (a 0-dim tensor passes as a one-element array); a cast, when one is
    # needed, runs on the device: no synchronisation.
    return t if t.dtype is dtype else t.detach().to(dtype)


# ---------------------------------------------------------------------------------------------
# Autograd


class _InterpolateGaussians(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        static_means: torch.Tensor,  # [Ns, 3]
        static_quats: torch.Tensor,  # [Ns, 4]
        actor_means: torch.Tensor,  # [Na, 3]
        actor_quats: torch.Tensor,  # [Na, 4]
        corr_t: torch.Tensor | None,  # [K, 3]
        corr_w: torch.Tensor | None,  # [K, 3]
        queued: tuple,  # the outputs, already queued (_queue_static, _queue_actors), and what the
        # backward reads. A tuple, not tensor arguments: they need no gradient, and autograd's
        # per-tensor work costs host time.
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t, actor_index, tracks, poses, out_means, out_quats, out_vis = queued
        ctx.mark_non_differentiable(out_vis)
        # t and actor_index are saved, not kept as attributes: saving checks they are unchanged
        # when the backward reads them.
        ctx.save_for_backward(t, actor_means, actor_quats, corr_t, corr_w, actor_index)
        ctx.poses = poses  # made here, not an output: no reference cycle
        ctx.tracks = tracks
        ctx.num_static = static_means.shape[0]
        # An output without a gradient arrives as None: autograd would otherwise fill zeros for
        # it (the visibility, one value per Gaussian, never has one).
        ctx.set_materialize_grads(False)
        return out_means, out_quats, out_vis

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_means: torch.Tensor | None, g_quats: torch.Tensor | None, _g_vis: None):
        t, actor_means, actor_quats, corr_t, corr_w, actor_index = ctx.saved_tensors
        tracks: TrackKeys = ctx.tracks
        Ns, Na, A = ctx.num_static, actor_means.shape[0], tracks.num_actors
        need = ctx.needs_input_grad
        dtype, device = actor_means.dtype, actor_means.device
        # one of the two unused by the loss (None): zeros for the kernel (a rare case)
        g_means = torch.zeros(Ns + Na, 3, dtype=dtype, device=device) if g_means is None else g_means.contiguous()
        g_quats = torch.zeros(Ns + Na, 4, dtype=dtype, device=device) if g_quats is None else g_quats.contiguous()

        # Static Gaussians: the identity, so their gradients are views of the incoming ones.
        g_static_means = g_means[:Ns] if need[0] else None
        g_static_quats = g_quats[:Ns] if need[1] else None

        g_actor_means = g_actor_quats = g_corr_t = g_corr_w = None
        need_actor = need[2] or need[3]
        need_pose = corr_t is not None and (need[4] or need[5]) and A > 0
        if Na > 0 and (need_actor or need_pose):
            k = _warp()
            g_actor_means = torch.empty(Na, 3, dtype=dtype, device=device)
            g_actor_quats = torch.empty(Na, 4, dtype=dtype, device=device)
            # One zero-filled buffer (one memset) for the accumulated gradients: actor poses
            # (quaternion [A, 4], translation [A, 3]) and per-key corrections ([2, K, 3]).
            n_pose, K = (A, tracks.num_keys) if need_pose else (0, 0)
            acc = torch.zeros(7 * n_pose + 6 * K, dtype=dtype, device=device)
            g_pose_q = acc[: 4 * n_pose].view(n_pose, 4)
            g_pose_p = acc[4 * n_pose : 7 * n_pose].view(n_pose, 3)
            g_corr = acc[7 * n_pose :].view(2, K, 3)
            keys = _track_arrays(tracks, corr_t, corr_w)
            block = k.BACKWARD_BLOCK_DIM
            _launch(
                "interpolate_backward_actors",
                dtype,
                device,
                (Na + block - 1) // block * block,  # whole blocks: the block reduction needs them
                [
                    Ns,
                    Na,
                    actor_means,
                    actor_quats,
                    actor_index,
                    ctx.poses,
                    g_means,
                    g_quats,
                    int(need_pose),
                    g_actor_means,
                    g_actor_quats,
                    g_pose_q,
                    g_pose_p,
                ],
                block_dim=block,
            )
            if need_pose:
                # Actor-pose gradients -> per-key corrections, through Warp's generated adjoint of
                # the per-actor pose kernel (one thread per actor owns its keys: no contention).
                g_corr_t, g_corr_w = g_corr[0], g_corr[1]
                # The adjoint replays the forward, which writes the poses: give it somewhere to.
                scratch = [torch.empty(A, 4, dtype=dtype, device=device), torch.empty(A, 3, dtype=dtype, device=device),
                           torch.empty(A, dtype=dtype, device=device)]
                adj_keys = [None, None, None, None, g_corr_t, g_corr_w, 0]
                _launch(
                    "actor_poses",
                    dtype,
                    device,
                    A,
                    [t, *keys],
                    outputs=scratch,
                    adj_inputs=[None, *adj_keys],
                    adj_outputs=[g_pose_q, g_pose_p, None],
                    adjoint=True,
                )
            if not need[2]:
                g_actor_means = None
            if not need[3]:
                g_actor_quats = None
            if not need[4]:
                g_corr_t = None
            if not need[5]:
                g_corr_w = None
        return g_static_means, g_static_quats, g_actor_means, g_actor_quats, g_corr_t, g_corr_w, None


_apply_interpolation = direct_apply(_InterpolateGaussians)


# ---------------------------------------------------------------------------------------------
# Public API


def _check_tracks_inputs(
    t: torch.Tensor, tracks: TrackKeys, pose_corrections: tuple[torch.Tensor, torch.Tensor] | None
) -> None:
    """The query time, the tracks and the pose corrections: shapes, dtypes and devices only
    (nothing here reads device memory)."""
    if not isinstance(tracks, TrackKeys):
        raise ValueError(f"tracks must be a TrackKeys, got {type(tracks).__name__}")
    dtype, device = tracks.dtype, tracks.device
    if not isinstance(t, torch.Tensor) or t.numel() != 1 or t.ndim > 1:
        raise ValueError(f"t must be a 0-dim or one-element tensor on the device, got {_shape(t)}")
    if not t.is_floating_point():
        raise ValueError(f"t must be a float tensor, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"t is on {t.device}, the tracks on {device}")
    if pose_corrections is not None:
        if not isinstance(pose_corrections, (tuple, list)) or len(pose_corrections) != 2:
            raise ValueError("pose_corrections must be (translations [K, 3], rotations [K, 3])")
        K = tracks.num_keys
        _check_rows([("pose_corrections.translations", pose_corrections[0], K, 3),
                     ("pose_corrections.rotations", pose_corrections[1], K, 3)], dtype, device)


def _check_rows(expected: list, dtype: torch.dtype, device: torch.device) -> None:
    """Each (name, tensor, rows, cols) has that shape, the tracks' dtype and their device."""
    for name, x, rows, cols in expected:
        if not isinstance(x, torch.Tensor) or x.shape != (rows, cols):
            raise ValueError(f"{name} must have shape [{rows}, {cols}], got {_shape(x)}")
        if x.dtype != dtype:
            raise ValueError(f"{name} must have the dtype of the tracks ({dtype}), got {x.dtype}")
        if x.device != device:
            raise ValueError(f"{name} is on {x.device}, the tracks on {device}")


def _check_static(static_means: torch.Tensor, static_quats: torch.Tensor, actor_means: torch.Tensor,
                  tracks: TrackKeys) -> None:
    """What the first launch reads, the static Gaussians, against the tracks; and that the actor
    means are rows (their count sizes the outputs). Shapes, dtypes and devices only."""
    for name, x in (("static_means", static_means), ("actor_means", actor_means)):
        if not isinstance(x, torch.Tensor) or x.ndim != 2:
            raise ValueError(f"{name} must have shape [N, 3], got {_shape(x)}")
    Ns = static_means.shape[0]
    _check_rows([("static_means", static_means, Ns, 3), ("static_quats", static_quats, Ns, 4)], tracks.dtype,
                tracks.device)


def _check_actors(actor_means: torch.Tensor, actor_quats: torch.Tensor, actor_index: torch.Tensor,
                  tracks: TrackKeys) -> None:
    """The actor Gaussians' tensors against each other and the tracks: shapes, dtypes, devices."""
    dtype, device = tracks.dtype, tracks.device
    Na = actor_means.shape[0]
    _check_rows([("actor_means", actor_means, Na, 3), ("actor_quats", actor_quats, Na, 4)], dtype, device)
    if not isinstance(actor_index, torch.Tensor) or actor_index.shape != (Na,):
        raise ValueError(f"actor_index must have shape [{Na}], got {_shape(actor_index)}")
    if actor_index.dtype != torch.int32:
        raise ValueError(f"actor_index must be int32, got {actor_index.dtype}")
    if actor_index.device != device:
        raise ValueError(f"actor_index is on {actor_index.device}, the tracks on {device}")


def _queue_static(t: torch.Tensor, tracks: TrackKeys, corr_t: torch.Tensor | None, corr_w: torch.Tensor | None,
                  static_means: torch.Tensor, static_quats: torch.Tensor, Na: int) -> tuple[torch.Tensor, ...]:
    """The outputs, and the forward's first launch. Returns (poses [A, 8] (w, x, y, z, tx, ty, tz,
    visible), means [Ns+Na, 3], quats [Ns+Na, 4], visible [Ns+Na]).

    The launch computes the actors' poses at t (when any Gaussian is an actor's) and copies the
    static Gaussians into the outputs: the poses are chains of dependent reads that the copy
    hides. The second launch (:func:`_queue_actors`) moves the actor
    Gaussians by those poses. Both are queued before the autograd call, so the device works
    while the host builds the autograd node: on a small scene the host is the slower of the two.
    """
    dtype, device = tracks.dtype, tracks.device
    Ns = static_means.shape[0]
    A = tracks.num_actors if Na > 0 else 0
    poses = torch.empty(A, 8, dtype=dtype, device=device)
    means = torch.empty(Ns + Na, 3, dtype=dtype, device=device)
    quats = torch.empty(Ns + Na, 4, dtype=dtype, device=device)
    visible = torch.empty(Ns + Na, dtype=dtype, device=device)
    if A + Ns > 0:
        _launch("poses_and_static", dtype, device, A + Ns,
                [t, A, *_track_arrays(tracks, corr_t, corr_w), static_means, static_quats, poses, means, quats,
                 visible])
    return poses, means, quats, visible


def _queue_actors(Ns: int, actor_means: torch.Tensor, actor_quats: torch.Tensor, actor_index: torch.Tensor,
                  poses: torch.Tensor, means: torch.Tensor, quats: torch.Tensor, visible: torch.Tensor) -> None:
    """The forward's second launch: the actor Gaussians moved by their actors' poses into rows Ns..
    of the outputs. (With no tracks at all, A = 0: they stay in place, invisible.)"""
    if actor_means.shape[0] > 0:
        _launch("interpolate_actors", poses.dtype, poses.device, actor_means.shape[0],
                [Ns, actor_means, actor_quats, actor_index, poses, means, quats, visible])


def _queue_actor_poses(t: torch.Tensor, tracks: TrackKeys, corr_t: torch.Tensor | None,
                       corr_w: torch.Tensor | None, A: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the A actors' poses at t (``t`` as the kernels read it) into new buffers."""
    dtype, device = tracks.dtype, tracks.device
    quats, trans, vis = (torch.empty(A, 4, dtype=dtype, device=device), torch.empty(A, 3, dtype=dtype, device=device),
                         torch.empty(A, dtype=dtype, device=device))
    if A > 0:
        _launch("actor_poses", dtype, device, A, [t, *_track_arrays(tracks, corr_t, corr_w), quats, trans, vis])
    return quats, trans, vis


def interpolate_gaussians(
    t: torch.Tensor,
    static_means: torch.Tensor,
    static_quats: torch.Tensor,
    actor_means: torch.Tensor,
    actor_quats: torch.Tensor,
    actor_index: torch.Tensor,
    tracks: TrackKeys,
    pose_corrections: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All Gaussians in the world frame at time t: static ones, then actor ones (two launches).

    Differentiable with respect to the static and actor means and quaternions and the pose
    corrections. No host synchronisation: ``t`` is read by the kernel on the device.

    Args:
        t: query time in seconds since the capture start, on the device.  # [] or [1]
        static_means: static Gaussian centres, world frame.  # [Ns, 3]
        static_quats: static Gaussian rotations (w, x, y, z), any norm.  # [Ns, 4]
        actor_means: actor Gaussian centres in their actor's box frame.  # [Na, 3]
        actor_quats: actor Gaussian rotations (w, x, y, z) in the box frame, any norm.  # [Na, 4]
        actor_index: track of each actor Gaussian, in [0, A), int32; Gaussians sorted by actor
            make the backward faster (indices outside [0, A) are left in place, invisible).  # [Na]
        tracks: the actors' keyframed tracks.
        pose_corrections: optional :class:`PoseCorrections` (translations [K, 3], rotation
            vectors [K, 3]); corrected key pose = (exp(w) * q_k, p_k + dt).

    Returns:
        means: world centres, static first.  # [Ns+Na, 3]
        quats: world rotations (w, x, y, z), norms kept.  # [Ns+Na, 4]
        visible: opacity multiplier, 1 or 0 (actors outside their track's time range).  # [Ns+Na]
    """
    _check_tracks_inputs(t, tracks, pose_corrections)
    _check_static(static_means, static_quats, actor_means, tracks)
    # The kernels read rows in place: make them contiguous (no-ops for the usual tensors).
    c = lambda x: x.contiguous()  # noqa: E731
    from nurec_usd.ops.warp_torch import aligned16  # (imports Warp: kept out of this module's import)

    corr_t, corr_w = (None, None) if pose_corrections is None else (c(x) for x in pose_corrections)
    t = _query_time(t, tracks.dtype)
    static_means, static_quats = aligned16(c(static_means)), aligned16(c(static_quats))
    poses, means, quats, visible = _queue_static(t, tracks, corr_t, corr_w, static_means, static_quats,
                                                 actor_means.shape[0])
    # The actors' tensors are checked after the first launch, which does not read them: the
    # device starts that much sooner (host time before the first launch is idle device time on
    # a small scene). A refusal here leaves only the new outputs written.
    _check_actors(actor_means, actor_quats, actor_index, tracks)
    actor_means, actor_quats, actor_index = c(actor_means), aligned16(c(actor_quats)), c(actor_index)
    _queue_actors(static_means.shape[0], actor_means, actor_quats, actor_index, poses, means, quats, visible)
    wants_grad = (static_means.requires_grad or static_quats.requires_grad or actor_means.requires_grad
                  or actor_quats.requires_grad
                  or (corr_t is not None and (corr_t.requires_grad or corr_w.requires_grad)))
    if not (wants_grad and torch.is_grad_enabled()):
        return means, quats, visible  # inference (replay, rendering): no autograd node to build
    return _apply_interpolation(static_means, static_quats, actor_means, actor_quats, corr_t, corr_w,
                                (t, actor_index, tracks, poses, means, quats, visible))


@torch.no_grad()
def actor_poses(
    t: torch.Tensor,
    tracks: TrackKeys,
    pose_corrections: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every actor's pose at time t (the poses :func:`interpolate_gaussians` uses); not differentiable.

    Args:
        t: query time in seconds, on the device.  # [] or [1]
        tracks: the actors' keyframed tracks.
        pose_corrections: optional per-key corrections, as for :func:`interpolate_gaussians`.

    Returns:
        quats: box-to-world rotations (w, x, y, z).  # [A, 4]
        translations: box-to-world translations.  # [A, 3]
        visible: 1 where the track covers t, else 0.  # [A]
    """
    _check_tracks_inputs(t, tracks, pose_corrections)
    corr_t, corr_w = (None, None) if pose_corrections is None else (x.contiguous() for x in pose_corrections)
    return _queue_actor_poses(_query_time(t, tracks.dtype), tracks, corr_t, corr_w, tracks.num_actors)
