"""Projection of 3D Gaussians into cameras: 2D means, conics, depths, radii and view
directions; and colours from spherical harmonics along those directions (``sh_colors``).

One thread per (camera, Gaussian). Every camera model of the capture format (pinhole,
OpenCV radial-tangential, OpenCV fisheye, f-theta) and rolling shutter are handled in
the same kernel, selected per camera by a model id, so a whole rig projects in one
launch. Its backward is hand-written (``make_projection_backward_kernel``: one thread per
Gaussian over the cameras); the kernel has no loops whose trip count is only known at run
time, so Warp's generated adjoint (``wp.launch(..., adjoint=True)``) exists too, and is the
oracle the tests compare the hand-written one with. Launches whose cameras are all pinhole
with a global shutter use a kernel specialised for them and its own hand-written backward
(``make_pinhole_backward_kernel``).

Camera parameters travel as one ``vec16`` per camera (see ``CAMERA_PARAM_LAYOUT``);
poses as (quaternion, translation) of ``T_camera_world`` at the start and at the end of
the rolling-shutter readout. Quaternions arrive as ``vec4`` in the project's (w, x, y, z)
order and become Warp's (x, y, z, w) ``quat`` here, at the kernel boundary.
"""

import functools

import warp as wp

from warp_kernels.compositing import ALPHA_MIN
from warp_kernels.modules import variant_module
from warp_kernels.pose_funcs import make_pose_funcs, make_pose_rate_func, make_rotation_funcs

MODEL_PINHOLE = 0
MODEL_OPENCV = 1
MODEL_OPENCV_FISHEYE = 2
MODEL_FTHETA = 3

SHUTTER_GLOBAL = 0
SHUTTER_TOP_TO_BOTTOM = 1
SHUTTER_BOTTOM_TO_TOP = 2
SHUTTER_LEFT_TO_RIGHT = 3
SHUTTER_RIGHT_TO_LEFT = 4

# Index of each parameter inside a camera's vec16.
CAMERA_PARAM_LAYOUT = {
    "pinhole": ("fx", "fy", "cx", "cy"),
    # max_r2: squared normalised radius where the distortion stops increasing (beyond it the
    # model folds points back into the image: they are not visible)
    "opencv": ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2", "max_r2"),
    "opencv_fisheye": ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4", "max_theta"),
    # rho(theta) = sum c_i theta^i; fx = fy = 1 so the radial-angle code is shared with the fisheye
    "ftheta": ("fx", "fy", "cx", "cy", "c0", "c1", "c2", "c3", "c4", "c5", "max_theta"),
}

# Compositing constants shared with the rasterizer and the torch twin.
EPS_2D = 0.3  # pixels^2 added to every 2D covariance (a pixel's footprint)
# The linearisation behind EWA splatting fails far outside the view: the Jacobian of the
# perspective models is taken at the point clamped to the image plus this fraction of
# its size on each side (otherwise a point just past the near plane and off to the side
# becomes a splat that covers the whole image).
FRUSTUM_MARGIN = 0.15

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2_0 = 1.0925484305920792
SH_C2_1 = -1.0925484305920792
SH_C2_2 = 0.31539156525252005
SH_C2_3 = -1.0925484305920792
SH_C2_4 = 0.5462742152960396
SH_C3_0 = -0.5900435899266435
SH_C3_1 = 2.890611442640554
SH_C3_2 = -0.4570457994644658
SH_C3_3 = 0.3731763325901154
SH_C3_4 = -0.4570457994644658
SH_C3_5 = 1.445305721320277
SH_C3_6 = -0.5900435899266435


@functools.lru_cache(maxsize=None)
def make_view_bounds(float_t):
    """``view_bounds`` for one float type, shared by the projection and the pinhole backward
    (both must clamp at the same place)."""
    vec16 = wp.types.vector(16, float_t)

    @wp.func
    def view_bounds(k: vec16, width: int, height: int):
        """Normalised x and y ranges (x_lo, x_hi, y_lo, y_hi) of the image plus FRUSTUM_MARGIN of its
        size on each side: the perspective Jacobian is taken at the point clamped to them."""
        mx = float_t(FRUSTUM_MARGIN) * float_t(width)
        my = float_t(FRUSTUM_MARGIN) * float_t(height)
        return ((float_t(-0.5) - mx - k[2]) / k[0], (float_t(width) - float_t(0.5) + mx - k[2]) / k[0],
                (float_t(-0.5) - my - k[3]) / k[1], (float_t(height) - float_t(0.5) + my - k[3]) / k[1])

    return view_bounds


@functools.lru_cache(maxsize=None)
def make_camera_funcs(float_t):
    """The camera models' funcs for one float type, shared by the projection and its hand-written
    backward (which replays the forward with them): (``opencv_radial``, ``opencv_jacobian``,
    ``project_pinhole``, ``project_point``, ``line_fraction``)."""
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec16 = wp.types.vector(16, float_t)
    mat22 = wp.types.matrix((2, 2), float_t)
    mat23 = wp.types.matrix((2, 3), float_t)
    view_bounds = make_view_bounds(float_t)

    @wp.func
    def project_radial_angle(p: vec3, fx: float_t, fy: float_t, cx: float_t, cy: float_t, f: float_t,
                             df: float_t, theta: float_t, r: float_t):
        """uv and d(uv)/dp for models with rho = f(theta) along the direction of (x, y)."""
        x = p[0]
        y = p[1]
        z = p[2]
        rr = r * r + z * z
        # s = f(theta) / r; near the axis its limit is f'(0)/z (f(0)=0 assumed there)
        s = float_t(0.0)
        ds_dr = float_t(0.0)
        ds_dz = float_t(0.0)
        if r > float_t(1e-9) * wp.abs(z) + float_t(1e-20):
            s = f / r
            ds_dr = (df * z / rr * r - f) / (r * r)
            ds_dz = df * (-r / rr) / r
        else:
            s = df / z
            ds_dz = -df / (z * z)
        u = fx * s * x + cx
        v = fy * s * y + cy
        dxr = float_t(0.0)
        dyr = float_t(0.0)
        if r > float_t(0.0):
            dxr = x / r
            dyr = y / r
        J = mat23(fx * (s + x * ds_dr * dxr), fx * x * ds_dr * dyr, fx * x * ds_dz,
                  fy * y * ds_dr * dxr, fy * (s + y * ds_dr * dyr), fy * y * ds_dz)
        return vec2(u, v), J

    @wp.func
    def opencv_radial(k: vec16, r2: float_t):
        """Radial factor (1 + k1 r2 + k2 r4 + k3 r6) / (1 + k4 r2 + k5 r4 + k6 r6) and its derivative in r2."""
        a = float_t(1.0) + r2 * (k[4] + r2 * (k[5] + r2 * k[6]))
        b = float_t(1.0) + r2 * (k[7] + r2 * (k[8] + r2 * k[9]))
        da = k[4] + r2 * (float_t(2.0) * k[5] + float_t(3.0) * r2 * k[6])
        db = k[7] + r2 * (float_t(2.0) * k[8] + float_t(3.0) * r2 * k[9])
        return a / b, (da * b - a * db) / (b * b)

    @wp.func
    def opencv_distort(k: vec16, xn: float_t, yn: float_t):
        r2 = xn * xn + yn * yn
        radial, drad = opencv_radial(k, r2)
        p1 = k[10]
        p2 = k[11]
        xd = xn * radial + float_t(2.0) * p1 * xn * yn + p2 * (r2 + float_t(2.0) * xn * xn)
        yd = yn * radial + p1 * (r2 + float_t(2.0) * yn * yn) + float_t(2.0) * p2 * xn * yn
        return xd, yd

    @wp.func
    def opencv_jacobian(k: vec16, xn: float_t, yn: float_t):
        """d(distorted)/d(normalised) of the OpenCV model at (xn, yn)."""
        r2 = xn * xn + yn * yn
        radial, drad = opencv_radial(k, r2)
        p1 = k[10]
        p2 = k[11]
        xy2 = float_t(2.0) * xn * yn * drad
        return mat22(radial + float_t(2.0) * xn * xn * drad + float_t(2.0) * p1 * yn + float_t(6.0) * p2 * xn,
                     xy2 + float_t(2.0) * p1 * xn + float_t(2.0) * p2 * yn,
                     xy2 + float_t(2.0) * p1 * xn + float_t(2.0) * p2 * yn,
                     radial + float_t(2.0) * yn * yn * drad + float_t(6.0) * p1 * yn + float_t(2.0) * p2 * xn)

    @wp.func
    def perspective(k: vec16, p: vec3, near: float_t, width: int, height: int):
        """The perspective division of the pinhole and OpenCV models: the normalised point
        (xn, yn); the point clamped to near the view (xj, yj), where the Jacobian is taken;
        d(normalised)/dp there; and whether p lies beyond the near plane."""
        z = p[2]
        ok = True
        if z <= near:
            ok = False
            z = near  # keep the maths finite; the result is discarded
        iz = float_t(1.0) / z
        x_lo, x_hi, y_lo, y_hi = view_bounds(k, width, height)
        xj = wp.clamp(p[0] * iz, x_lo, x_hi)
        yj = wp.clamp(p[1] * iz, y_lo, y_hi)
        P = mat23(iz, float_t(0.0), -xj * iz, float_t(0.0), iz, -yj * iz)
        return p[0] * iz, p[1] * iz, xj, yj, P, ok

    @wp.func
    def project_pinhole(k: vec16, p: vec3, near: float_t, width: int, height: int):
        """``project_point`` for a pinhole camera."""
        xn, yn, xj, yj, P, ok = perspective(k, p, near, width, height)
        J = mat22(k[0], float_t(0.0), float_t(0.0), k[1]) * P
        return vec2(k[0] * xn + k[2], k[1] * yn + k[3]), J, ok

    @wp.func
    def project_point(model: int, k: vec16, p: vec3, near: float_t, width: int, height: int):
        """Pixel of camera-frame point p, its Jacobian, and whether the model can see it."""
        x = p[0]
        y = p[1]
        z = p[2]
        fx = k[0]
        fy = k[1]
        cx = k[2]
        cy = k[3]
        ok = True
        uv = vec2(float_t(0.0), float_t(0.0))
        J = mat23()
        if model == MODEL_PINHOLE or model == MODEL_OPENCV:
            xn, yn, xj, yj, P, ok = perspective(k, p, near, width, height)
            # the pixel itself from the true point; the distortion's Jacobian at the clamped one
            D = mat22(float_t(1.0), float_t(0.0), float_t(0.0), float_t(1.0))
            xd = xn
            yd = yn
            if model == MODEL_OPENCV:
                if xn * xn + yn * yn >= k[12]:
                    ok = False
                xd, yd = opencv_distort(k, xn, yn)
                D = opencv_jacobian(k, xj, yj)
            uv = vec2(fx * xd + cx, fy * yd + cy)
            F = mat22(fx, float_t(0.0), float_t(0.0), fy)
            J = F * D * P
        else:
            r = wp.sqrt(x * x + y * y)
            theta = wp.atan2(r, z)
            f = float_t(0.0)
            df = float_t(0.0)
            max_theta = float_t(0.0)
            if model == MODEL_OPENCV_FISHEYE:
                t2 = theta * theta
                f = theta * (float_t(1.0) + t2 * (k[4] + t2 * (k[5] + t2 * (k[6] + t2 * k[7]))))
                df = float_t(1.0) + t2 * (float_t(3.0) * k[4] + t2 * (float_t(5.0) * k[5]
                                          + t2 * (float_t(7.0) * k[6] + t2 * float_t(9.0) * k[7])))
                max_theta = k[8]
            else:
                f = k[4] + theta * (k[5] + theta * (k[6] + theta * (k[7] + theta * (k[8] + theta * k[9]))))
                df = k[5] + theta * (float_t(2.0) * k[6] + theta * (float_t(3.0) * k[7]
                                     + theta * (float_t(4.0) * k[8] + theta * float_t(5.0) * k[9])))
                max_theta = k[10]
            if theta > max_theta or wp.length(p) <= near:
                ok = False
            uv, J = project_radial_angle(p, fx, fy, cx, cy, f, df, theta, r)
        return uv, J, ok

    @wp.func
    def line_fraction(shutter: int, uv: vec2, width: int, height: int):
        """Readout position of pixel uv in [0, 1] (0: first line read)."""
        frac = float_t(0.0)
        rows = float_t(wp.max(height - 1, 1))  # a single line is read at once
        cols = float_t(wp.max(width - 1, 1))
        if shutter == SHUTTER_TOP_TO_BOTTOM:
            frac = uv[1] / rows
        elif shutter == SHUTTER_BOTTOM_TO_TOP:
            frac = float_t(1.0) - uv[1] / rows
        elif shutter == SHUTTER_LEFT_TO_RIGHT:
            frac = uv[0] / cols
        elif shutter == SHUTTER_RIGHT_TO_LEFT:
            frac = float_t(1.0) - uv[0] / cols
        return wp.clamp(frac, float_t(0.0), float_t(1.0))

    return opencv_radial, opencv_jacobian, project_pinhole, project_point, line_fraction


@functools.lru_cache(maxsize=None)
def make_covariance_vjp_funcs(float_t):
    """The pieces the hand-written projection backwards share: ``covariance3`` (the unit
    quaternion, its norm, its rotation, M = R S and cov3 = M M^T of a Gaussian),
    ``cov2_vjp`` (dL/dcov2 = -conic G conic of a camera, from A = J R and the conic's gradient)
    and ``covariance3_vjp`` (dL/d quaternion and scales from dL/dcov3)."""
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    mat22 = wp.types.matrix((2, 2), float_t)
    mat23 = wp.types.matrix((2, 3), float_t)
    mat33 = wp.types.matrix((3, 3), float_t)
    rotation_wxyz, rotation_wxyz_vjp = make_rotation_funcs(float_t)

    @wp.func
    def covariance3(qv: vec4, s: vec3):
        qn = wp.length(qv)
        q = qv / qn
        Rg = rotation_wxyz(q)
        M = Rg * wp.diag(s)
        return q, qn, Rg, M, M * wp.transpose(M)

    @wp.func
    def cov2_vjp(A: mat23, cov3: mat33, g_conic: vec3):
        cov2 = A * cov3 * wp.transpose(A)
        a2 = cov2[0, 0] + float_t(EPS_2D)
        b2 = cov2[0, 1]
        c2 = cov2[1, 1] + float_t(EPS_2D)
        inv = float_t(1.0) / (a2 * c2 - b2 * b2)
        conic = mat22(c2 * inv, -b2 * inv, -b2 * inv, a2 * inv)
        half = float_t(0.5)
        G = mat22(g_conic[0], half * g_conic[1], half * g_conic[1], g_conic[2])
        return -(conic * G * conic)

    @wp.func
    def covariance3_vjp(gcov3: mat33, q: vec4, qn: float_t, Rg: mat33, M: mat33, s: vec3):
        gM = (gcov3 + wp.transpose(gcov3)) * M
        gRg = mat33(gM[0, 0] * s[0], gM[0, 1] * s[1], gM[0, 2] * s[2],
                    gM[1, 0] * s[0], gM[1, 1] * s[1], gM[1, 2] * s[2],
                    gM[2, 0] * s[0], gM[2, 1] * s[1], gM[2, 2] * s[2])
        gs = vec3(gM[0, 0] * Rg[0, 0] + gM[1, 0] * Rg[1, 0] + gM[2, 0] * Rg[2, 0],
                  gM[0, 1] * Rg[0, 1] + gM[1, 1] * Rg[1, 1] + gM[2, 1] * Rg[2, 1],
                  gM[0, 2] * Rg[0, 2] + gM[1, 2] * Rg[1, 2] + gM[2, 2] * Rg[2, 2])
        gq_unit = rotation_wxyz_vjp(q, gRg)
        return (gq_unit - q * wp.dot(q, gq_unit)) / qn, gs

    return covariance3, cov2_vjp, covariance3_vjp


def make_projection_kernel(float_t, pinhole_global: bool = False):
    """The projection kernel for one float type (``wp.float32`` for speed, ``wp.float64`` for gradcheck).

    ``pinhole_global``: the kernel for launches whose cameras are all pinhole with a global
    shutter, in a module of its own. The camera model and the shutter are then known when the
    kernel compiles, so its code holds the pinhole path only, and its backward is hand-written
    (``make_pinhole_backward_kernel``) instead of Warp's generated adjoint, which carries every
    model's and the rolling shutter's state.
    """
    # float64 and specialised kernels compile apart (warp_kernels.modules)
    # the pinhole module's backward is hand-written (make_pinhole_backward_kernel): no adjoints to compile
    module = (variant_module(__name__, float_t, "pinhole", enable_backward=False) if pinhole_global
              else variant_module(__name__, float_t))
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec16 = wp.types.vector(16, float_t)
    vec4 = wp.types.vector(4, float_t)

    to_quat, pose_at = make_pose_funcs(float_t)
    project_pinhole, project_point, line_fraction = make_camera_funcs(float_t)[-3:]

    @wp.kernel(module=module)
    def project_gaussians(
        means: wp.array(dtype=vec3),  # [N] world
        quats: wp.array(dtype=vec4),  # [N] (w, x, y, z), any norm
        scales: wp.array(dtype=vec3),  # [N] linear standard deviations
        opacities: wp.array(dtype=float_t),  # [N] in [0, 1]: bounds how far a splat can reach ALPHA_MIN
        cam_q0: wp.array(dtype=vec4),  # [C] T_camera_world rotation (w, x, y, z) at readout start
        cam_t0: wp.array(dtype=vec3),  # [C] T_camera_world translation at readout start
        cam_q1: wp.array(dtype=vec4),  # [C] ... at readout end, same hemisphere as cam_q0
        cam_t1: wp.array(dtype=vec3),  # [C]
        cam_model: wp.array(dtype=int),  # [C] MODEL_*
        cam_params: wp.array(dtype=vec16),  # [C] see CAMERA_PARAM_LAYOUT
        cam_shutter: wp.array(dtype=int),  # [C] SHUTTER_*
        width: int,
        height: int,
        near: float_t,
        far: float_t,
        # outputs, [C, N]
        means2d: wp.array2d(dtype=vec2),
        conics: wp.array2d(dtype=vec3),  # inverse 2D covariance (a, b, c) = [[a, b], [b, c]]
        depths: wp.array2d(dtype=float_t),  # z for pinhole/opencv, distance for fisheye/f-theta
        radii: wp.array2d(dtype=wp.int32),  # pixels; 0 = culled
        dirs: wp.array2d(dtype=vec3),  # unit view direction from the camera centre at the Gaussian's line time
        opacities2d: wp.array2d(dtype=float_t),  # the opacity again, per camera, for the rasterizer's gathers
    ):
        c, i = wp.tid()
        radii[c, i] = 0
        means2d[c, i] = vec2(float_t(0.0), float_t(0.0))  # what a culled splat reports (no fill on the host)
        model = cam_model[c]
        k = cam_params[c]
        mean = means[i]

        if wp.static(pinhole_global):
            R = wp.quat_to_matrix(wp.normalize(to_quat(cam_q0[c])))
            t = cam_t0[c]
            p = R * mean + t
            uv, J, ok = project_pinhole(k, p, near, width, height)
            depth = p[2]
        else:
            # Camera pose at the Gaussian's own line time: project with the mid-readout pose,
            # read the line, re-evaluate the pose there (one fixed-point step).
            R, t = pose_at(to_quat(cam_q0[c]), cam_t0[c], to_quat(cam_q1[c]), cam_t1[c], float_t(0.5))
            shutter = cam_shutter[c]
            if shutter != SHUTTER_GLOBAL:
                uv0, J0, ok0 = project_point(model, k, R * mean + t, near, width, height)
                a = line_fraction(shutter, uv0, width, height)
                R, t = pose_at(to_quat(cam_q0[c]), cam_t0[c], to_quat(cam_q1[c]), cam_t1[c], a)

            p = R * mean + t
            uv, J, ok = project_point(model, k, p, near, width, height)
            depth = p[2]
            if model == MODEL_OPENCV_FISHEYE or model == MODEL_FTHETA:
                depth = wp.length(p)
        if not ok or depth > far:
            return
        # alpha = opacity exp(-d^2 / 2) reaches ALPHA_MIN at d^2 = 2 ln(opacity / ALPHA_MIN)
        reach = float_t(2.0) * wp.log(opacities[i] / float_t(ALPHA_MIN))
        if reach <= float_t(0.0):
            return

        q = wp.normalize(to_quat(quats[i]))
        Rg = wp.quat_to_matrix(q)
        s = scales[i]
        M = Rg * wp.diag(s)
        cov3 = M * wp.transpose(M)
        JW = J * R
        cov2 = JW * cov3 * wp.transpose(JW)
        a2 = cov2[0, 0] + float_t(EPS_2D)
        b2 = cov2[0, 1]
        c2 = cov2[1, 1] + float_t(EPS_2D)
        det = a2 * c2 - b2 * b2
        if det <= float_t(0.0):
            return
        inv_det = float_t(1.0) / det
        mid = float_t(0.5) * (a2 + c2)
        lam = mid + wp.sqrt(wp.max(float_t(0.1), mid * mid - det))
        radius = wp.ceil(wp.sqrt(reach * lam))
        if (uv[0] + radius <= float_t(-0.5) or uv[0] - radius >= float_t(width) - float_t(0.5)
                or uv[1] + radius <= float_t(-0.5) or uv[1] - radius >= float_t(height) - float_t(0.5)):
            return

        means2d[c, i] = uv
        conics[c, i] = vec3(c2 * inv_det, -b2 * inv_det, a2 * inv_det)
        depths[c, i] = depth
        radii[c, i] = wp.int32(radius)
        opacities2d[c, i] = opacities[i]
        centre = -(wp.transpose(R) * t)  # the camera centre (world) at the Gaussian's line time
        dirs[c, i] = wp.normalize(mean - centre)

    return project_gaussians


def make_sh_kernel(float_t):
    """Colours from spherical harmonics, one thread per (camera, Gaussian), for one float type.

    Apart from the projection (as in gsplat), so that each kernel's generated adjoint carries
    only its own state: together they held 255 registers and a 1 KB stack.
    """
    module = variant_module(__name__, float_t)
    vec3 = wp.types.vector(3, float_t)

    @wp.func(module=module)
    def sh_channel(degree: int, sh: wp.array3d(dtype=float_t), i: int, ch: int, d: vec3):
        """One colour channel from spherical harmonics (coefficient-major [N, K, 3]) in unit direction d."""
        x = d[0]
        y = d[1]
        z = d[2]
        v = float_t(SH_C0) * sh[i, 0, ch]
        if degree >= 1:
            v += float_t(SH_C1) * (-y * sh[i, 1, ch] + z * sh[i, 2, ch] - x * sh[i, 3, ch])
        if degree >= 2:
            xx = x * x
            yy = y * y
            zz = z * z
            v += (float_t(SH_C2_0) * x * y * sh[i, 4, ch]
                  + float_t(SH_C2_1) * y * z * sh[i, 5, ch]
                  + float_t(SH_C2_2) * (float_t(2.0) * zz - xx - yy) * sh[i, 6, ch]
                  + float_t(SH_C2_3) * x * z * sh[i, 7, ch]
                  + float_t(SH_C2_4) * (xx - yy) * sh[i, 8, ch])
            if degree >= 3:
                v += (float_t(SH_C3_0) * y * (float_t(3.0) * xx - yy) * sh[i, 9, ch]
                      + float_t(SH_C3_1) * x * y * z * sh[i, 10, ch]
                      + float_t(SH_C3_2) * y * (float_t(4.0) * zz - xx - yy) * sh[i, 11, ch]
                      + float_t(SH_C3_3) * z * (float_t(2.0) * zz - float_t(3.0) * xx - float_t(3.0) * yy)
                      * sh[i, 12, ch]
                      + float_t(SH_C3_4) * x * (float_t(4.0) * zz - xx - yy) * sh[i, 13, ch]
                      + float_t(SH_C3_5) * z * (xx - yy) * sh[i, 14, ch]
                      + float_t(SH_C3_6) * x * (xx - float_t(3.0) * yy) * sh[i, 15, ch])
        # colour = 0.5 + SH, clamped at 0 (the DC convention of 3DGS)
        return wp.max(v + float_t(0.5), float_t(0.0))

    @wp.kernel(module=module)
    def sh_colors(
        sh: wp.array3d(dtype=float_t),  # [N, K, 3] SH coefficients
        sh_degree: int,  # 0..3
        dirs: wp.array2d(dtype=vec3),  # [C, N] from the projection
        radii: wp.array2d(dtype=wp.int32),  # [C, N] from the projection: 0 = culled (left unwritten)
        colors: wp.array2d(dtype=vec3),  # [C, N] out
    ):
        c, i = wp.tid()
        if radii[c, i] == 0:
            return
        d = dirs[c, i]
        colors[c, i] = vec3(sh_channel(sh_degree, sh, i, 0, d), sh_channel(sh_degree, sh, i, 1, d),
                            sh_channel(sh_degree, sh, i, 2, d))

    return sh_colors


def make_pinhole_backward_kernel(float_t):
    """Hand-written backward of ``project_gaussians`` for all-pinhole, global-shutter launches.

    One thread per Gaussian walks the cameras, sums its gradient over them in registers and
    writes it once, where Warp's generated adjoint (one thread per camera and Gaussian) adds
    each camera's share with atomics and takes several times as long (benchmarks/RESULTS.md,
    raster-camera). Per camera, with p = R m + t, z' = 1 / p_z:

        uv = (fx p_x z' + cx, fy p_y z' + cy),   depth = p_z,   dir = (m - centre) / |m - centre|
        J = [[fx z', 0, -fx x_j z'], [0, fy z', -fy y_j z']]  (x_j, y_j: p_x z', p_y z' clamped
            to the view plus its margin, as in ``perspective``)
        cov2 = (J R) cov3 (J R)^T + eps I,   conic = cov2^-1,   cov3 = Rg S S Rg^T

    and the chain rule backwards: dL/dcov2 = -conic G conic (G: the conic gradient as a
    symmetric matrix), dL/dcov3 = A^T (dL/dcov2) A and dL/dA = 2 (dL/dcov2) A cov3 with A = J R,
    then through J, the perspective division, the rotation matrix of the (normalised)
    quaternion and the scales. Culled pairs (radius 0) carry no gradient. The torch twin and a
    float64 gradcheck test it.
    """
    module = variant_module(__name__, float_t, "pinhole", enable_backward=False)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    vec16 = wp.types.vector(16, float_t)
    mat23 = wp.types.matrix((2, 3), float_t)
    mat33 = wp.types.matrix((3, 3), float_t)
    to_quat, _ = make_pose_funcs(float_t)
    covariance3, cov2_vjp, covariance3_vjp = make_covariance_vjp_funcs(float_t)
    view_bounds = make_view_bounds(float_t)
    two = float_t(2.0)

    @wp.kernel(module=module)
    def project_pinhole_backward(
        means: wp.array(dtype=vec3),  # [N]
        quats: wp.array(dtype=vec4),  # [N] (w, x, y, z), any norm
        scales: wp.array(dtype=vec3),  # [N]
        cam_q: wp.array(dtype=vec4),  # [C] T_camera_world rotation (w, x, y, z)
        cam_t: wp.array(dtype=vec3),  # [C]
        cam_params: wp.array(dtype=vec16),  # [C] fx, fy, cx, cy
        width: int,
        height: int,
        radii: wp.array2d(dtype=wp.int32),  # [C, N] from the forward: 0 = culled
        g_means2d: wp.array2d(dtype=vec2),  # [C, N] dL/d outputs of the forward
        g_conics: wp.array2d(dtype=vec3),
        g_depths: wp.array2d(dtype=float_t),
        g_dirs: wp.array2d(dtype=vec3),
        # outputs [N], written (not accumulated)
        g_means: wp.array(dtype=vec3),
        g_quats: wp.array(dtype=vec4),
        g_scales: wp.array(dtype=vec3),
    ):
        i = wp.tid()
        m = means[i]
        s = scales[i]
        q, qn, Rg, M, cov3 = covariance3(quats[i], s)
        gm = vec3()
        gcov3 = mat33()
        for c in range(radii.shape[0]):
            if radii[c, i] == 0:
                continue
            Rc = wp.quat_to_matrix(wp.normalize(to_quat(cam_q[c])))
            tc = cam_t[c]
            k = cam_params[c]
            fx = k[0]
            fy = k[1]
            p = Rc * m + tc
            iz = float_t(1.0) / p[2]
            # the clamp of ``perspective``: the Jacobian is taken at the clamped point
            lox, hix, loy, hiy = view_bounds(k, width, height)
            xr = p[0] * iz
            yr = p[1] * iz
            xj = wp.clamp(xr, lox, hix)
            yj = wp.clamp(yr, loy, hiy)
            J = mat23(fx * iz, float_t(0.0), -fx * xj * iz, float_t(0.0), fy * iz, -fy * yj * iz)
            A = J * Rc
            H = cov2_vjp(A, cov3, g_conics[c, i])  # dL/dcov2
            gcov3 += wp.transpose(A) * H * A
            gJ = two * H * A * cov3 * wp.transpose(Rc)
            guv = g_means2d[c, i]
            g_iz = (gJ[0, 0] * fx - gJ[0, 2] * fx * xj + gJ[1, 1] * fy - gJ[1, 2] * fy * yj
                    + guv[0] * fx * p[0] + guv[1] * fy * p[1])
            gpx = guv[0] * fx * iz
            gpy = guv[1] * fy * iz
            if xr >= lox and xr <= hix:
                g_xj = -gJ[0, 2] * fx * iz
                gpx += g_xj * iz
                g_iz += g_xj * p[0]
            if yr >= loy and yr <= hiy:
                g_yj = -gJ[1, 2] * fy * iz
                gpy += g_yj * iz
                g_iz += g_yj * p[1]
            gp = vec3(gpx, gpy, g_depths[c, i] - g_iz * iz * iz)
            gm += wp.transpose(Rc) * gp
            # the view direction from the camera centre
            d = m + wp.transpose(Rc) * tc
            dl = wp.length(d)
            u = d / dl
            gd = g_dirs[c, i]
            gm += (gd - u * wp.dot(u, gd)) / dl
        gquat, gscale = covariance3_vjp(gcov3, q, qn, Rg, M, s)
        g_means[i] = gm
        g_quats[i] = gquat
        g_scales[i] = gscale

    return project_pinhole_backward


def make_projection_backward_kernel(float_t):
    """Hand-written backward of ``project_gaussians`` for every camera model and shutter, in a
    module of its own (no generated adjoints to compile).

    One thread per Gaussian walks the cameras and writes its gradients once (not accumulated), as
    ``make_pinhole_backward_kernel`` does; it gives what Warp's generated adjoint of the projection
    gives, which tests/ops/test_projection_backward.py checks. Per camera, visible pairs only
    (radius > 0; culled pairs carry no gradient), with (R, t) the pose at the line time a:

        p = R m + t,   uv = pi(p),   J = J(p),   depth = p_z (|p| for fisheye / f-theta)
        cov2 = (J R) cov3 (J R)^T + eps I,   conic = cov2^-1,   dir = (m + R^T t) / |m + R^T t|

    Backwards: dL/dcov2 = H = -conic G conic (G: the conic gradient as a symmetric matrix), then
    dL/dcov3 = (J R)^T H (J R) and dL/d(J R) = 2 H (J R) cov3, split into dL/dJ = 2 H J R cov3 R^T
    and dL/dR = 2 J^T H J R cov3. dL/dp = dpi/dp^T dL/duv + <dL/dJ, dJ/dp> + dL/ddepth ddepth/dp,
    where dJ/dp holds the models' second derivatives (``perspective_vjp``, ``radial_angle_vjp``).
    The perspective models take J at the point clamped to the view (``view_bounds``): no J-gradient
    flows through a clamped coordinate.

    Rolling shutter: a = clamp(frac(pi(p0)), 0, 1) with p0 = R(1/2) m + t(1/2), and (R, t) = pose_at(a).
    Then dL/da = <dL/dR, dR/da> + <dL/dt, t1 - t0> with dL/dR and dL/dt collected from the conic,
    from p = R m + t (dL/dp m^T, dL/dp) and from the view direction's centre -R^T t; dR/da comes
    through the quaternion's rate (``pose_rate``). dL/da reaches m through d frac/duv, dpi/dp0 and
    R(1/2) where the clamp passes it (frac in [0, 1), as Warp's clamp adjoint). Quaternions get the
    gradient of the unnormalised input: (g - q <q, g>) / |q| with q the unit quaternion.
    """
    module = variant_module(__name__, float_t, "backward", enable_backward=False)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    vec16 = wp.types.vector(16, float_t)
    mat22 = wp.types.matrix((2, 2), float_t)
    mat23 = wp.types.matrix((2, 3), float_t)
    mat33 = wp.types.matrix((3, 3), float_t)
    to_quat, pose_at = make_pose_funcs(float_t)
    pose_rate = make_pose_rate_func(float_t)
    _, rotation_wxyz_vjp = make_rotation_funcs(float_t)
    covariance3, cov2_vjp, covariance3_vjp = make_covariance_vjp_funcs(float_t)
    view_bounds = make_view_bounds(float_t)
    opencv_radial, opencv_jacobian, _, project_point, line_fraction = make_camera_funcs(float_t)
    zero = float_t(0.0)
    half = float_t(0.5)
    one = float_t(1.0)
    two = float_t(2.0)

    @wp.func(module=module)
    def opencv_jacobian_vjp(k: vec16, x: float_t, y: float_t, G: mat22):
        """Gradient in (x, y) of <G, opencv_jacobian(k, x, y)>: the distortion's second derivatives,
        with rho(r2) the radial factor and rho'' = (A'' - 2 rho' B' - rho B'') / B for rho = A / B."""
        r2 = x * x + y * y
        rho, d1 = opencv_radial(k, r2)
        b = one + r2 * (k[7] + r2 * (k[8] + r2 * k[9]))
        db = k[7] + r2 * (two * k[8] + float_t(3.0) * r2 * k[9])
        dda = two * k[5] + float_t(6.0) * r2 * k[6]
        ddb = two * k[8] + float_t(6.0) * r2 * k[9]
        d2 = (dda - two * d1 * db - rho * ddb) / b
        p1 = k[10]
        p2 = k[11]
        # D = [[rho + 2 x^2 rho' + 2 p1 y + 6 p2 x, e], [e, rho + 2 y^2 rho' + 6 p1 y + 2 p2 x]],
        # e = 2 x y rho' + 2 p1 x + 2 p2 y
        g_e = G[0, 1] + G[1, 0]
        de_dx = two * y * d1 + float_t(4.0) * x * x * y * d2 + two * p1
        de_dy = two * x * d1 + float_t(4.0) * x * y * y * d2 + two * p2
        gx = (G[0, 0] * (float_t(6.0) * x * d1 + float_t(4.0) * x * x * x * d2 + float_t(6.0) * p2) + g_e * de_dx
              + G[1, 1] * de_dy)
        gy = (G[0, 0] * de_dx + g_e * de_dy
              + G[1, 1] * (float_t(6.0) * y * d1 + float_t(4.0) * y * y * y * d2 + float_t(6.0) * p1))
        return gx, gy

    @wp.func(module=module)
    def perspective_vjp(model: int, k: vec16, p: vec3, near: float_t, width: int, height: int, g_uv: vec2,
                        g_J: mat23):
        """Gradient in p of <g_uv, uv(p)> + <g_J, J(p)> for the pinhole and OpenCV models, as
        ``project_point`` computes them: uv = F d(x_n, y_n) + c at the point itself (d: the
        distortion, the identity for the pinhole), J = F D(x_j, y_j) P at the clamped point, with
        (x_n, y_n) = (p_x, p_y) / z and P = [[1/z, 0, -x_j / z], [0, 1/z, -y_j / z]]. z is held at
        ``near`` below it, as in ``perspective`` (the line-fraction pass meets such points)."""
        z = p[2]
        z_moves = True
        if z <= near:
            z = near
            z_moves = False
        iz = one / z
        xn = p[0] * iz
        yn = p[1] * iz
        x_lo, x_hi, y_lo, y_hi = view_bounds(k, width, height)
        xj = wp.clamp(xn, x_lo, x_hi)
        yj = wp.clamp(yn, y_lo, y_hi)
        fx = k[0]
        fy = k[1]
        g_xn = fx * g_uv[0]
        g_yn = fy * g_uv[1]
        g_P = mat23(fx * g_J[0, 0], fx * g_J[0, 1], fx * g_J[0, 2], fy * g_J[1, 0], fy * g_J[1, 1], fy * g_J[1, 2])
        g_xj = zero
        g_yj = zero
        if model == MODEL_OPENCV:
            Dn = opencv_jacobian(k, xn, yn)  # uv's derivative, at the point itself
            g_xd = g_xn
            g_xn = Dn[0, 0] * g_xd + Dn[1, 0] * g_yn
            g_yn = Dn[0, 1] * g_xd + Dn[1, 1] * g_yn
            P = mat23(iz, zero, -xj * iz, zero, iz, -yj * iz)
            g_xj, g_yj = opencv_jacobian_vjp(k, xj, yj, g_P * wp.transpose(P))  # dL/dD = F^T g_J P^T
            g_P = wp.transpose(opencv_jacobian(k, xj, yj)) * g_P  # dL/dP = D^T F^T g_J
        g_iz = g_P[0, 0] + g_P[1, 1] - g_P[0, 2] * xj - g_P[1, 2] * yj
        g_xj -= g_P[0, 2] * iz
        g_yj -= g_P[1, 2] * iz
        # Warp's clamp passes its gradient on [lo, hi): a clamped coordinate carries none
        if xn >= x_lo and xn < x_hi:
            g_xn += g_xj
        if yn >= y_lo and yn < y_hi:
            g_yn += g_yj
        g_iz += g_xn * p[0] + g_yn * p[1]
        g_z = zero
        if z_moves:
            g_z = -g_iz * iz * iz
        return vec3(g_xn * iz, g_yn * iz, g_z)

    @wp.func(module=module)
    def radial_angle_vjp(model: int, k: vec16, p: vec3, g_uv: vec2, g_J: mat23):
        """Gradient in p of <g_uv, uv(p)> + <g_J, J(p)> for the fisheye and f-theta models, through
        every intermediate of ``project_radial_angle``: uv = F s (x, y) + c with s = f(theta) / r,
        r = |(x, y)|, theta = atan2(r, z), and J built from s, ds/dr, ds/dz and (x, y) / r. J holds
        f'(theta), so its gradient needs f''(theta)."""
        x = p[0]
        y = p[1]
        z = p[2]
        r = wp.sqrt(x * x + y * y)
        theta = wp.atan2(r, z)
        f = zero
        df = zero
        d2f = zero
        if model == MODEL_OPENCV_FISHEYE:
            t2 = theta * theta
            f = theta * (one + t2 * (k[4] + t2 * (k[5] + t2 * (k[6] + t2 * k[7]))))
            df = one + t2 * (float_t(3.0) * k[4] + t2 * (float_t(5.0) * k[5]
                                                      + t2 * (float_t(7.0) * k[6] + t2 * float_t(9.0) * k[7])))
            d2f = theta * (float_t(6.0) * k[4] + t2 * (float_t(20.0) * k[5]
                                                     + t2 * (float_t(42.0) * k[6] + t2 * float_t(72.0) * k[7])))
        else:
            f = k[4] + theta * (k[5] + theta * (k[6] + theta * (k[7] + theta * (k[8] + theta * k[9]))))
            df = k[5] + theta * (two * k[6] + theta * (float_t(3.0) * k[7]
                                                     + theta * (float_t(4.0) * k[8] + theta * float_t(5.0) * k[9])))
            d2f = two * k[6] + theta * (float_t(6.0) * k[7] + theta * (float_t(12.0) * k[8]
                                                                       + theta * float_t(20.0) * k[9]))
        fx = k[0]
        fy = k[1]
        rr = r * r + z * z
        main = r > float_t(1e-9) * wp.abs(z) + float_t(1e-20)  # the forward's branch
        s = zero
        ds_dr = zero
        ds_dz = zero
        if main:
            s = f / r
            ds_dr = (df * z / rr * r - f) / (r * r)
            ds_dz = df * (-r / rr) / r
        else:
            s = df / z
            ds_dz = -df / (z * z)
        dxr = zero
        dyr = zero
        if r > zero:
            dxr = x / r
            dyr = y / r
        # J = [[fx (s + x ds_dr dxr), fx x ds_dr dyr, fx x ds_dz], [fy y ds_dr dxr, fy (s + y ds_dr dyr), fy y ds_dz]]
        G = g_J
        e_x = fx * G[0, 0] * x + fy * G[1, 0] * y  # what multiplies ds_dr dxr
        e_y = fx * G[0, 1] * x + fy * G[1, 1] * y  # ... ds_dr dyr
        g_s = fx * (G[0, 0] + g_uv[0] * x) + fy * (G[1, 1] + g_uv[1] * y)
        g_dsdr = e_x * dxr + e_y * dyr
        g_dsdz = fx * G[0, 2] * x + fy * G[1, 2] * y
        g_x = fx * (ds_dr * (G[0, 0] * dxr + G[0, 1] * dyr) + G[0, 2] * ds_dz + g_uv[0] * s)
        g_y = fy * (ds_dr * (G[1, 0] * dxr + G[1, 1] * dyr) + G[1, 2] * ds_dz + g_uv[1] * s)
        g_r = zero
        g_z = zero
        g_f = zero
        g_df = zero
        g_rr = zero
        if r > zero:  # dxr = x / r, dyr = y / r
            g_dxr = e_x * ds_dr
            g_dyr = e_y * ds_dr
            g_x += g_dxr / r
            g_y += g_dyr / r
            g_r -= (g_dxr * dxr + g_dyr * dyr) / r
        if main:
            g_f += g_s / r  # s = f / r
            g_r -= g_s * s / r
            # ds_dr = n / r^2 with n = df z r / rr - f
            g_n = g_dsdr / (r * r)
            g_r += g_n * df * z / rr - two * g_dsdr * ds_dr / r
            g_df += g_n * z * r / rr
            g_z += g_n * df * r / rr
            g_rr -= g_n * df * z * r / (rr * rr)
            g_f -= g_n
            # ds_dz = df (-r / rr) / r: the r's cancel
            g_df -= g_dsdz / rr
            g_rr += g_dsdz * df / (rr * rr)
        else:  # s = df / z, ds_dz = -df / z^2
            g_df += g_s / z - g_dsdz / (z * z)
            g_z += -g_s * s / z + two * g_dsdz * df / (z * z * z)
        g_r += two * r * g_rr
        g_z += two * z * g_rr
        g_theta = g_f * df + g_df * d2f
        g_r += g_theta * z / rr  # theta = atan2(r, z)
        g_z -= g_theta * r / rr
        if r > zero:
            g_x += g_r * x / r
            g_y += g_r * y / r
        return vec3(g_x, g_y, g_z)

    @wp.func(module=module)
    def project_point_vjp(model: int, k: vec16, p: vec3, near: float_t, width: int, height: int, g_uv: vec2,
                          g_J: mat23):
        """Gradient in p of <g_uv, uv(p)> + <g_J, J(p)> of ``project_point``."""
        if model == MODEL_PINHOLE or model == MODEL_OPENCV:
            return perspective_vjp(model, k, p, near, width, height, g_uv, g_J)
        return radial_angle_vjp(model, k, p, g_uv, g_J)

    @wp.func(module=module)
    def line_fraction_grad(shutter: int, uv: vec2, width: int, height: int):
        """d line_fraction / d uv: zero where the clamp holds the fraction (outside [0, 1), as
        Warp's clamp adjoint)."""
        rows = float_t(wp.max(height - 1, 1))
        cols = float_t(wp.max(width - 1, 1))
        frac = zero
        d = vec2()
        if shutter == SHUTTER_TOP_TO_BOTTOM:
            frac = uv[1] / rows
            d = vec2(zero, one / rows)
        elif shutter == SHUTTER_BOTTOM_TO_TOP:
            frac = one - uv[1] / rows
            d = vec2(zero, -one / rows)
        elif shutter == SHUTTER_LEFT_TO_RIGHT:
            frac = uv[0] / cols
            d = vec2(one / cols, zero)
        elif shutter == SHUTTER_RIGHT_TO_LEFT:
            frac = one - uv[0] / cols
            d = vec2(-one / cols, zero)
        if frac < zero or frac >= one:
            d = vec2()
        return d

    @wp.kernel(module=module)
    def project_gaussians_backward(
        means: wp.array(dtype=vec3),  # [N] the forward's inputs, as there
        quats: wp.array(dtype=vec4),  # [N] (w, x, y, z), any norm
        scales: wp.array(dtype=vec3),  # [N]
        cam_q0: wp.array(dtype=vec4),  # [C]
        cam_t0: wp.array(dtype=vec3),  # [C]
        cam_q1: wp.array(dtype=vec4),  # [C]
        cam_t1: wp.array(dtype=vec3),  # [C]
        cam_model: wp.array(dtype=int),  # [C]
        cam_params: wp.array(dtype=vec16),  # [C]
        cam_shutter: wp.array(dtype=int),  # [C]
        width: int,
        height: int,
        near: float_t,
        radii: wp.array2d(dtype=wp.int32),  # [C, N] from the forward: 0 = culled
        g_means2d: wp.array2d(dtype=vec2),  # [C, N] dL/d outputs of the forward
        g_conics: wp.array2d(dtype=vec3),
        g_depths: wp.array2d(dtype=float_t),
        g_dirs: wp.array2d(dtype=vec3),
        # outputs [N], written (not accumulated)
        g_means: wp.array(dtype=vec3),
        g_quats: wp.array(dtype=vec4),
        g_scales: wp.array(dtype=vec3),
    ):
        i = wp.tid()
        m = means[i]
        s = scales[i]
        q, qn, Rg, M, cov3 = covariance3(quats[i], s)
        gm = vec3()
        gcov3 = mat33()
        for c in range(radii.shape[0]):
            if radii[c, i] == 0:
                continue
            model = cam_model[c]
            k = cam_params[c]
            shutter = cam_shutter[c]
            q0 = to_quat(cam_q0[c])
            t0 = cam_t0[c]
            q1 = to_quat(cam_q1[c])
            t1 = cam_t1[c]
            # the forward's pose: mid-readout, then (rolling) at the line time of the projection with it
            Rm, tm = pose_at(q0, t0, q1, t1, half)
            R = Rm
            t = tm
            a = half
            p0 = vec3()
            da_duv = vec2()
            if shutter != SHUTTER_GLOBAL:
                p0 = Rm * m + tm
                uv0, J0, ok0 = project_point(model, k, p0, near, width, height)
                a = line_fraction(shutter, uv0, width, height)
                da_duv = line_fraction_grad(shutter, uv0, width, height)
                R, t = pose_at(q0, t0, q1, t1, a)
            p = R * m + t
            uv, J, ok = project_point(model, k, p, near, width, height)
            radial = model == MODEL_OPENCV_FISHEYE or model == MODEL_FTHETA
            A = J * R
            H = cov2_vjp(A, cov3, g_conics[c, i])  # dL/dcov2
            gcov3 += wp.transpose(A) * H * A
            gA = two * H * A * cov3
            g_p = project_point_vjp(model, k, p, near, width, height, g_means2d[c, i], gA * wp.transpose(R))
            if radial:
                g_p += p * (g_depths[c, i] / wp.length(p))
            else:
                g_p[2] += g_depths[c, i]
            gm += wp.transpose(R) * g_p
            # the view direction from the camera centre -R^T t
            d = m + wp.transpose(R) * t
            dl = wp.length(d)
            u = d / dl
            gd = g_dirs[c, i]
            g_d = (gd - u * wp.dot(u, gd)) / dl
            gm += g_d
            if da_duv[0] != zero or da_duv[1] != zero:
                # through the line time: (R, t) = pose_at(a), a = line_fraction(uv(p0))
                g_R = wp.transpose(J) * gA + wp.outer(g_p, m) + wp.outer(t, g_d)
                g_t = g_p + R * g_d
                qa, dqa = pose_rate(q0, q1, a)
                g_a = wp.dot(rotation_wxyz_vjp(qa, g_R), dqa) + wp.dot(g_t, t1 - t0)
                g_p0 = project_point_vjp(model, k, p0, near, width, height, da_duv * g_a, mat23())
                gm += wp.transpose(Rm) * g_p0
        gquat, gscale = covariance3_vjp(gcov3, q, qn, Rg, M, s)
        g_means[i] = gm
        g_quats[i] = gquat
        g_scales[i] = gscale

    return project_gaussians_backward


def make_camera_poses_kernel(float_t):
    """``camera_poses``: the batch's pose quaternions and translations from T_camera_world
    matrices, one thread per camera, in one launch (``nurec_usd.ops.graphed`` runs it
    inside a CUDA graph, where the same conversion in torch is some sixty small kernels)."""
    module = variant_module(__name__, float_t, "poses", enable_backward=False)
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    mat33 = wp.types.matrix((3, 3), float_t)

    @wp.func(module=module)
    def rotation_wxyz(T: wp.array3d(dtype=float_t), c: int):
        R = mat33(T[c, 0, 0], T[c, 0, 1], T[c, 0, 2], T[c, 1, 0], T[c, 1, 1], T[c, 1, 2],
                  T[c, 2, 0], T[c, 2, 1], T[c, 2, 2])
        q = wp.normalize(wp.quat_from_matrix(R))  # Warp's order: (x, y, z, w)
        return vec4(q[3], q[0], q[1], q[2])

    @wp.kernel(module=module)
    def camera_poses(
        T_start: wp.array3d(dtype=float_t),  # [C, 4, 4] T_camera_world at readout start
        T_end: wp.array3d(dtype=float_t),  # [C, 4, 4] ... at readout end
        rot_start: wp.array(dtype=vec4),  # [C] out (w, x, y, z)
        trans_start: wp.array(dtype=vec3),  # [C] out
        rot_end: wp.array(dtype=vec4),  # [C] out, in rot_start's hemisphere (the kernels slerp between them)
        trans_end: wp.array(dtype=vec3),  # [C] out
    ):
        c = wp.tid()
        q0 = rotation_wxyz(T_start, c)
        q1 = rotation_wxyz(T_end, c)
        if wp.dot(q0, q1) < float_t(0.0):
            q1 = -q1
        rot_start[c] = q0
        rot_end[c] = q1
        trans_start[c] = vec3(T_start[c, 0, 3], T_start[c, 1, 3], T_start[c, 2, 3])
        trans_end[c] = vec3(T_end[c, 0, 3], T_end[c, 1, 3], T_end[c, 2, 3])

    return camera_poses


project_gaussians_f32 = make_projection_kernel(wp.float32)
project_gaussians_f64 = make_projection_kernel(wp.float64)
project_pinhole_global_f32 = make_projection_kernel(wp.float32, pinhole_global=True)
project_pinhole_global_f64 = make_projection_kernel(wp.float64, pinhole_global=True)
sh_colors_f32 = make_sh_kernel(wp.float32)
sh_colors_f64 = make_sh_kernel(wp.float64)
project_pinhole_backward_f32 = make_pinhole_backward_kernel(wp.float32)
project_pinhole_backward_f64 = make_pinhole_backward_kernel(wp.float64)
project_gaussians_backward_f32 = make_projection_backward_kernel(wp.float32)
project_gaussians_backward_f64 = make_projection_backward_kernel(wp.float64)
camera_poses_f32 = make_camera_poses_kernel(wp.float32)
camera_poses_f64 = make_camera_poses_kernel(wp.float64)
