"""Slow pure-torch twins of every Warp kernel in ``warp_kernels``.

Each twin computes what its kernel computes, with plain differentiable torch ops, written for
clarity rather than speed. Tests compare the kernels' forward and backward (through the twins'
autograd) against them, and benchmarks time the kernels against them.

Conventions follow the kernels: quaternions (w, x, y, z); tracks in CSR layout (see
``nurec_usd.ops.interpolate.TrackKeys``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import jacrev, vmap

from nurec_usd.ops.camera import MODELS, SHUTTERS
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.se3 import quat_multiply, quat_normalize, quat_slerp, quat_to_matrix

# The constants are the kernels' specification, so the twins take them from the same place.
from warp_kernels.camera_project import CAMERA_PARAM_LAYOUT, EPS_2D, FRUSTUM_MARGIN
from warp_kernels.compositing import ALPHA_MAX, ALPHA_MIN, T_MIN
from warp_kernels.lidar_project import ALPHA_MIN as A_MIN
from warp_kernels.lidar_project import NEAR_SIGMAS
from warp_kernels.lidar_raster import MEDIAN_T
from warp_kernels.tile_binning import SPAN_MARGIN, TILE_SIZE

__all__ = ["so3_exp_quat", "actor_poses_reference", "interpolate_gaussians_reference", "composite_front_to_back", "sh_to_rgb_reference",
           "project_gaussians_reference", "rasterize_reference", "render_cameras_reference", "sky_colors_reference",
           "perturb_transparent_reference", "SSIM_C1", "SSIM_C2", "gaussian_window", "ssim"]

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
    """Twin of ``nurec_usd.ops.interpolate.interpolate_gaussians`` (same arguments).

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


def composite_front_to_back(alpha: torch.Tensor,  # [R, G] per ray (pixel) and depth-sorted Gaussian
                            use: torch.Tensor,  # [R, G] bool: the entries the kernel composites
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernels' front-to-back walk, dense: unused entries contribute nothing and the walk
    stops before the transmittance would fall to T_MIN. Returns (alpha with everything from
    the stop on zeroed [R, G], weights alpha_i T_i [R, G], final transmittance [R])."""
    alpha = torch.where(use, alpha, torch.zeros_like(alpha))
    after = torch.cumprod(1 - alpha, dim=1)  # T after each Gaussian
    before = torch.cat([torch.ones_like(after[:, :1]), after[:, :-1]], 1)
    stopped = torch.cumsum((use & (after <= T_MIN)).to(torch.int32), 1) > 0  # the kernel stops before those
    alpha = torch.where(stopped, torch.zeros_like(alpha), alpha)
    return alpha, alpha * before, torch.prod(1 - alpha, dim=1)


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
                                cams,  # nurec_usd.ops.camera.CameraBatch
                                near: float, far: float):
    """Twin of ``project_gaussians``: means2d [C, N, 2], conics [C, N, 3], depths [C, N], radii [C, N], colours [C, N, 3].

    Projection and its Jacobian come from ``nurec_usd.sensors.cameras`` (with the Jacobian
    by autodiff), not from a re-derivation of the kernel's formulas.
    """
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
            params = {k: v for k, v in vals.items() if k not in ("max_theta", "max_r2")}
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
            rows, cols = max(h - 1, 1), max(w - 1, 1)
            frac = {"top_to_bottom": uv0[:, 1] / rows, "bottom_to_top": 1 - uv0[:, 1] / rows,
                    "left_to_right": uv0[:, 0] / cols, "right_to_left": 1 - uv0[:, 0] / cols}[shutter]
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
            if name == "opencv":  # beyond max_r the distortion folds points back: not visible
                ok = ok & ((p[:, :2] / p[:, 2:]).square().sum(-1) < model.max_r ** 2)
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


def tile_membership(means2d: torch.Tensor,  # [G, 2]
                    conics: torch.Tensor,  # [G, 3]
                    opacities: torch.Tensor,  # [G]
                    ptx: torch.Tensor,  # [P] tile column of each pixel
                    pty: torch.Tensor,  # [P] tile row of each pixel
                    tiles_x: int, tiles_y: int) -> torch.Tensor:  # [P, G] bool
    """Twin of ``warp_kernels.tile_binning``: whether each Gaussian is binned to each pixel's tile
    (the tile rows its ellipse reaches, and there the tiles meeting the ellipse's x-range)."""
    ts, last = float(TILE_SIZE), float(TILE_SIZE - 1)
    u, v = means2d[None, :, 0], means2d[None, :, 1]
    a, b, c = conics[None, :, 0], conics[None, :, 1], conics[None, :, 2]
    inv = 1.0 / (a * c - b * b)
    sxx, sxy, syy = c * inv, -b * inv, a * inv
    r2 = 2.0 * (1.0 + SPAN_MARGIN) * torch.log(opacities[None] / ALPHA_MIN)
    hy = torch.sqrt(r2 * syy)
    ty = pty[:, None].to(means2d.dtype)
    y0 = torch.clamp(torch.ceil((v - hy - last) / ts), min=0)
    y1 = torch.clamp(torch.floor((v + hy) / ts) + 1, max=tiles_y)
    ya = torch.maximum(ty * ts - v, -hy)
    yb = torch.minimum(ty * ts + last - v, hy)
    slope, cond = sxy / syy, (sxx * syy - sxy * sxy) / syy
    wa = torch.sqrt(torch.clamp(cond * (r2 - ya * ya / syy), min=0))
    wb = torch.sqrt(torch.clamp(cond * (r2 - yb * yb / syy), min=0))
    r_sx, y_right = torch.sqrt(r2 * sxx), sxy * torch.sqrt(r2 / sxx)
    lo = torch.where((ya <= -y_right) & (-y_right <= yb), -r_sx, torch.minimum(slope * ya - wa, slope * yb - wb))
    hi = torch.where((ya <= y_right) & (y_right <= yb), r_sx, torch.maximum(slope * ya + wa, slope * yb + wb))
    x0 = torch.clamp(torch.ceil((u + lo - last) / ts), min=0)
    x1 = torch.clamp(torch.floor((u + hi) / ts) + 1, max=tiles_x)
    tx = ptx[:, None].to(means2d.dtype)
    return (ty >= y0) & (ty < y1) & (ya <= yb) & (tx >= x0) & (tx < x1)


def rasterize_reference(means2d: torch.Tensor,  # [C, N, 2]
                        conics: torch.Tensor,  # [C, N, 3]
                        colors: torch.Tensor,  # [C, N, 3]
                        depths: torch.Tensor,  # [C, N]
                        radii: torch.Tensor,  # [C, N]
                        opacities: torch.Tensor,  # [N]
                        background: torch.Tensor,  # [C, 3]
                        width: int, height: int):
    """Twin of the tile rasterizer, dense: every pixel against every Gaussian binned to the
    pixel's tile. Returns rgb [C, H, W, 3], alpha [C, H, W], depth [C, H, W]."""
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
        m, q, col, d = means2d[c, order], conics[c, order], colors[c, order], depths[c, order]
        op = opacities[order]
        in_rect = tile_membership(m, q, op, ptx, pty, tiles_x, tiles_y)
        dx = m[None, :, 0] - pix[:, None, 0]
        dy = m[None, :, 1] - pix[:, None, 1]
        sigma = 0.5 * (q[None, :, 0] * dx * dx + q[None, :, 2] * dy * dy) + q[None, :, 1] * dx * dy
        alpha = torch.clamp(op[None] * torch.exp(-sigma), max=ALPHA_MAX)
        _, weight, t_final = composite_front_to_back(alpha, in_rect & (sigma >= 0) & (alpha >= ALPHA_MIN))
        rgb = weight @ col + t_final[:, None] * background[c]
        rgbs.append(rgb.reshape(height, width, 3))
        alphas.append((1 - t_final).reshape(height, width))
        ds.append((weight @ d).reshape(height, width))
    return torch.stack(rgbs), torch.stack(alphas), torch.stack(ds)


def render_cameras_reference(means, quats, scales, opacities, colors, cameras, sh_degree=None, background=None,
                             near: float = 0.01, far: float = 1e4):
    """Twin of ``nurec_usd.ops.camera.render_cameras``: (rgb, alpha, depth, means2d, radii)."""
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


# =============================================================================================
# Lidar rendering (twin of warp_kernels.lidar_project, lidar_binning, lidar_raster)
#
# Written from the definitions in those modules' docstrings, with plain torch ops: the
# spherical map from nurec_usd.sensors.lidar and its Jacobian by autodiff, a dense
# every-ray-against-every-Gaussian compositor with the tile membership of the binning,
# and no chunks (a tile's list in one front-to-back walk).


def _lidar_pose(lidar, a: torch.Tensor):
    """T_lidar_world at sweep fractions a [...]: (R [..., 3, 3], t [..., 3])."""
    a = torch.as_tensor(a, dtype=lidar.rot_start.dtype, device=lidar.rot_start.device)
    q = quat_slerp(lidar.rot_start[0], lidar.rot_end[0], a)
    t = lidar.trans_start[0] * (1 - a[..., None]) + lidar.trans_end[0] * a[..., None]
    return quat_to_matrix(q), t


def _sweep_azimuth(points: torch.Tensor, sign: float, start: float) -> torch.Tensor:
    """Azimuth of lidar-frame points along the rotation from the start azimuth, in [0, 2 pi].  [..., 3] -> [...]"""
    az, _, _ = SpinningLidarModel.spherical(points)
    return torch.remainder(sign * (az - start), 2 * math.pi)


def project_lidar_reference(means: torch.Tensor,  # [N, 3]
                            quats: torch.Tensor,  # [N, 4] (w, x, y, z)
                            scales: torch.Tensor,  # [N, 3]
                            opacities: torch.Tensor,  # [N]
                            intensities: torch.Tensor,  # [N]
                            lidar,  # nurec_usd.ops.lidar.LidarBatch
                            motion: torch.Tensor | None = None,  # [N, 3] over the sweep (end - start); no gradient
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Twin of ``project_lidar``: splats [N, 8] (alpha, elev, conic a, b, c, range, opacity,
    intensity) and extents [N, 2], both zero where culled. ``means`` are placed for the sweep's
    middle; with ``motion`` a Gaussian is at ``mean + (a - 1/2) motion`` when its column fires."""
    dtype = means.dtype
    sign, start = lidar.sign, lidar.start_azimuth
    # rolling shutter: one fixed-point step from the mid-sweep pose
    R, t = _lidar_pose(lidar, torch.tensor(0.5, dtype=dtype))
    p0 = means @ R.T + t
    moved = p0[:, 0] ** 2 + p0[:, 1] ** 2 > 1e-20
    a = torch.where(moved, (_sweep_azimuth(p0, sign, start) / (2 * math.pi)).clamp(max=1.0), torch.full_like(p0[:, 0], 0.5))
    Rs, ts = _lidar_pose(lidar, a)
    placed = means if motion is None else means + (a - 0.5)[:, None] * motion.detach()
    p = torch.einsum("nij,nj->ni", Rs, placed) + ts
    _, elev, rng = SpinningLidarModel.spherical(p)
    alpha = _sweep_azimuth(p, sign, start)
    rho2 = p[:, 0] ** 2 + p[:, 1] ** 2

    def angles(q):  # the map whose Jacobian EWA needs: (sign * azimuth, elevation)
        az, el, _ = SpinningLidarModel.spherical(q)
        return torch.stack((sign * az, el))

    lo, hi = lidar.elevation_clamp
    phi = torch.atan2(p[:, 1], p[:, 0])
    thc = elev.clamp(lo, hi)
    pc = rng[:, None] * torch.stack((thc.cos() * phi.cos(), thc.cos() * phi.sin(), thc.sin()), -1)
    J = vmap(jacrev(angles))(pc)  # [N, 2, 3] at the point with its elevation clamped
    M = quat_to_matrix(quat_normalize(quats)) * scales[:, None, :]
    JM = J @ Rs @ M
    cov2 = JM @ JM.transpose(1, 2)
    a2, b2, c2 = cov2[:, 0, 0] + lidar.eps[0], cov2[:, 0, 1], cov2[:, 1, 1] + lidar.eps[1]
    det = a2 * c2 - b2 * b2
    ok = (rng > lidar.min_range) & (rng <= lidar.max_range) & (rho2 > 0)
    ok = ok & (rng >= NEAR_SIGMAS * scales.max(-1).values) & (opacities > A_MIN) & (det > 0)
    reach = 2 * torch.log(torch.where(opacities > A_MIN, opacities, torch.ones_like(opacities)) / A_MIN)
    ext_el = torch.sqrt(reach * c2.clamp_min(0))
    ok = ok & ~((elev + ext_el < float(lidar.elevation.min())) | (elev - ext_el > float(lidar.elevation.max())))
    det_safe = torch.where(ok, det, torch.ones_like(det))
    splats = torch.stack((alpha, elev, c2 / det_safe, -b2 / det_safe, a2 / det_safe, rng, opacities, intensities), -1)
    extents = torch.stack((torch.sqrt(reach * a2.clamp_min(0)), ext_el), -1)
    zero = torch.zeros_like(splats)
    return torch.where(ok[:, None], splats, zero), torch.where(ok[:, None], extents, torch.zeros_like(extents))


def lidar_tile_mask_reference(splats: torch.Tensor,  # [N, 8]
                              extents: torch.Tensor,  # [N, 2]
                              lidar) -> torch.Tensor:  # [N, C, W] bool
    """Whether each ray's tile is one of the tiles each splat is binned into (``lidar_binning``)."""
    tiles = lidar.tiles
    dtype, device = splats.dtype, splats.device
    W = lidar.columns
    band_f = tiles.band_f.to(device=device, dtype=dtype)  # [B, 4]
    band_i = tiles.band_i.long().to(device)  # [B, 4]
    alpha, elev = splats[:, 0:1], splats[:, 1:2]
    ea, ee = extents[:, 0:1], extents[:, 1:2]
    band_hit = (band_f[None, :, 0] <= elev + ee) & (band_f[None, :, 1] >= elev - ee) & (ea > 0)  # [N, B]
    scale = torch.tensor(float(W), dtype=dtype) / torch.tensor(2 * math.pi, dtype=dtype)
    k0 = torch.ceil((alpha - ea - band_f[None, :, 3]) * scale).long()  # [N, B]
    k1 = torch.floor((alpha + ea - band_f[None, :, 2]) * scale).long()
    band_of_channel = tiles.slot_band.long().to(device)[tiles.channel_rank.long().to(device)]  # [C]
    cols = band_i[band_of_channel, 2]  # [C]
    k = torch.arange(W, device=device)
    tx = k[None, :] // cols[:, None]  # [C, W]
    first = tx * cols[:, None]
    length = torch.clamp(W - first, max=cols[:, None])  # columns of the ray's tile
    k0c, k1c, hit = k0[:, band_of_channel], k1[:, band_of_channel], band_hit[:, band_of_channel]  # [N, C]
    span = (k1c - k0c)[..., None]
    d0 = torch.remainder(first[None] - k0c[..., None], W)  # where the tile starts, counted from k0
    cover = (span >= W - 1) | (d0 <= span) | (d0 + length[None] - 1 >= W)
    return hit[..., None] & (span >= 0) & cover


def rasterize_lidar_reference(splats: torch.Tensor,  # [N, 8]
                              extents: torch.Tensor,  # [N, 2]
                              lidar,
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Twin of the lidar rasterizer, dense: every ray against every splat binned into its tile.

    Returns range_sum, intensity_sum, hit probability and median range, each [C, W].
    """
    C, W = lidar.channels, lidar.columns
    dtype = splats.dtype
    rb = lidar.range_bits
    # front-to-back order of the kernel: the sort key's quantised range, then the index (a stable sort)
    q = torch.floor(splats[:, 5] * (float(1 << rb) / lidar.max_range)).clamp(0, (1 << rb) - 1)
    order = torch.argsort(q.detach(), stable=True)
    order = order[extents[order, 0] > 0]
    rec = splats[order]
    mask = lidar_tile_mask_reference(splats, extents, lidar)[order].reshape(len(order), C * W).T  # [R, n]
    k = torch.arange(W, dtype=dtype, device=splats.device)
    ray_az = 2 * math.pi * k[None, :] / W + (lidar.sign * lidar.azimuth_offset.to(dtype))[:, None]  # [C, W]
    ray_az = torch.remainder(ray_az, 2 * math.pi).reshape(-1, 1)
    ray_el = lidar.elevation.to(dtype)[:, None].expand(C, W).reshape(-1, 1)
    da = rec[None, :, 0] - ray_az
    da = torch.where(da >= math.pi, da - 2 * math.pi, torch.where(da < -math.pi, da + 2 * math.pi, da))
    de = rec[None, :, 1] - ray_el
    sigma = 0.5 * (rec[None, :, 2] * da * da + rec[None, :, 4] * de * de) + rec[None, :, 3] * da * de
    alpha = torch.clamp(rec[None, :, 6] * torch.exp(-sigma), max=ALPHA_MAX)
    alpha, weight, t_final = composite_front_to_back(alpha, mask & (sigma >= 0) & (alpha >= ALPHA_MIN))
    range_sum = weight @ rec[:, 5]
    int_sum = weight @ rec[:, 7]
    # median: the first Gaussian after which T falls to <= MEDIAN_T
    t_after = torch.cumprod(1 - alpha, dim=1).detach()
    t_before = torch.cat([torch.ones_like(t_after[:, :1]), t_after[:, :-1]], 1)
    cross = (alpha > 0) & (t_before > MEDIAN_T) & (t_after <= MEDIAN_T)
    has = cross.any(1)
    idx = torch.argmax(cross.to(torch.int8), dim=1)
    median = torch.where(has, rec[idx, 5] if len(order) else torch.zeros_like(t_final), torch.zeros_like(t_final))
    shape = (C, W)
    return range_sum.reshape(shape), int_sum.reshape(shape), (1 - t_final).reshape(shape), median.reshape(shape)


def render_lidar_reference(means, quats, scales, opacities, intensities, lidar, min_hit: float = 1e-3,
                           motion: torch.Tensor | None = None) -> dict:
    """Twin of ``nurec_usd.ops.lidar.render_lidar``: a dict with its per-ray fields and
    ``splats``/``extents`` (range, hit_prob, intensity, median_range, range_sum, intensity_sum)."""
    lid = lidar.to(means.dtype)
    splats, extents = project_lidar_reference(means, quats, scales, opacities, intensities, lid, motion)
    range_sum, int_sum, hit, median = rasterize_lidar_reference(splats, extents, lid)
    seen = hit > min_hit
    denom = torch.where(seen, hit, torch.ones_like(hit))
    return {"range": torch.where(seen, range_sum / denom, torch.zeros_like(hit)), "hit_prob": hit,
            "intensity": torch.where(seen, int_sum / denom, torch.zeros_like(hit)), "median_range": median,
            "range_sum": range_sum, "intensity_sum": int_sum, "splats": splats, "extents": extents}


__all__ += ["project_lidar_reference", "lidar_tile_mask_reference", "rasterize_lidar_reference",
            "render_lidar_reference"]


# ---------------------------------------------------------------------------------------------
# Nearest-neighbour distances (twin of warp_kernels/point_neighbors.py via nurec_usd.ops.neighbors)


def knn_distances_reference(points: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Twin of ``nurec_usd.ops.neighbors.knn_distances``: brute force over all pairs.

    Args:
        points: positions.  # [N, 3]
        k: neighbours per point.
    Returns:
        distances to the k nearest other points (a duplicate is at 0), ascending; +inf past
        N - 1 neighbours.  # [N, k]
    """
    n = points.shape[0]
    out = points.new_full((n, k), math.inf)  # [N, k]
    kk = min(k, n - 1)
    if kk < 1:
        return out
    chunk = max(1, (1 << 22) // n)  # rows per chunk: [chunk, N, 3] differences at a time
    for s in range(0, n, chunk):
        rows = torch.arange(s, min(s + chunk, n), device=points.device)  # [c]
        # explicit differences, not torch.cdist: its default matrix-product form loses small
        # distances (two points 1 mm apart at 100 m from the origin come out at 0)
        diff = points[None, :, :] - points[rows, None, :]  # [c, N, 3]
        d2 = diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1] + diff[..., 2] * diff[..., 2]  # [c, N]
        d2[torch.arange(len(rows), device=points.device), rows] = math.inf  # not the point itself
        out[rows, :kk] = torch.topk(d2, kk, dim=1, largest=False).values.sqrt()
    return out


__all__ += ["knn_distances_reference"]


# ---------------------------------------------------------------------------------------------
# Sky lookup (twin of warp_kernels/sky.py)


def sky_colors_reference(sky: torch.Tensor,  # [3, H, W] pre-sigmoid equirectangular map
                         directions: torch.Tensor,  # [..., 3] unit, world (Z up)
                         ) -> torch.Tensor:  # [..., 3]
    """Bilinear lookup in the equirectangular sky map, wrapping around in azimuth."""
    shape = directions.shape[:-1]
    d = directions.reshape(-1, 3)
    az = torch.atan2(d[:, 1], d[:, 0])  # (-pi, pi]
    el = torch.asin(d[:, 2].clamp(-1.0, 1.0))
    h, w = sky.shape[1:]
    # one wrapped column on each side, so azimuth +-180 degrees blends instead of clamping
    tex = torch.cat((sky[:, :, -1:], sky, sky[:, :, :1]), dim=2)
    u = (az / math.pi) * (w / (w + 2))  # [-1, 1] over the inner w columns
    v = -el / (math.pi / 2)  # +90 degrees at the top
    grid = torch.stack((u, v), -1).to(sky.dtype)[None, None]  # [1, 1, M, 2]
    out = torch.nn.functional.grid_sample(torch.sigmoid(tex)[None], grid, mode="bilinear", padding_mode="border",
                                          align_corners=False)
    return out[0, :, 0].T.reshape(*shape, 3)


# ---------------------------------------------------------------------------------------------
# Densification noise (twin of warp_kernels/perturb.py)


@torch.no_grad()
def perturb_transparent_reference(means: torch.Tensor, quats: torch.Tensor, log_scales: torch.Tensor,
                                  opacity_logits: torch.Tensor, scale: float, dead_opacity: float,
                                  generator: torch.Generator | None = None) -> None:
    """Torch twin of :func:`nurec_usd.ops.perturb.perturb_transparent` (the same noise for the
    same generator); moves ``means`` in place."""
    if means.shape[0] == 0 or scale <= 0:
        return
    opacity = torch.sigmoid(opacity_logits)
    gate = torch.sigmoid(-100.0 * (opacity - dead_opacity))  # ~1 when transparent, ~0 when opaque
    z = torch.randn(means.shape, device=means.device, generator=generator)
    local = z * log_scales.exp()
    world = (quat_to_matrix(quat_normalize(quats)) @ local[..., None])[..., 0]
    means.add_(world * (scale * gate)[:, None])


# ---------------------------------------------------------------------------------------------
# SSIM (twin of warp_kernels/ssim.py, and the evaluation's metric)


# SSIM's stabilising constants (K1 = 0.01, K2 = 0.03, images in [0, 1])
SSIM_C1 = 0.01 ** 2
SSIM_C2 = 0.03 ** 2


def gaussian_window(size: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:  # [size]
    """The 1D Gaussian window of SSIM, normalised to sum 1."""
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-x.square() / (2 * sigma * sigma))
    return g / g.sum()


def ssim(image: torch.Tensor,  # [H, W, 3] or [B, H, W, 3] in [0, 1]
         target: torch.Tensor,  # same shape
         window: int = 11, sigma: float = 1.5) -> torch.Tensor:  # []
    """Structural similarity (Wang et al. 2004): Gaussian window 11 / sigma 1.5, K1 = 0.01, K2 = 0.03,
    per channel, averaged over the windows that fit inside the image (no padding). Differentiable."""
    x = image if image.dim() == 4 else image[None]
    y = target if target.dim() == 4 else target[None]
    x = x.permute(0, 3, 1, 2)  # [B, 3, H, W]
    y = y.permute(0, 3, 1, 2)
    c = x.shape[1]
    g = gaussian_window(window, sigma, x.dtype, x.device)
    gx = g.view(1, 1, 1, -1).expand(c, 1, 1, window)
    gy = g.view(1, 1, -1, 1).expand(c, 1, window, 1)

    def blur(z: torch.Tensor) -> torch.Tensor:  # separable Gaussian, valid region only
        return F.conv2d(F.conv2d(z, gx, groups=c), gy, groups=c)

    mu_x, mu_y = blur(x), blur(y)
    sxx = blur(x * x) - mu_x.square()
    syy = blur(y * y) - mu_y.square()
    sxy = blur(x * y) - mu_x * mu_y
    c1, c2 = SSIM_C1, SSIM_C2
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x.square() + mu_y.square() + c1) * (sxx + syy + c2))
    return s.mean()
