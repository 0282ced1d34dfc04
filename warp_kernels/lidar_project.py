"""Projection of 3D Gaussians into a spinning lidar's spherical frame, with rolling shutter.

One thread per Gaussian, one lidar sweep per launch. Each Gaussian becomes a 2D splat in
angle space:

* ``alpha``: azimuth measured from the sweep's start azimuth along the rotation, wrapped
  to [0, 2 pi). In these "sweep coordinates" column k of channel c sits at
  ``2 pi k / W + s * offset[c]`` (s = +1 counterclockwise, -1 clockwise), so the ±180°
  seam of the lidar frame is no special place; the one wrap left (2 pi -> 0, between the
  last and the first column) is handled by the binning (a splat straddling it is binned
  at both ends) and by the rasterizer (azimuth differences are wrapped to [-pi, pi)).
* ``elev``: elevation above the lidar's xy plane, radians.
* the 2D covariance in (alpha, elev), from the 3D covariance through the Jacobian of the
  spherical map (EWA splatting in angle space), plus a beam footprint ``eps`` per axis
  (a fraction of the squared beam spacing, like the camera's 0.3 px^2), inverted to a conic.
* ``range``: the distance of the Gaussian's mean from the sensor. It is the range every
  ray that meets the splat reports for this Gaussian (as the camera uses the mean's depth).
  Alternatives are the distance of the point of maximum response along each ray (as in
  3DGRT) or a ray-plane intersection with the Gaussian's flattest axis: both depend on
  the ray, cost work per (ray, Gaussian) and need more state in the backward, so the
  mean's distance is used.

Rolling shutter: column k fires at fraction ``a = k / W`` of the sweep, and the lidar pose
``T_lidar_world`` moves from the sweep start (a = 0) to its end (a = 1) (slerp + lerp).
Each Gaussian is projected with the pose at its own firing time, found by one
fixed-point step: project with the mid-sweep pose, read the azimuth, hence the column
fraction a, then project again with the pose at a. Moving actors' Gaussians are placed at
their own firing time too: the caller places every Gaussian for the sweep's middle
(``nurec_usd.ops.interpolate``) and may pass its ``motion`` over the sweep (its position at
the sweep's end minus at its start; an empty array: none moves). The Gaussian is then at
``mean + (a - 1/2) motion`` when its column fires: a straight line through the sweep, which
follows an actor that turns within the sweep (a tenth of a second) to first order and keeps its
Gaussians' orientation at the middle. The motion gets no gradient (it comes from the actors' poses).

Two guards keep the angle-space linearisation sane: the Jacobian's elevation is clamped
to the channel elevations plus a margin (the azimuth's derivative grows as 1/cos(elev)
and is infinite straight up), and a Gaussian whose mean lies within NEAR_SIGMAS of its
largest standard deviation of the sensor is culled (the sensor is inside it: no splat
describes that), as are means outside the lidar's [min_range, max_range].

The backward is hand-written (``project_lidar_backward``, in a module of its own): Warp's
generated adjoint of this kernel needs far more registers and a stack frame. Quaternions arrive
as (w, x, y, z) ``vec4`` and become Warp's (x, y, z, w) here.

Outputs per Gaussian: ``splats`` [N] vec8 = (alpha, elev, conic a, conic b, conic c,
range, opacity, intensity), the record the rasterizer stages in shared memory (one 32-byte
gather per Gaussian in float32), and ``extents`` [N] vec2, the half-widths of the splat's
bounding box in (alpha, elev) out to where its alpha falls to ALPHA_MIN; (0, 0) = culled.
Both kernels move the records, the extents, the quaternions and their gradients 16 or 8 bytes
at a time (``warp_kernels.wide_io``; Warp would move them a float at a time), multiply by
constants where they would divide, and compile with fast_math: the forward is bound by its
instructions, so each of these shortens it; the backward waits on its loads, so it reads all of a
Gaussian's inputs before its culling test and runs under launch bounds (BACKWARD_MIN_BLOCKS).
Measurements: benchmarks/RESULTS.md, raster-lidar.
"""

import functools
import math

import warp as wp

from warp_kernels.compositing import ALPHA_MIN
from warp_kernels.modules import variant_module
from warp_kernels.pose_funcs import make_pose_funcs, make_pose_rate_func, make_rotation_funcs
from warp_kernels.wide_io import load_row2, load_row4, load_row8, store_row2, store_row4, store_row8

# The backward is hand-written (below): no generated adjoints to compile. fast_math for the float32
# kernels (the float64 ones, for gradcheck, keep IEEE arithmetic): it drops the IEEE functions' slow
# paths (half the forward's instructions, no stack frame) and leaves the twin checks' differences
# within their bounds. The slerp's sines are then approximate: ``pose_at`` normalises the quaternion
# it interpolates, so that they cannot scale the rotation.
wp.set_module_options({"enable_backward": False, "fast_math": True})

BEAM_EPS = 0.3  # beam footprint variance, in units of the squared beam spacing of each axis
ELEVATION_MARGIN = 0.1  # rad beyond the channel elevations where the Jacobian's elevation is clamped
ELEVATION_LIMIT = 1.45  # rad: the clamp never goes closer than ~7 degrees to the poles
NEAR_SIGMAS = 3.0  # cull a Gaussian whose mean is closer to the sensor than this many of its largest sigma
# The float32 backward's launch: blocks of 128 threads, at least 5 of them per SM (20 warps). Unbounded it
# takes 103 registers, 16 warps per SM, and waits on its loads at low occupancy; bounded, 96 registers and
# a 40-byte stack frame, and faster; 6 blocks per SM spill more and are slower (benchmarks/RESULTS.md,
# raster-lidar). Both kernels run without Warp's grid-stride loop (one thread per Gaussian, as launched):
# the loop's 64-bit indices cost registers in both.
BACKWARD_BLOCK = 128
BACKWARD_MIN_BLOCKS = 5

TWO_PI = 2.0 * math.pi
# products by these where the kernels divided by constants (one instruction where a division takes several)
INV_TWO_PI = 1.0 / TWO_PI
INV_ALPHA_MIN = 1.0 / ALPHA_MIN


@functools.lru_cache(maxsize=None)
def make_firing_fraction(float_t):
    """``firing_fraction``: where in the sweep a point fires, shared by the forward and the backward."""
    vec3 = wp.types.vector(3, float_t)

    @wp.func
    def firing_fraction(p0: vec3, sign: float_t, start: float_t):
        """(a, moves): the sweep fraction in [0, 1] at which the column at lidar-frame p0's azimuth
        fires, and whether a moves with p0 (not on the lidar's axis, where it is held at 1/2 since
        atan2(0, 0) has no derivative, and not clamped at 1)."""
        a = float_t(0.5)
        moves = int(0)
        if p0[0] * p0[0] + p0[1] * p0[1] > float_t(1e-20):
            u = sign * (wp.atan2(p0[1], p0[0]) - start) * float_t(INV_TWO_PI)
            a = u - wp.floor(u)
            if a < float_t(1.0):
                moves = 1
            a = wp.min(a, float_t(1.0))
        return a, moves

    return firing_fraction


@functools.lru_cache(maxsize=None)
def make_jacobian_angles(float_t):
    """``jacobian_angles``: the angles' sines and cosines the Jacobian uses, shared by the forward and
    the backward."""
    vec3 = wp.types.vector(3, float_t)

    @wp.func
    def jacobian_angles(p: vec3, rho: float_t, ir: float_t, elev: float_t, clamp_lo: float_t, clamp_hi: float_t):
        """(cos, sin) of lidar-frame p's azimuth and (cos, sin) of its elevation clamped to [clamp_lo,
        clamp_hi] (rho = |p_xy|, ir = 1 / |p|): the point's own ratios, trigonometry only where clamped,
        which is cheaper than evaluating the sines and cosines (benchmarks/RESULTS.md, raster-lidar)."""
        cth = rho * ir
        sth = p[2] * ir
        if elev < clamp_lo or elev > clamp_hi:
            thc = wp.clamp(elev, clamp_lo, clamp_hi)
            cth = wp.cos(thc)
            sth = wp.sin(thc)
        irho = float_t(1.0) / rho
        return p[0] * irho, p[1] * irho, cth, sth

    return jacobian_angles


def make_projection_kernel(float_t):
    """The lidar projection kernel for one float type (float32 for speed, float64 for gradcheck)."""
    # float64 kernels compile apart (warp_kernels.modules), without fast_math
    module = variant_module(__name__, float_t, fast_math=False)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    vec8 = wp.types.vector(8, float_t)
    mat23 = wp.types.matrix((2, 3), float_t)

    to_quat, pose_at = make_pose_funcs(float_t)
    firing_fraction = make_firing_fraction(float_t)
    jacobian_angles = make_jacobian_angles(float_t)

    @wp.func(module=module)
    def cull(splats: wp.array(dtype=vec8), extents: wp.array(dtype=vec2), i: int):
        """A culled Gaussian's outputs: zeros (written here rather than by a fill of the whole output)."""
        store_row8(splats, i, vec8())
        store_row2(extents, i, vec2(float_t(0.0), float_t(0.0)))

    @wp.kernel(module=module, grid_stride=False)
    def project_lidar(
        means: wp.array(dtype=vec3),  # [N] world
        quats: wp.array(dtype=vec4),  # [N] (w, x, y, z), any norm
        scales: wp.array(dtype=vec3),  # [N] linear standard deviations
        opacities: wp.array(dtype=float_t),  # [N] in [0, 1]
        intensities: wp.array(dtype=float_t),  # [N] per-Gaussian return intensity
        motion: wp.array(dtype=vec3),  # [N] world, position at the sweep's end minus at its start; or empty
        rot_start: wp.array(dtype=vec4),  # [1] T_lidar_world rotation (w, x, y, z) at the sweep start
        trans_start: wp.array(dtype=vec3),  # [1]
        rot_end: wp.array(dtype=vec4),  # [1] ... at the sweep end, same hemisphere as rot_start
        trans_end: wp.array(dtype=vec3),  # [1]
        sign: float_t,  # +1 counterclockwise, -1 clockwise
        start_azimuth: float_t,  # rad, azimuth of column 0
        min_range: float_t,
        max_range: float_t,
        clamp_lo: float_t,  # rad, elevation interval of the Jacobian (channels plus a margin)
        clamp_hi: float_t,
        elev_lo: float_t,  # rad, lowest channel elevation
        elev_hi: float_t,  # rad, highest channel elevation
        eps_az: float_t,  # rad^2 added to the azimuth variance (beam footprint)
        eps_el: float_t,  # rad^2 added to the elevation variance
        # outputs, [N]
        splats: wp.array(dtype=vec8),  # (alpha, elev, conic a, b, c, range, opacity, intensity)
        extents: wp.array(dtype=vec2),  # half-widths in (alpha, elev); (0, 0) = culled
    ):
        i = wp.tid()
        # every read of the Gaussian first, ahead of the culling branches: one wait for memory, not three
        mean = means[i]
        s = scales[i]
        op = opacities[i]
        qv = load_row4(quats, i)
        intensity = intensities[i]
        dm = vec3()
        if motion.shape[0] > 0:
            dm = motion[i]
        q0 = to_quat(rot_start[0])
        q1 = to_quat(rot_end[0])
        t0 = trans_start[0]
        t1 = trans_end[0]

        # The pose, and the Gaussian's place, at its own firing time: one fixed-point step from
        # mid-sweep, where the Gaussian is at its mean.
        R, t = pose_at(q0, t0, q1, t1, float_t(0.5))
        a, _moves = firing_fraction(R * mean + t, sign, start_azimuth)
        R, t = pose_at(q0, t0, q1, t1, a)
        p = R * (mean + (a - float_t(0.5)) * dm) + t

        rho2 = p[0] * p[0] + p[1] * p[1]
        r = wp.sqrt(rho2 + p[2] * p[2])
        # culled: out of range, the sensor inside the Gaussian, too faint to reach ALPHA_MIN
        if (r <= min_range or r > max_range or rho2 <= float_t(0.0)
                or r < float_t(NEAR_SIGMAS) * wp.max(s[0], wp.max(s[1], s[2])) or op <= float_t(ALPHA_MIN)):
            cull(splats, extents, i)
            return
        # alpha = opacity exp(-d^2 / 2) reaches ALPHA_MIN at d^2 = 2 ln(opacity / ALPHA_MIN)
        reach = float_t(2.0) * wp.log(op * float_t(INV_ALPHA_MIN))

        rho = wp.sqrt(rho2)
        phi = wp.atan2(p[1], p[0])
        elev = wp.atan2(p[2], rho)
        az = sign * (phi - start_azimuth)  # the sweep azimuth, in [0, 2 pi]
        az = az - float_t(TWO_PI) * wp.floor(az * float_t(INV_TWO_PI))
        # Jacobian of (sign * azimuth, elevation) at the point with its elevation clamped
        ir = float_t(1.0) / r
        cph, sph, cth, sth = jacobian_angles(p, rho, ir, elev, clamp_lo, clamp_hi)
        ka = sign * ir / cth
        J = mat23(-sph * ka, cph * ka, float_t(0.0),
                  -sth * cph * ir, -sth * sph * ir, cth * ir)

        Rg = wp.quat_to_matrix(wp.normalize(to_quat(qv)))
        M = Rg * wp.diag(s)
        JW = J * R
        JM = JW * M
        cov2 = JM * wp.transpose(JM)
        a2 = cov2[0, 0] + eps_az
        b2 = cov2[0, 1]
        c2 = cov2[1, 1] + eps_el
        det = a2 * c2 - b2 * b2
        ext_el = wp.sqrt(reach * c2)
        if det <= float_t(0.0) or elev + ext_el < elev_lo or elev - ext_el > elev_hi:
            cull(splats, extents, i)  # degenerate, or above or below every beam
            return
        inv_det = float_t(1.0) / det
        store_row8(splats, i, vec8(az, elev, c2 * inv_det, -b2 * inv_det, a2 * inv_det, r, op, intensity))
        store_row2(extents, i, vec2(wp.sqrt(reach * a2), ext_el))

    return project_lidar


def make_projection_backward_kernel(float_t, moving: bool = False):
    """Hand-written backward of ``project_lidar`` (one float type; ``moving``: for Gaussians with a
    motion, compiled apart so that the static kernel keeps its registers).

    One thread per Gaussian replays the forward and writes its gradients (not accumulated);
    Warp's generated adjoint of the projection needs far more registers and a stack. Backwards from
    the record's gradient: the conic through dL/dcov2 = -conic G conic (G: the conic gradient
    as a symmetric matrix), cov2 = (J R) M M^T (J R)^T with M = Rg diag(s); J through the
    azimuth, the clamped elevation and 1/r; the angles and the range through p = R m + t. The
    rolling shutter makes (R, t) the pose at the firing fraction a, itself a function of the
    mean (the azimuth of p0 = R(1/2) m + t(1/2)), and so does the Gaussian's place m + (a - 1/2) v
    (v: its motion): dL/da = <dL/dR, dR/da> + <dL/dp, t1 - t0 + R v>, passed on to m through p0.
    Culled Gaussians (zero extents) get zero gradients, as their records are zero.
    """
    # float32 with fast_math (approximate division, square root, sine and cosine), as the forward:
    # much faster, with the twin checks within their bounds. All of a Gaussian's inputs are read
    # before the culling test (one wait for memory instead of two). The motion's terms would enlarge
    # the bounded float32 kernel's stack frame and slow it for every Gaussian, moving or not, so the
    # kernel for moving Gaussians is a variant of its own (benchmarks/RESULTS.md, raster-lidar).
    module = variant_module(__name__, float_t, "backward_moving" if moving else "backward",
                            fast_math=float_t == wp.float32)
    vec2 = wp.types.vector(2, float_t)
    vec3 = wp.types.vector(3, float_t)
    vec4 = wp.types.vector(4, float_t)
    vec8 = wp.types.vector(8, float_t)
    mat22 = wp.types.matrix((2, 2), float_t)
    mat23 = wp.types.matrix((2, 3), float_t)
    mat33 = wp.types.matrix((3, 3), float_t)
    to_quat, pose_at = make_pose_funcs(float_t)
    rotation_wxyz, rotation_wxyz_vjp = make_rotation_funcs(float_t)
    pose_rate = make_pose_rate_func(float_t)
    firing_fraction = make_firing_fraction(float_t)
    jacobian_angles = make_jacobian_angles(float_t)
    zero = float_t(0.0)
    one = float_t(1.0)
    two = float_t(2.0)
    two_pi = float_t(TWO_PI)

    @wp.func(module=module)
    def azimuth_grad(p: vec3, g: float_t):
        """g times the gradient in p of atan2(p_y, p_x)."""
        inv = g / (p[0] * p[0] + p[1] * p[1])
        return vec3(-p[1] * inv, p[0] * inv, zero)

    @wp.kernel(module=module, grid_stride=False,
               launch_bounds=(BACKWARD_BLOCK, BACKWARD_MIN_BLOCKS) if float_t == wp.float32 else None)
    def project_lidar_backward(
        means: wp.array(dtype=vec3),  # [N] the forward's inputs, as there
        quats: wp.array(dtype=vec4),  # [N]
        scales: wp.array(dtype=vec3),  # [N]
        motion: wp.array(dtype=vec3),  # [N] (read by the moving variant only)
        rot_start: wp.array(dtype=vec4),  # [1]
        trans_start: wp.array(dtype=vec3),  # [1]
        rot_end: wp.array(dtype=vec4),  # [1]
        trans_end: wp.array(dtype=vec3),  # [1]
        sign: float_t,
        start_azimuth: float_t,
        clamp_lo: float_t,
        clamp_hi: float_t,
        eps_az: float_t,
        eps_el: float_t,
        extents: wp.array(dtype=vec2),  # [N] the forward's half-widths ((0, 0): culled; 8 bytes a Gaussian,
        # where the records are 32: the kernel reads nothing else from the forward)
        g_splats: wp.array(dtype=vec8),  # [N] dL/d records
        # outputs [N], written (not accumulated)
        g_means: wp.array(dtype=vec3),
        g_quats: wp.array(dtype=vec4),
        g_scales: wp.array(dtype=vec3),
        g_opacities: wp.array(dtype=float_t),
        g_intensities: wp.array(dtype=float_t),
    ):
        i = wp.tid()
        # every read of the Gaussian first, ahead of the culling branch: one wait for memory, not two
        culled = load_row2(extents, i)[0] <= zero
        g = load_row8(g_splats, i)
        mean = means[i]
        qv = load_row4(quats, i)
        s = scales[i]
        if culled:  # the record is zeros and carries no gradient
            g_means[i] = vec3()
            store_row4(g_quats, i, vec4())
            g_scales[i] = vec3()
            g_opacities[i] = zero
            g_intensities[i] = zero
            return
        g_opacities[i] = g[6]
        g_intensities[i] = g[7]
        q0 = to_quat(rot_start[0])
        q1 = to_quat(rot_end[0])
        t0 = trans_start[0]
        t1 = trans_end[0]
        # the forward's firing fraction a (one fixed-point step from mid-sweep)
        Rm, tm = pose_at(q0, t0, q1, t1, float_t(0.5))
        p0 = Rm * mean + tm
        a, a_moves = firing_fraction(p0, sign, start_azimuth)
        qa, dqa = pose_rate(q0, q1, a)
        R = rotation_wxyz(qa)
        placed = mean  # where the Gaussian is when its column fires
        if wp.static(moving):
            placed = mean + (a - float_t(0.5)) * motion[i]
        p = R * placed + t0 * (one - a) + t1 * a
        rho2 = p[0] * p[0] + p[1] * p[1]
        rho = wp.sqrt(rho2)
        r = wp.sqrt(rho2 + p[2] * p[2])
        elev = wp.atan2(p[2], rho)
        ir = one / r
        cph, sph, cth, sth = jacobian_angles(p, rho, ir, elev, clamp_lo, clamp_hi)
        ka = sign * ir / cth
        J = mat23(-sph * ka, cph * ka, zero, -sth * cph * ir, -sth * sph * ir, cth * ir)
        qn = wp.length(qv)
        qu = qv / qn
        Rg = rotation_wxyz(qu)
        M = Rg * wp.diag(s)
        JW = J * R
        JM = JW * M
        cov2 = JM * wp.transpose(JM)
        a2 = cov2[0, 0] + eps_az
        b2 = cov2[0, 1]
        c2 = cov2[1, 1] + eps_el
        inv = one / (a2 * c2 - b2 * b2)
        conic = mat22(c2 * inv, -b2 * inv, -b2 * inv, a2 * inv)
        half = float_t(0.5)
        G = mat22(g[2], half * g[3], half * g[3], g[4])
        H = -(conic * G * conic)  # dL/dcov2 (symmetric)
        g_JM = two * H * JM
        g_M = wp.transpose(JW) * g_JM
        g_JW = g_JM * wp.transpose(M)
        g_J = g_JW * wp.transpose(R)
        g_R = wp.transpose(J) * g_JW
        # M = Rg diag(s)
        g_Rg = mat33(g_M[0, 0] * s[0], g_M[0, 1] * s[1], g_M[0, 2] * s[2],
                     g_M[1, 0] * s[0], g_M[1, 1] * s[1], g_M[1, 2] * s[2],
                     g_M[2, 0] * s[0], g_M[2, 1] * s[1], g_M[2, 2] * s[2])
        g_scales[i] = vec3(g_M[0, 0] * Rg[0, 0] + g_M[1, 0] * Rg[1, 0] + g_M[2, 0] * Rg[2, 0],
                           g_M[0, 1] * Rg[0, 1] + g_M[1, 1] * Rg[1, 1] + g_M[2, 1] * Rg[2, 1],
                           g_M[0, 2] * Rg[0, 2] + g_M[1, 2] * Rg[1, 2] + g_M[2, 2] * Rg[2, 2])
        gq_unit = rotation_wxyz_vjp(qu, g_Rg)
        store_row4(g_quats, i, (gq_unit - qu * wp.dot(qu, gq_unit)) / qn)
        # J = [[-sph ka, cph ka, 0], [-sth cph ir, -sth sph ir, cth ir]], ka = sign ir / cth
        g_ka = -g_J[0, 0] * sph + g_J[0, 1] * cph
        g_sph = -g_J[0, 0] * ka - g_J[1, 1] * sth * ir
        g_cph = g_J[0, 1] * ka - g_J[1, 0] * sth * ir
        g_sth = -(g_J[1, 0] * cph + g_J[1, 1] * sph) * ir
        g_cth = g_J[1, 2] * ir - g_ka * ka / cth
        g_ir = -(g_J[1, 0] * cph + g_J[1, 1] * sph) * sth + g_J[1, 2] * cth + g_ka * sign / cth
        g_phi = g_sph * cph - g_cph * sph + sign * g[0]  # the record's azimuth: sign * phi, wrapped
        g_elev = g[1]
        if elev >= clamp_lo and elev <= clamp_hi:
            g_elev += g_sth * cth - g_cth * sth
        g_r = g[5] - g_ir * ir * ir
        # phi = atan2(p_y, p_x), elev = atan2(p_z, rho), r = |p|
        ir2 = ir * ir
        g_p = p * (g_r * ir) + azimuth_grad(p, g_phi) + vec3(-p[2] * p[0] / rho, -p[2] * p[1] / rho, rho) * (g_elev * ir2)
        gm = wp.transpose(R) * g_p
        if a_moves != 0:
            # through the firing fraction: p = R(a) (m + (a - 1/2) v) + t(a), a = sweep azimuth of p0 / 2 pi
            g_R += wp.outer(g_p, placed)
            dp_da = t1 - t0
            if wp.static(moving):
                dp_da += R * motion[i]
            g_a = wp.dot(rotation_wxyz_vjp(qa, g_R), dqa) + wp.dot(g_p, dp_da)
            gm += wp.transpose(Rm) * azimuth_grad(p0, sign * g_a / two_pi)
        g_means[i] = gm

    return project_lidar_backward


project_lidar_f32 = make_projection_kernel(wp.float32)
project_lidar_f64 = make_projection_kernel(wp.float64)
project_lidar_backward_f32 = make_projection_backward_kernel(wp.float32)
project_lidar_backward_f64 = make_projection_backward_kernel(wp.float64)
project_lidar_backward_moving_f32 = make_projection_backward_kernel(wp.float32, moving=True)
project_lidar_backward_moving_f64 = make_projection_backward_kernel(wp.float64, moving=True)
