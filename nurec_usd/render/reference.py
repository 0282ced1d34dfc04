"""Slow pure-torch twins of every Warp kernel in ``warp_kernels``.

Each twin computes what its kernel computes, with plain differentiable torch ops, written for
clarity rather than speed. Tests compare the kernels' forward and backward (through the twins'
autograd) against them, and benchmarks time the kernels against them.

Conventions follow the kernels: quaternions (w, x, y, z); tracks in CSR layout (see
``nurec_usd.render.interpolate.TrackKeys``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nurec_usd.sensors.se3 import quat_multiply, quat_normalize, quat_slerp, quat_to_matrix

__all__ = ["so3_exp_quat", "actor_poses_reference", "interpolate_gaussians_reference", "sh_to_rgb_reference",
           "project_gaussians_reference", "rasterize_reference", "render_cameras_reference"]

# Same threshold as the kernel's so3_exp (squared angle, rad^2).
_EXP_SERIES_BELOW = 1e-6


# ---------------------------------------------------------------------------------------------
# Time interpolation (twin of warp_kernels/interpolate.py)


def so3_exp_quat(w: torch.Tensor) -> torch.Tensor:
    """Unit quaternions of rotation vectors (axis * angle in rad).

    Small angles use a Taylor series in the squared angle, so the value and the gradient stay
    exact at w = 0 (where the angle's square root has no derivative).

    Args:
        w: rotation vectors.  # [..., 3]

    Returns:
        Quaternions (w, x, y, z).  # [..., 4]
    """
    th2 = (w * w).sum(-1, keepdim=True)
    small = th2 < _EXP_SERIES_BELOW
    th = torch.sqrt(torch.where(small, torch.ones_like(th2), th2))  # safe dummy where unused
    c = torch.where(small, 1 - th2 / 8 + th2 * th2 / 384, torch.cos(th / 2))
    s = torch.where(small, 0.5 - th2 / 48 + th2 * th2 / 3840, torch.sin(th / 2) / th)
    return torch.cat((c, w * s), dim=-1)


def actor_poses_reference(
    t: torch.Tensor,
    tracks: Any,
    pose_corrections: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Twin of the ``actor_poses`` kernel: every actor's pose at time t.

    The segment is the one whose right key is the first key strictly after t (so a query at key
    j returns key j exactly, with alpha 0); outside a track the end pose is held and the actor
    is not visible.

    Args:
        t: query time in seconds, 0-dim or one element.  # [] or [1]
        tracks: a ``TrackKeys`` (key_offsets [A+1], key_times [K], key_translations [K, 3],
            key_quats [K, 4]).
        pose_corrections: optional (delta translations [K, 3], rotation vectors [K, 3]); the
            corrected key pose is (exp(w) * q_k, p_k + dt).

    Returns:
        Quaternions (w, x, y, z) [A, 4], translations [A, 3], visibility 1/0 [A].
    """
    off = tracks.key_offsets.long()
    kt = tracks.key_times
    key_q = tracks.key_quats
    key_p = tracks.key_translations
    if pose_corrections is not None:
        dt, dw = pose_corrections
        key_q = quat_multiply(so3_exp_quat(dw), key_q)
        key_p = key_p + dt
    start, end = off[:-1], off[1:]  # [A]
    tt = t.reshape(()).to(kt.dtype)

    # Per actor, the number of keys at or before t: a segment sum through a prefix sum.
    le = torch.cat((torch.zeros(1, dtype=torch.long, device=kt.device), (kt <= tt).long().cumsum(0)))
    n_le = le[end] - le[start]
    i1 = start + torch.minimum(n_le.clamp(min=1), end - start - 1)  # first key after t, clamped
    i0 = torch.maximum(i1 - 1, start)

    t0, t1 = kt[i0], kt[i1]
    span = t1 - t0
    alpha = torch.where(span > 0, (tt - t0) / torch.where(span > 0, span, torch.ones_like(span)), 0.0)
    alpha = alpha.clamp(0.0, 1.0)

    q0, q1 = key_q[i0], key_q[i1]
    q = quat_slerp(q0, q1, alpha)
    q = torch.where((alpha == 0)[:, None], q0, q)  # key poses exactly at the keys
    q = torch.where((alpha == 1)[:, None], q1, q)
    a = alpha[:, None]
    p = (1 - a) * key_p[i0] + a * key_p[i1]
    visible = ((kt[start] <= tt) & (tt <= kt[end - 1])).to(kt.dtype)
    return q, p, visible


def interpolate_gaussians_reference(
    t: torch.Tensor,
    static_means: torch.Tensor,
    static_quats: torch.Tensor,
    actor_means: torch.Tensor,
    actor_quats: torch.Tensor,
    actor_index: torch.Tensor,
    tracks: Any,
    pose_corrections: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Twin of ``nurec_usd.render.interpolate.interpolate_gaussians`` (same arguments).

    Args:
        t: query time in seconds.  # [] or [1]
        static_means: static Gaussian centres, world frame.  # [Ns, 3]
        static_quats: static Gaussian rotations (w, x, y, z), unnormalised.  # [Ns, 4]
        actor_means: actor Gaussian centres in their actor's box frame.  # [Na, 3]
        actor_quats: actor Gaussian rotations in the box frame, unnormalised.  # [Na, 4]
        actor_index: actor of each actor Gaussian, in [0, A).  # [Na]
        tracks: a ``TrackKeys``.
        pose_corrections: optional (delta translations [K, 3], rotation vectors [K, 3]).

    Returns:
        World means [Ns+Na, 3], world quaternions [Ns+Na, 4] (static ones first) and a 1/0
        visibility per Gaussian [Ns+Na].
    """
    q, p, vis = actor_poses_reference(t, tracks, pose_corrections)
    idx = actor_index.long()
    qa = q[idx]  # [Na, 4]
    means = (quat_to_matrix(qa) @ actor_means[..., None])[..., 0] + p[idx]
    quats = quat_multiply(qa, actor_quats)
    out_means = torch.cat((static_means, means), dim=0)
    out_quats = torch.cat((static_quats, quats), dim=0)
    ones = torch.ones(static_means.shape[0], dtype=vis.dtype, device=vis.device)
    return out_means, out_quats, torch.cat((ones, vis[idx]), dim=0)

# --------------------------------------------------------------------------------------
# Camera rendering (twin of warp_kernels.camera_project, tile_binning, camera_raster)

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)
EPS_2D = 0.3
FRUSTUM_MARGIN = 0.15
TILE_SIZE = 16
ALPHA_MIN = 1.0 / 255.0
ALPHA_MAX = 0.99
T_MIN = 1e-4


def sh_to_rgb_reference(sh: torch.Tensor,  # [N, K, 3]
                        degree: int,
                        dirs: torch.Tensor,  # [N, 3] unit view directions
                        ) -> torch.Tensor:  # [N, 3]
    """Colour from real spherical harmonics up to degree 3: max(0, 0.5 + sum_k Y_k(d) sh_k)."""
    x, y, z = dirs.unbind(-1)
    basis = [torch.full_like(x, SH_C0)]
    if degree >= 1:
        basis += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        xx, yy, zz = x * x, y * y, z * z
        basis += [SH_C2[0] * x * y, SH_C2[1] * y * z, SH_C2[2] * (2 * zz - xx - yy), SH_C2[3] * x * z,
                  SH_C2[4] * (xx - yy)]
    if degree >= 3:
        basis += [SH_C3[0] * y * (3 * xx - yy), SH_C3[1] * x * y * z, SH_C3[2] * y * (4 * zz - xx - yy),
                  SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy), SH_C3[4] * x * (4 * zz - xx - yy),
                  SH_C3[5] * z * (xx - yy), SH_C3[6] * x * (xx - 3 * yy)]
    b = torch.stack(basis, -1)  # [N, K]
    return (torch.einsum("nk,nkc->nc", b, sh[:, : b.shape[-1]]) + 0.5).clamp_min(0.0)


def _camera_pose(cams, c: int, a: torch.Tensor):
    """T_camera_world of camera c at readout fraction(s) a [...]: (R [..., 3, 3], t [..., 3])."""
    a = torch.as_tensor(a, dtype=cams.rot_start.dtype)
    q = quat_slerp(cams.rot_start[c], cams.rot_end[c], a)
    t = cams.trans_start[c] * (1 - a[..., None]) + cams.trans_end[c] * a[..., None]
    return quat_to_matrix(q), t


def project_gaussians_reference(means: torch.Tensor,  # [N, 3]
                                quats: torch.Tensor,  # [N, 4] (w, x, y, z)
                                scales: torch.Tensor,  # [N, 3]
                                sh: torch.Tensor,  # [N, K, 3], or [N, 1, 3] colours when sh_degree < 0
                                sh_degree: int,
                                opacities: torch.Tensor,  # [N]
                                cams,  # nurec_usd.render.camera.CameraBatch
                                near: float, far: float):
    """Twin of ``project_gaussians``: means2d [C, N, 2], conics [C, N, 3], depths [C, N], radii [C, N], colours [C, N, 3].

    Projection and its Jacobian come from ``nurec_usd.sensors.cameras`` (with the Jacobian
    by autodiff), not from a re-derivation of the kernel's formulas.
    """
    from torch.func import jacrev, vmap

    from nurec_usd.render.camera import MODELS, SHUTTERS
    from nurec_usd.sensors.cameras import camera_model
    from warp_kernels.camera_project import CAMERA_PARAM_LAYOUT

    models = {v: k for k, v in MODELS.items()}
    shutters = {v: k for k, v in SHUTTERS.items()}
    w, h = cams.width, cams.height
    out = {k: [] for k in ("means2d", "conics", "depths", "radii", "colors")}
    for c in range(len(cams)):
        name = models[int(cams.model[c])]
        vals = dict(zip(CAMERA_PARAM_LAYOUT[name], cams.params[c].tolist()))
        if name == "ftheta":
            params = {"cx": vals["cx"], "cy": vals["cy"], "angle_to_pixel": [vals[f"c{i}"] for i in range(6)],
                      "max_fov_deg": math.degrees(2 * vals["max_theta"])}
        else:
            params = {k: v for k, v in vals.items() if k != "max_theta"}
        model = camera_model(name, w, h, params, dtype=means.dtype)
        wide = name in ("opencv_fisheye", "ftheta")

        def proj(p):
            return model.project(p)[0]

        R, t = _camera_pose(cams, c, torch.tensor(0.5, dtype=means.dtype, device=means.device))
        shutter = shutters[int(cams.shutter[c])]
        if shutter == "global":
            Rs, ts = R.expand(len(means), 3, 3), t.expand(len(means), 3)
        else:
            uv0 = proj(means @ R.T + t)
            frac = {"top_to_bottom": uv0[:, 1] / (h - 1), "bottom_to_top": 1 - uv0[:, 1] / (h - 1),
                    "left_to_right": uv0[:, 0] / (w - 1), "right_to_left": 1 - uv0[:, 0] / (w - 1)}[shutter]
            Rs, ts = _camera_pose(cams, c, frac.clamp(0, 1))
        p = torch.einsum("nij,nj->ni", Rs, means) + ts
        uv = proj(p)
        if wide:
            J = vmap(jacrev(proj))(p)  # [N, 2, 3]
        else:  # the Jacobian at the point clamped to the image plus a margin (see the kernel)
            mx, my = FRUSTUM_MARGIN * w, FRUSTUM_MARGIN * h
            z = p[:, 2:]
            xj = torch.clamp(p[:, :1] / z, (-0.5 - mx - vals["cx"]) / vals["fx"], (w - 0.5 + mx - vals["cx"]) / vals["fx"])
            yj = torch.clamp(p[:, 1:2] / z, (-0.5 - my - vals["cy"]) / vals["fy"], (h - 0.5 + my - vals["cy"]) / vals["fy"])
            J = vmap(jacrev(proj))(torch.cat([xj * z, yj * z, z], -1))
        if wide:
            depth = p.norm(dim=-1)
            theta = torch.atan2(p[:, :2].norm(dim=-1), p[:, 2])
            ok = (theta <= vals["max_theta"]) & (depth > near)
        else:
            depth = p[:, 2]
            ok = depth > near
        ok = ok & (depth <= far)
        Rg = quat_to_matrix(quat_normalize(quats))
        M = Rg * scales[:, None, :]
        JW = J @ Rs
        cov2 = JW @ (M @ M.transpose(1, 2)) @ JW.transpose(1, 2)
        a2, b2, c2 = cov2[:, 0, 0] + EPS_2D, cov2[:, 0, 1], cov2[:, 1, 1] + EPS_2D
        det = a2 * c2 - b2 * b2
        ok = ok & (det > 0)
        det_safe = torch.where(ok, det, torch.ones_like(det))
        mid = 0.5 * (a2 + c2)
        lam = mid + torch.sqrt(torch.clamp(mid * mid - det, min=0.1))
        # the splat ends where alpha = opacity exp(-d^2/2) falls below ALPHA_MIN
        reach = 2 * torch.log(opacities / ALPHA_MIN)
        ok = ok & (reach > 0)
        radius = torch.ceil(torch.sqrt(reach.clamp_min(0) * lam))
        ok = ok & ~((uv[:, 0] + radius <= -0.5) | (uv[:, 0] - radius >= w - 0.5)
                    | (uv[:, 1] + radius <= -0.5) | (uv[:, 1] - radius >= h - 0.5))
        conic = torch.stack([c2 / det_safe, -b2 / det_safe, a2 / det_safe], -1)
        if sh_degree < 0:
            color = sh[:, 0]
        else:
            centre = -torch.einsum("nji,nj->ni", Rs, ts)
            color = sh_to_rgb_reference(sh, sh_degree, torch.nn.functional.normalize(means - centre, dim=-1))
        m = ok[:, None]
        out["means2d"].append(torch.where(m, uv, torch.zeros_like(uv)))
        out["conics"].append(torch.where(m, conic, torch.zeros_like(conic)))
        out["depths"].append(torch.where(ok, depth, torch.zeros_like(depth)))
        out["radii"].append(torch.where(ok, radius, torch.zeros_like(radius)).to(torch.int32))
        out["colors"].append(torch.where(m, color, torch.zeros_like(color)))
    return tuple(torch.stack(out[k]) for k in ("means2d", "conics", "depths", "radii", "colors"))


def rasterize_reference(means2d: torch.Tensor,  # [C, N, 2]
                        conics: torch.Tensor,  # [C, N, 3]
                        colors: torch.Tensor,  # [C, N, 3]
                        depths: torch.Tensor,  # [C, N]
                        radii: torch.Tensor,  # [C, N]
                        opacities: torch.Tensor,  # [N]
                        background: torch.Tensor,  # [C, 3]
                        width: int, height: int):
    """Twin of the tile rasterizer, dense: every pixel against every Gaussian whose tile
    rectangle holds the pixel's tile. Returns rgb [C, H, W, 3], alpha [C, H, W], depth [C, H, W]."""
    rgbs, alphas, ds = [], [], []
    v, u = torch.meshgrid(torch.arange(height, dtype=means2d.dtype, device=means2d.device),
                          torch.arange(width, dtype=means2d.dtype, device=means2d.device), indexing="ij")
    pix = torch.stack([u.reshape(-1), v.reshape(-1)], -1)  # [P, 2]
    ptx, pty = (pix[:, 0] // TILE_SIZE).long(), (pix[:, 1] // TILE_SIZE).long()
    tiles_x, tiles_y = math.ceil(width / TILE_SIZE), math.ceil(height / TILE_SIZE)
    for c in range(means2d.shape[0]):
        # front-to-back order of the kernel: float32 depth, then index (a stable sort)
        order = torch.argsort(depths[c].float(), stable=True)
        order = order[radii[c, order] > 0]
        m, q, col, d, r = means2d[c, order], conics[c, order], colors[c, order], depths[c, order], radii[c, order]
        op = opacities[order]
        rf = r.to(m.dtype)
        x0 = torch.clamp(torch.floor((m[:, 0] - rf) / TILE_SIZE).long(), 0, tiles_x)
        x1 = torch.clamp(torch.floor((m[:, 0] + rf) / TILE_SIZE).long() + 1, 0, tiles_x)
        y0 = torch.clamp(torch.floor((m[:, 1] - rf) / TILE_SIZE).long(), 0, tiles_y)
        y1 = torch.clamp(torch.floor((m[:, 1] + rf) / TILE_SIZE).long() + 1, 0, tiles_y)
        in_rect = ((ptx[:, None] >= x0) & (ptx[:, None] < x1) & (pty[:, None] >= y0) & (pty[:, None] < y1))
        dx = m[None, :, 0] - pix[:, None, 0]
        dy = m[None, :, 1] - pix[:, None, 1]
        sigma = 0.5 * (q[None, :, 0] * dx * dx + q[None, :, 2] * dy * dy) + q[None, :, 1] * dx * dy
        alpha = torch.clamp(op[None] * torch.exp(-sigma), max=ALPHA_MAX)
        use = in_rect & (sigma >= 0) & (alpha >= ALPHA_MIN)
        alpha = torch.where(use, alpha, torch.zeros_like(alpha))
        after = torch.cumprod(1 - alpha, dim=1)  # T after each Gaussian
        before = torch.cat([torch.ones_like(after[:, :1]), after[:, :-1]], 1)
        stop = use & (after <= T_MIN)  # the kernel stops before such a Gaussian
        stopped = torch.cumsum(stop.to(torch.int32), 1) > 0
        alpha = torch.where(stopped, torch.zeros_like(alpha), alpha)
        weight = alpha * before
        t_final = torch.prod(1 - alpha, dim=1)
        rgb = weight @ col + t_final[:, None] * background[c]
        rgbs.append(rgb.reshape(height, width, 3))
        alphas.append((1 - t_final).reshape(height, width))
        ds.append((weight @ d).reshape(height, width))
    return torch.stack(rgbs), torch.stack(alphas), torch.stack(ds)


def render_cameras_reference(means, quats, scales, opacities, colors, cameras, sh_degree=None, background=None,
                             near: float = 0.01, far: float = 1e4):
    """Twin of ``nurec_usd.render.camera.render_cameras``: (rgb, alpha, depth, means2d, radii)."""
    c = len(cameras)
    if background is None:
        background = torch.zeros(c, 3, dtype=means.dtype, device=means.device)
    background = background.to(means.dtype).expand(c, 3)
    sh, degree = (colors[:, None, :], -1) if sh_degree is None else (colors, sh_degree)
    means2d, conics, depths, radii, rgbs = project_gaussians_reference(
        means, quats, scales, sh, degree, opacities, cameras.to(means.dtype), near, far)
    rgb, alpha, depth = rasterize_reference(means2d, conics, rgbs, depths, radii, opacities, background,
                                            cameras.width, cameras.height)
    return rgb, alpha, depth, means2d, radii
