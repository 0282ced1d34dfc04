"""Ray casting of the procedural driving scene (``nurec_usd.synth``): cameras and a spinning lidar.

One Warp module (one compile) holding everything the generator runs on the device:

* pose interpolation at each ray's own time (slerp + lerp between keys on a uniform key grid,
  the same rule as ``nurec_usd.sensors.interpolate_poses``), so rolling-shutter rows and lidar
  columns see the ego and the actors where they are at that instant;
* closest-hit tracing against the static ``wp.Mesh`` (world frame) and one ``wp.Mesh`` per actor,
  built in the actor's own box frame: each ray is moved into the box frame with the actor pose at
  the ray's time;
* procedural, footprint-filtered textures (asphalt with lane markings, paving, kerbs, brick,
  plaster and glass facades with windows and shop signs, foliage, car paint, ...), a sky with
  sun and clouds, sun light with shadow rays and sky ambient, per-camera exposure;
* the lidar: material reflectivity as intensity, Gaussian range noise and dropped returns drawn
  from Warp's counter-based RNG keyed by the ray's global index (independent of scheduling).

Conventions: ``wp.transform`` is (p, q) with ``wp.quat`` in (x, y, z, w) order; the host converts
from the project's (w, x, y, z) before upload. Texture coordinates are metres on the surface.
No torch and no I/O here.
"""

from __future__ import annotations

import warp as wp

# Hand-written kernels with no gradients: skipping the adjoints halves the compile time.
wp.set_module_options({"enable_backward": False})

# Material kinds; nurec_usd.synth.materials mirrors these numbers.
K_ASPHALT = wp.constant(1)
K_CROSSWALK = wp.constant(2)
K_SIDEWALK = wp.constant(3)
K_KERB = wp.constant(4)
K_GRASS = wp.constant(5)
K_BRICK = wp.constant(6)
K_PLASTER = wp.constant(7)
K_GLASS = wp.constant(8)
K_ROOF = wp.constant(9)
K_METAL = wp.constant(10)
K_SIGN = wp.constant(11)
K_FOLIAGE = wp.constant(12)
K_BARK = wp.constant(13)
K_PAINT = wp.constant(14)
K_CAR_FRONT = wp.constant(15)
K_CAR_REAR = wp.constant(16)
K_CAR_GLASS = wp.constant(17)
K_TYRE = wp.constant(18)
K_CLOTH = wp.constant(19)
K_CONCRETE = wp.constant(20)

# Shadow rays start this far off the surface (metres), clear of float32 self-intersection.
SHADOW_EPS = wp.constant(0.02)


@wp.struct
class SynthScene:
    """Everything a ray needs: meshes, poses over time, materials, light."""

    static_mesh: wp.uint64
    actor_meshes: wp.array(dtype=wp.uint64)  # [A]
    actor_key_start: wp.array(dtype=wp.int32)  # [A] index of the actor's first key on the key grid
    actor_key_count: wp.array(dtype=wp.int32)  # [A]
    actor_key_offset: wp.array(dtype=wp.int32)  # [A] offset of the actor's keys in actor_keys
    actor_face_offset: wp.array(dtype=wp.int32)  # [A] offset of the actor's faces in the face tables
    actor_keys: wp.array(dtype=wp.transform)  # [sum K] T_world_box
    num_actors: wp.int32
    rig_keys: wp.array(dtype=wp.transform)  # [K] T_world_rig on the key grid
    key_rate: wp.float32  # keys per second; key k is at k / key_rate seconds
    face_material: wp.array(dtype=wp.int32)  # [F] static faces, then each actor's
    face_uv: wp.array(dtype=wp.vec2)  # [F * 3] per-corner texture coordinates (metres)
    face_normal: wp.array(dtype=wp.vec3)  # [F * 3] per-corner shading normals (mesh frame)
    mat_kind: wp.array(dtype=wp.int32)  # [M]
    mat_color_a: wp.array(dtype=wp.vec3)  # [M] main colour (linear)
    mat_color_b: wp.array(dtype=wp.vec3)  # [M] second colour (mortar, frames, signs, ...)
    mat_params: wp.array(dtype=wp.vec4)  # [M] kind-specific
    mat_params2: wp.array(dtype=wp.vec4)  # [M] kind-specific
    mat_lidar: wp.array(dtype=wp.float32)  # [M] lidar reflectivity of the base material
    sun_dir: wp.vec3  # unit, towards the sun
    sun_color: wp.vec3
    ambient: wp.vec3  # sky light on an upward surface
    zenith: wp.vec3
    horizon: wp.vec3
    max_dist: wp.float32


@wp.struct
class CameraParams:
    """One camera: mounting, exposure and the texture filter width."""

    T_rig_cam: wp.transform
    exposure: wp.float32
    white_balance: wp.vec3
    pixel_angle: wp.float32  # radians per sample spacing, for texture filtering
    vignette: wp.float32


@wp.struct
class Hit:
    dist: wp.float32
    face: wp.int32  # global face index (static faces first), -1: nothing hit
    u: wp.float32
    v: wp.float32
    normal: wp.vec3  # geometric normal, world frame, not yet oriented towards the ray
    rot: wp.quat  # mesh frame -> world (identity for the static mesh), for the shading normals
    actor: wp.int32  # -1: static scene


@wp.struct
class Surface:
    albedo: wp.vec3
    mirror: wp.float32  # fraction of sky reflection (glass, paint)
    emission: wp.vec3
    lidar: wp.float32  # reflectivity seen by the lidar


# ---------------------------------------------------------------------------------------------
# hashing and noise (integer hashes, so patterns do not depend on float rounding of big numbers)


@wp.func
def _mix(x: wp.uint32) -> wp.uint32:
    x = x ^ (x >> wp.uint32(16))
    x = x * wp.uint32(0x7FEB352D)
    x = x ^ (x >> wp.uint32(15))
    x = x * wp.uint32(-2073254261)  # 0x846CA68B as int32
    x = x ^ (x >> wp.uint32(16))
    return x


@wp.func
def hash3(a: int, b: int, c: int) -> float:
    """Uniform in [0, 1) from three integers."""
    # -1640531527 is 0x9E3779B9 written as an int32 (Warp types integer literals as int32)
    h = _mix(wp.uint32(a) ^ _mix(wp.uint32(b) ^ _mix(wp.uint32(c) + wp.uint32(-1640531527))))
    return float(h >> wp.uint32(8)) * (1.0 / 16777216.0)


@wp.func
def ifloor(x: float) -> int:
    return int(wp.floor(x))


@wp.func
def fmod_pos(x: float, period: float) -> float:
    return x - period * wp.floor(x / period)


@wp.func
def vnoise(p: wp.vec2, seed: int) -> float:
    """Smooth value noise in [0, 1) with unit lattice spacing."""
    fx = wp.floor(p[0])
    fy = wp.floor(p[1])
    ix = int(fx)
    iy = int(fy)
    tx = p[0] - fx
    ty = p[1] - fy
    sx = tx * tx * (3.0 - 2.0 * tx)
    sy = ty * ty * (3.0 - 2.0 * ty)
    a = hash3(ix, iy, seed)
    b = hash3(ix + 1, iy, seed)
    c = hash3(ix, iy + 1, seed)
    d = hash3(ix + 1, iy + 1, seed)
    return wp.lerp(wp.lerp(a, b, sx), wp.lerp(c, d, sx), sy)


@wp.func
def fbm(p: wp.vec2, fw: float, seed: int, octaves: int) -> float:
    """Fractal value noise in [0, 1); octaves finer than the footprint ``fw`` fade to their mean."""
    total = float(0.0)
    norm = float(0.0)
    amp = float(1.0)
    freq = float(1.0)
    for k in range(octaves):
        a = wp.clamp(1.5 - 2.0 * fw * freq, 0.0, 1.0)
        n = vnoise(p * freq, seed + k * 7919)
        total += amp * (a * n + (1.0 - a) * 0.5)
        norm += amp
        amp *= 0.5
        freq *= 2.0
    return total / norm


@wp.func
def speckle(p: wp.vec2, cell: float, fw: float, seed: int) -> float:
    """Per-cell random value in [-0.5, 0.5); fades to 0 once cells are smaller than the footprint."""
    fade = wp.clamp(1.0 - fw / cell, 0.0, 1.0)
    if fade <= 0.0:
        return 0.0
    return (hash3(ifloor(p[0] / cell), ifloor(p[1] / cell), seed) - 0.5) * fade


@wp.func
def _pulse_integral(x: float, period: float, width: float) -> float:
    c = wp.floor(x / period)
    return c * width + wp.min(x - c * period, width)


@wp.func
def fpulse(x: float, period: float, width: float, fw: float) -> float:
    """Coverage of [x - fw/2, x + fw/2] by pulses [k period, k period + width): box-filtered stripes."""
    if fw < 1.0e-4 * period:
        if x - period * wp.floor(x / period) < width:
            return 1.0
        return 0.0
    hi = _pulse_integral(x + 0.5 * fw, period, width)
    lo = _pulse_integral(x - 0.5 * fw, period, width)
    return wp.clamp((hi - lo) / fw, 0.0, 1.0)


@wp.func
def fline(x: float, period: float, width: float, fw: float) -> float:
    """Stripes of ``width`` centred on multiples of ``period`` (mortar, joints, grout)."""
    return fpulse(x + 0.5 * width, period, width, fw)


@wp.func
def fbox(x: float, a: float, b: float, fw: float) -> float:
    """Coverage of [x - fw/2, x + fw/2] by the interval [a, b]."""
    if fw < 1.0e-5:
        if x >= a and x < b:
            return 1.0
        return 0.0
    return (wp.clamp(x + 0.5 * fw, a, b) - wp.clamp(x - 0.5 * fw, a, b)) / fw


@wp.func
def smooth(a: float, b: float, x: float) -> float:
    t = wp.clamp((x - a) / (b - a), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


@wp.func
def glyphs(u: float, v: float, cell_w: float, cell_h: float, nchars: int, seed: int, fw: float) -> float:
    """Pseudo-text: 5x7 bitmap letters (the same letter id gives the same bitmap) in a row.

    (u, v) are relative to the text's lower-left corner, v upwards. Returns ink coverage.
    """
    if u < 0.0 or v < 0.0 or v >= cell_h:
        return 0.0
    ci = ifloor(u / cell_w)
    if ci >= nchars:
        return 0.0
    density = 0.42
    fade = wp.clamp(fw * 8.0 / cell_w - 0.5, 0.0, 1.0)
    if fade >= 1.0:
        return density * 0.8
    letter = ifloor(hash3(ci, 11, seed) * 26.0)
    if hash3(ci, 13, seed) < 0.12:
        return (1.0 - fade) * 0.0 + fade * density * 0.8  # a space
    col = ifloor((u - float(ci) * cell_w) / cell_w * 6.0)
    row = ifloor((cell_h - v) / cell_h * 8.0)
    ink = float(0.0)
    if col < 5 and row < 7 and row >= 0:
        # thick strokes: rows/cols 0, 3, 6 more often on, giving letter-like bars
        bias = float(0.0)
        if row == 0 or row == 3 or row == 6 or col == 0 or col == 4:
            bias = 0.3
        if hash3(letter * 8 + row, col, 977) + bias > 0.75:
            ink = 1.0
    return (1.0 - fade) * ink + fade * density * 0.8


# ---------------------------------------------------------------------------------------------
# poses


@wp.func
def qslerp(q0: wp.quat, q1: wp.quat, a: float) -> wp.quat:
    d = wp.dot(q0, q1)
    q1s = q1
    if d < 0.0:
        q1s = -q1
        d = -d
    if d > 0.9995:
        return wp.normalize(q0 * (1.0 - a) + q1s * a)
    th = wp.acos(wp.min(d, 1.0))
    s = wp.sin(th)
    return wp.normalize(q0 * (wp.sin((1.0 - a) * th) / s) + q1s * (wp.sin(a * th) / s))


@wp.func
def interp_keys(keys: wp.array(dtype=wp.transform), offset: int, count: int, x: float) -> wp.transform:
    """Pose at continuous key index ``x`` (0 = first key), clamped to the keyed range."""
    if count == 1:
        return keys[offset]
    i = wp.clamp(ifloor(x), 0, count - 2)
    a = wp.clamp(x - float(i), 0.0, 1.0)
    k0 = keys[offset + i]
    k1 = keys[offset + i + 1]
    p = wp.lerp(wp.transform_get_translation(k0), wp.transform_get_translation(k1), a)
    q = qslerp(wp.transform_get_rotation(k0), wp.transform_get_rotation(k1), a)
    return wp.transform(p, q)


@wp.func
def rig_pose(scene: SynthScene, tk: float) -> wp.transform:
    """T_world_rig at key-grid time ``tk`` (= seconds * key_rate)."""
    return interp_keys(scene.rig_keys, 0, scene.rig_keys.shape[0], tk)


# ---------------------------------------------------------------------------------------------
# tracing


@wp.func
def trace(scene: SynthScene, o: wp.vec3, d: wp.vec3, tk: float, max_dist: float) -> Hit:
    """Closest hit of the ray (o, unit d) at key-grid time tk, static scene and live actors."""
    h = Hit()
    h.dist = max_dist
    h.face = -1
    h.actor = -1
    h.rot = wp.quat_identity()
    q = wp.mesh_query_ray(scene.static_mesh, o, d, max_dist)
    if q.result:
        h.dist = q.t
        h.face = q.face
        h.u = q.u
        h.v = q.v
        h.normal = q.normal
    for a in range(scene.num_actors):
        rel = tk - float(scene.actor_key_start[a])
        count = scene.actor_key_count[a]
        if rel >= 0.0 and rel <= float(count - 1):
            T = interp_keys(scene.actor_keys, scene.actor_key_offset[a], count, rel)
            Ti = wp.transform_inverse(T)
            ob = wp.transform_point(Ti, o)
            db = wp.transform_vector(Ti, d)
            qa = wp.mesh_query_ray(scene.actor_meshes[a], ob, db, h.dist)
            if qa.result:
                if qa.t < h.dist:
                    h.dist = qa.t
                    h.face = scene.actor_face_offset[a] + qa.face
                    h.u = qa.u
                    h.v = qa.v
                    h.normal = wp.transform_vector(T, qa.normal)
                    h.rot = wp.transform_get_rotation(T)
                    h.actor = a
    return h


@wp.func
def occluded(scene: SynthScene, o: wp.vec3, d: wp.vec3, tk: float) -> bool:
    """Whether anything (static or a live actor) blocks the ray towards the sun."""
    if wp.mesh_query_ray_anyhit(scene.static_mesh, o, d, 1.0e4):
        return True
    for a in range(scene.num_actors):
        rel = tk - float(scene.actor_key_start[a])
        count = scene.actor_key_count[a]
        if rel >= 0.0 and rel <= float(count - 1):
            T = interp_keys(scene.actor_keys, scene.actor_key_offset[a], count, rel)
            Ti = wp.transform_inverse(T)
            ob = wp.transform_point(Ti, o)
            if wp.mesh_query_ray_anyhit(scene.actor_meshes[a], ob, wp.transform_vector(Ti, d), 1.0e3):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# materials


@wp.func
def make_surface(albedo: wp.vec3, mirror: float, lidar: float) -> Surface:
    s = Surface()
    s.albedo = albedo
    s.mirror = mirror
    s.emission = wp.vec3(0.0)
    s.lidar = lidar
    return s


@wp.func
def asphalt(uv: wp.vec2, fw: float, seed: int, base: wp.vec3, params: wp.vec4, lidar: float) -> Surface:
    s_ = uv[0]
    l = uv[1]
    stains = fbm(uv * 0.25, fw * 0.25, seed, 5)
    grain = fbm(uv * 6.0, fw * 6.0, seed + 3, 3)
    col = base * (0.72 + 0.5 * stains + 0.25 * (grain - 0.5))
    col = col * (1.0 + 0.55 * speckle(uv, 0.012, fw, seed + 5) + 0.3 * speckle(uv, 0.045, fw, seed + 9))
    # tar-sealed cracks and patches
    patch = smooth(0.66, 0.7, vnoise(uv * 0.08, seed + 17))
    col = col * (1.0 - 0.35 * patch)
    if params[0] > 0.5:
        # polished, darker wheel paths in the travel lanes (0.8 m either side of each lane centre)
        lc = params[2] * 0.5
        wheel = fbox(wp.abs(wp.abs(l) - lc), 0.55, 1.1, fw) * fbox(wp.abs(l), 0.0, params[2], fw)
        col = col * (1.0 - 0.12 * wheel * (0.6 + 0.8 * fbm(wp.cw_mul(uv, wp.vec2(0.2, 2.0)), fw * 2.0, seed + 27, 3)))
    col = col * (0.9 + 0.2 * fbm(uv * 3.0, fw * 3.0, seed + 29, 3))
    # hairline cracks along noise iso-lines, only in worn patches
    worn = smooth(0.55, 0.7, vnoise(uv * 0.05, seed + 19))
    crack = fbox(wp.abs(fbm(uv * 0.6, fw * 0.6, seed + 21, 4) - 0.5), 0.0, 0.004, fw * 0.6) * worn
    col = col * (1.0 - 0.45 * crack)
    paint = float(0.0)
    if params[0] > 0.5:
        road_half = params[1]
        lane = params[2]
        # dashed centre line, solid lines between travel lanes and parking strips, parking bays
        paint = fbox(l, -0.07, 0.07, fw) * fpulse(s_, 9.0, 3.0, fw)
        al = wp.abs(l)
        paint += fbox(al, lane - 0.075, lane + 0.075, fw)
        paint += fbox(al, lane, road_half - 0.3, fw) * fline(s_, 6.0, 0.1, fw)
        paint = wp.clamp(paint, 0.0, 1.0)
        wear = smooth(0.25, 0.55, fbm(wp.cw_mul(uv, wp.vec2(1.5, 4.0)), fw * 4.0, seed + 31, 4))
        paint = paint * (0.55 + 0.45 * wear)
    col = wp.lerp(col, wp.vec3(0.78, 0.78, 0.74) * (0.9 + 0.2 * grain), paint)
    return make_surface(col, 0.0, wp.lerp(lidar, 0.65, paint))


@wp.func
def crosswalk(uv: wp.vec2, fw: float, seed: int, base: wp.vec3, params: wp.vec4, lidar: float) -> Surface:
    s = asphalt(uv, fw, seed, base, wp.vec4(0.0), lidar)
    road_half = params[1]
    stripe = fpulse(uv[1] + 0.25, 1.0, 0.5, fw) * fbox(wp.abs(uv[1]), 0.0, road_half - 0.4, fw)
    wear = smooth(0.2, 0.5, fbm(uv * 2.0, fw * 2.0, seed + 41, 4))
    stripe = stripe * (0.6 + 0.4 * wear)
    s.albedo = wp.lerp(s.albedo, wp.vec3(0.8, 0.8, 0.77), stripe)
    s.lidar = wp.lerp(s.lidar, 0.65, stripe)
    return s


@wp.func
def paving(uv: wp.vec2, fw: float, seed: int, base: wp.vec3, grout_col: wp.vec3, slab: float, lidar: float) -> Surface:
    tint_fade = wp.clamp(1.0 - fw / slab, 0.0, 1.0)
    tint = 1.0 + 0.16 * (hash3(ifloor(uv[0] / slab), ifloor(uv[1] / slab), seed) - 0.5) * tint_fade
    col = base * tint * (0.85 + 0.3 * fbm(uv * 0.7, fw * 0.7, seed + 1, 5))
    col = col * (1.0 + 0.35 * speckle(uv, 0.01, fw, seed + 2))
    grout = wp.max(fline(uv[0], slab, 0.012, fw), fline(uv[1], slab, 0.012, fw))
    col = wp.lerp(col, grout_col, grout)
    stain = smooth(0.6, 0.8, fbm(uv * 0.3 + wp.vec2(3.1, 7.7), fw * 0.3, seed + 3, 4))
    col = col * (1.0 - 0.25 * stain)
    return make_surface(col, 0.0, lidar)


@wp.func
def kerb(uv: wp.vec2, fw: float, seed: int, base: wp.vec3, lidar: float) -> Surface:
    col = base * (0.85 + 0.3 * fbm(uv * 2.0, fw * 2.0, seed, 4))
    col = col * (1.0 + 0.6 * speckle(uv, 0.008, fw, seed + 1))
    block = 1.0 + 0.1 * (hash3(ifloor(uv[0]), 0, seed + 2) - 0.5) * wp.clamp(1.0 - fw, 0.0, 1.0)
    col = col * block
    joint = fline(uv[0], 1.0, 0.012, fw)
    col = wp.lerp(col, wp.vec3(0.08, 0.08, 0.08), joint)
    return make_surface(col, 0.0, lidar)


@wp.func
def grass(uv: wp.vec2, fw: float, seed: int, base: wp.vec3, dry: wp.vec3, lidar: float) -> Surface:
    m = smooth(0.35, 0.75, fbm(uv * 0.15, fw * 0.15, seed, 5))
    col = wp.lerp(base, dry, m)
    col = col * (0.7 + 0.6 * fbm(uv * 8.0, fw * 8.0, seed + 1, 3))
    col = col * (1.0 + 0.7 * speckle(uv, 0.015, fw, seed + 2))
    return make_surface(col, 0.0, lidar)


@wp.func
def window_layout(u: float, v: float, params: wp.vec4, params2: wp.vec4) -> wp.vec4:
    """Window cell of a facade: (cell u, cell v, column index, floor index); floor -1 = ground floor."""
    spacing = params[0]
    floor_h = params[1]
    ground = params[2]
    cu = fmod_pos(u, spacing)
    col = wp.floor(u / spacing)
    if v < ground:
        return wp.vec4(cu, v, col, -1.0)
    rel = v - ground
    return wp.vec4(cu, fmod_pos(rel, floor_h), col, wp.floor(rel / floor_h))


@wp.func
def facade(kind: int, uv: wp.vec2, fw: float, seed: int, col_a: wp.vec3, col_b: wp.vec3, params: wp.vec4,
           params2: wp.vec4, lidar: float) -> Surface:
    """Brick, plaster or curtain-glass facade with windows, sills, a shop front and a sign band.

    params: (window spacing, floor height, ground-floor height, window width fraction);
    params2: (building height, shop front (1) or not, fraction of lit windows, 1 = blank wall).
    """
    u = uv[0]
    v = uv[1]
    wall = wp.vec3(0.0)
    wall_lidar = lidar
    if kind == K_BRICK:
        row = ifloor(v / 0.075)
        offset = 0.12 * float(row & 1)
        bfade = wp.clamp(1.0 - fw / 0.075, 0.0, 1.0)
        jitter = (hash3(ifloor((u + offset) / 0.24), row, seed) - 0.5) * bfade
        brick = col_a * (1.0 + 0.35 * jitter) * (0.85 + 0.3 * fbm(uv * 1.5, fw * 1.5, seed + 1, 4))
        brick = brick * (1.0 + 0.3 * speckle(uv, 0.012, fw, seed + 2))
        mortar = wp.max(fline(v, 0.075, 0.011, fw), fline(u + offset, 0.24, 0.011, fw))
        wall = wp.lerp(brick, col_b, mortar)
    elif kind == K_PLASTER:
        wall = col_a * (0.88 + 0.24 * fbm(uv * 0.4, fw * 0.4, seed + 1, 6))
        wall = wall * (1.0 + 0.18 * speckle(uv, 0.006, fw, seed + 2))
        joint = wp.max(fline(u, 1.5, 0.015, fw), fline(v, 1.2, 0.015, fw))
        wall = wp.lerp(wall, wall * 0.7, joint)
        streak = smooth(0.55, 0.8, fbm(wp.vec2(u * 3.0, v * 0.15), fw * 3.0, seed + 4, 4))
        wall = wall * (1.0 - 0.22 * streak)
    else:
        # curtain wall: spandrels and mullions on a panel grid
        panel = params[0] * 0.5
        spand = fbox(fmod_pos(v - params[2], params[1]), 0.0, 0.85, fw)
        mull = wp.max(fline(u, panel, 0.09, fw), fline(v - params[2], params[1], 0.09, fw))
        wall = wp.lerp(col_b * (0.9 + 0.2 * fbm(uv, fw, seed, 3)), wp.vec3(0.55, 0.57, 0.6), mull)
        glass_frac = (1.0 - spand) * (1.0 - mull)
        pv = hash3(ifloor(u / panel), ifloor((v - params[2]) / params[1]), seed + 3)
        tint = col_a * (0.8 + 0.4 * pv * wp.clamp(1.0 - fw / panel, 0.0, 1.0))
        s = make_surface(wp.lerp(wall, tint, glass_frac), 0.55 * glass_frac, wp.lerp(lidar, 0.05, glass_frac))
        if v < params[2] and params2[1] > 0.5:
            # glass shop front below the first floor, same as the other facades
            s.albedo = wp.lerp(s.albedo, wp.vec3(0.06, 0.07, 0.08), 0.5)
        return s

    # roofline cornice and plinth
    height = params2[0]
    cornice = fbox(v, height - 0.45, height, fw)
    plinth = fbox(v, -1.0, 0.35, fw)
    wall = wp.lerp(wall, col_b * 0.9 + wp.vec3(0.1), cornice * 0.8)
    wall = wp.lerp(wall, wp.vec3(0.16, 0.15, 0.14) * (0.8 + 0.4 * fbm(uv * 3.0, fw * 3.0, seed + 6, 3)), plinth)
    # dirt towards the ground
    wall = wall * (1.0 - 0.25 * wp.clamp(1.0 - v / 2.5, 0.0, 1.0) * fbm(uv * 2.0, fw * 2.0, seed + 8, 3))
    if params2[3] > 0.5:
        return make_surface(wall, 0.0, wall_lidar)

    cell = window_layout(u, v, params, params2)
    cu = cell[0]
    cv = cell[1]
    col_i = int(cell[2])
    floor_i = int(cell[3])
    spacing = params[0]
    albedo = wall
    mirror = float(0.0)
    emission = wp.vec3(0.0)
    glass_amt = float(0.0)
    if floor_i >= 0:
        if v < height - 0.8:
            ww = spacing * params[3]
            a = 0.5 * (spacing - ww)
            b = a + ww
            c = 0.85
            d = wp.min(params[1] - 0.55, 2.5)
            outer = fbox(cu, a, b, fw) * fbox(cv, c, d, fw)
            inner = fbox(cu, a + 0.07, b - 0.07, fw) * fbox(cv, c + 0.07, d - 0.07, fw)
            mid = fbox(cu, 0.5 * spacing - 0.03, 0.5 * spacing + 0.03, fw)
            transom = fbox(cv, d - 0.5, d - 0.45, fw)
            glass = inner * (1.0 - wp.max(mid, transom))
            frame = outer - glass
            sill = fbox(cu, a - 0.06, b + 0.06, fw) * fbox(cv, c - 0.09, c, fw)
            lit = hash3(col_i, floor_i, seed + 11) < params2[2]
            curtain = hash3(col_i, floor_i, seed + 13)
            interior = wp.vec3(0.035, 0.04, 0.05)
            if curtain > 0.55:
                folds = 0.75 + 0.25 * fpulse(cu, 0.09, 0.045, fw)
                cover = fbox(cv, d - (d - c) * (curtain - 0.4), d, fw)
                interior = wp.lerp(interior, wp.vec3(0.55, 0.5, 0.42) * folds, cover)
            albedo = wp.lerp(albedo, col_b * 0.35 + wp.vec3(0.45), frame)
            albedo = wp.lerp(albedo, wp.vec3(0.62, 0.6, 0.56), sill)
            albedo = wp.lerp(albedo, interior, glass)
            mirror = 0.5 * glass
            glass_amt = glass
            if lit:
                emission = wp.vec3(0.55, 0.42, 0.22) * glass
    elif params2[1] > 0.5:
        # shop front: pillars, display windows, a door, and the sign band with lettering
        bay_w = 4.0
        bu = fmod_pos(u, bay_w)
        bay = ifloor(u / bay_w)
        pillar = fbox(bu, 0.0, 0.45, fw)
        glass_v = fbox(v, 0.35, 2.7, fw)
        door = hash3(bay, 3, seed + 21) < 0.3
        band = fbox(v, 2.95, 3.75, fw)
        opening = (1.0 - pillar) * glass_v
        inside = wp.vec3(0.05, 0.05, 0.06)
        if door:
            inside = wp.vec3(0.18, 0.11, 0.06) * (0.85 + 0.3 * fpulse(v, 0.3, 0.15, fw))
            inside = wp.lerp(inside, wp.vec3(0.7, 0.65, 0.4), fbox(bu, 2.9, 3.05, fw) * fbox(v, 1.0, 1.2, fw))
        else:
            # goods on display: coloured blobs
            blob = vnoise(wp.vec2(u * 3.0, v * 3.0), seed + 23)
            goods = wp.vec3(hash3(bay, 5, seed), hash3(bay, 6, seed), hash3(bay, 7, seed)) * 0.5
            inside = wp.lerp(inside, goods, smooth(0.55, 0.7, blob) * fbox(v, 0.35, 1.6, fw))
            mirror = 0.45 * opening
        albedo = wp.lerp(albedo, wp.vec3(0.12, 0.12, 0.13), pillar * glass_v * 0.3)
        albedo = wp.lerp(albedo, inside, opening)
        glass_amt = opening
        # sign: one per building, colour and text from the seed
        sign_bg = wp.vec3(hash3(seed, 1, 31), hash3(seed, 2, 31), hash3(seed, 3, 31)) * 0.6 + wp.vec3(0.05)
        ink_col = wp.vec3(0.92, 0.9, 0.85)
        if hash3(seed, 4, 31) < 0.4:
            ink_col = wp.vec3(0.04, 0.04, 0.05)
        ink = glyphs(u - 0.8, v - 3.12, 0.36, 0.46, 14, seed + 37, fw)
        albedo = wp.lerp(albedo, wp.lerp(sign_bg, ink_col, ink), band)
    s = make_surface(albedo, mirror, wp.lerp(wall_lidar, 0.05, glass_amt))
    s.emission = emission
    return s


@wp.func
def sign_plate(uv: wp.vec2, fw: float, seed: int, col_a: wp.vec3, col_b: wp.vec3, params: wp.vec4) -> Surface:
    """Traffic signs: round (red ring), rectangular street-name plate, blue square with an arrow."""
    style = int(params[0])
    w = params[1]
    h = params[2]
    x = uv[0] - 0.5 * w
    y = uv[1] - 0.5 * h
    col = col_a
    if style == 0:
        r = wp.sqrt(x * x + y * y) / (0.5 * wp.min(w, h))
        ring = fbox(r, 0.72, 0.98, fw / (0.5 * h))
        inner = fbox(r, 0.0, 0.72, fw / (0.5 * h))
        bar = fbox(x, -0.22 * w, 0.22 * w, fw) * fbox(y, -0.05 * h, 0.05 * h, fw)
        col = wp.vec3(0.6) * (1.0 - ring - inner) + wp.vec3(0.65, 0.04, 0.04) * ring + wp.vec3(0.8, 0.8, 0.78) * inner
        col = wp.lerp(col, wp.vec3(0.03), bar * inner)
    elif style == 1:
        border = 1.0 - fbox(x, -0.5 * w + 0.03, 0.5 * w - 0.03, fw) * fbox(y, -0.5 * h + 0.03, 0.5 * h - 0.03, fw)
        ink = glyphs(uv[0] - 0.06, uv[1] - 0.5 * h + 0.06, 0.09, 0.12, int((w - 0.12) / 0.09), seed, fw)
        col = wp.lerp(col_a, col_b, wp.clamp(border + ink, 0.0, 1.0))
    else:
        shaft = fbox(x, -0.05 * w, 0.05 * w, fw) * fbox(y, -0.3 * h, 0.1 * h, fw)
        head = fbox(y, 0.1 * h, 0.35 * h, fw) * fbox(wp.abs(x), 0.0, 0.25 * w * (0.35 * h - y) / (0.25 * h), fw)
        col = wp.lerp(col_a, col_b, wp.clamp(shaft + head, 0.0, 1.0))
    # retro-reflective sheeting: bright for the lidar
    return make_surface(col * (0.92 + 0.16 * fbm(uv * 20.0, fw * 20.0, seed, 2)), 0.05, 0.85)


@wp.func
def car_part(kind: int, uv: wp.vec2, fw: float, seed: int, paint: wp.vec3, params: wp.vec4, lidar: float) -> Surface:
    """Car body panels: paint with seams, front (lights, grille, plate) and rear (tail lights, plate)."""
    gloss = 0.12
    col = paint * (0.94 + 0.12 * fbm(uv * 3.0, fw * 3.0, seed, 3))
    if kind == K_PAINT:
        # door seams and handles on the sides (v = height above the box bottom)
        seam = fline(uv[0], params[0], 0.012, fw) * fbox(uv[1], params[1], params[2], fw)
        col = wp.lerp(col, col * 0.35, seam)
        handle = fbox(fmod_pos(uv[0] + 0.35, params[0]), 0.0, 0.2, fw)
        handle = handle * fbox(uv[1], params[2] - 0.12, params[2] - 0.07, fw)
        col = wp.lerp(col, wp.vec3(0.05), handle * 0.8)
        trim = fbox(uv[1], -1.0, params[1] + 0.06, fw)
        col = wp.lerp(col, wp.vec3(0.04, 0.04, 0.045), trim)
        return make_surface(col, gloss * (1.0 - trim), lidar)
    w = params[0]
    x = wp.abs(uv[0] - 0.5 * w)
    z = uv[1]
    lamp_in = w * 0.5 - 0.42
    lamp = fbox(x, lamp_in, w * 0.5 - 0.07, fw) * fbox(z, params[1] + 0.32, params[1] + 0.5, fw)
    plate = fbox(x, 0.0, 0.26, fw) * fbox(z, params[1] + 0.1, params[1] + 0.22, fw)
    bumper = fbox(z, -1.0, params[1] + 0.1, fw)
    emission = wp.vec3(0.0)
    col = wp.lerp(col, wp.vec3(0.05, 0.05, 0.055), bumper)
    if kind == K_CAR_FRONT:
        grille = fbox(x, 0.0, lamp_in - 0.05, fw) * fbox(z, params[1] + 0.13, params[1] + 0.42, fw)
        slats = 0.5 + 0.5 * fpulse(z, 0.05, 0.025, fw)
        col = wp.lerp(col, wp.vec3(0.03) * slats + wp.vec3(0.02), grille)
        col = wp.lerp(col, wp.vec3(0.85, 0.85, 0.8), lamp)
    else:
        col = wp.lerp(col, wp.vec3(0.5, 0.03, 0.02), lamp)
        emission = wp.vec3(0.12, 0.0, 0.0) * lamp
    ink = glyphs(uv[0] - 0.5 * w + 0.22, z - params[1] - 0.12, 0.062, 0.08, 7, seed + 5, fw)
    col = wp.lerp(col, wp.lerp(wp.vec3(0.85, 0.85, 0.82), wp.vec3(0.03), ink), plate)
    s = make_surface(col, gloss * (1.0 - bumper), wp.lerp(lidar, 0.85, wp.max(plate, lamp)))
    s.emission = emission
    return s


@wp.func
def surface(scene: SynthScene, mat: int, uv: wp.vec2, fw: float) -> Surface:
    """Albedo, gloss, emission and lidar reflectivity of material ``mat`` at uv (metres)."""
    kind = scene.mat_kind[mat]
    a = scene.mat_color_a[mat]
    b = scene.mat_color_b[mat]
    p = scene.mat_params[mat]
    p2 = scene.mat_params2[mat]
    lid = scene.mat_lidar[mat]
    seed = mat * 7 + 1
    if kind == K_ASPHALT:
        return asphalt(uv, fw, seed, a, p, lid)
    if kind == K_CROSSWALK:
        return crosswalk(uv, fw, seed, a, p, lid)
    if kind == K_SIDEWALK:
        return paving(uv, fw, seed, a, b, p[0], lid)
    if kind == K_KERB:
        return kerb(uv, fw, seed, a, lid)
    if kind == K_GRASS:
        return grass(uv, fw, seed, a, b, lid)
    if kind == K_BRICK or kind == K_PLASTER or kind == K_GLASS:
        return facade(kind, uv, fw, seed, a, b, p, p2, lid)
    if kind == K_ROOF:
        col = a * (0.75 + 0.5 * fbm(uv * 0.5, fw * 0.5, seed, 5)) * (1.0 + 0.5 * speckle(uv, 0.02, fw, seed + 1))
        return make_surface(col, 0.0, lid)
    if kind == K_METAL:
        col = a * (0.85 + 0.3 * fbm(wp.vec2(uv[0] * 12.0, uv[1] * 0.8), fw * 12.0, seed, 4))
        return make_surface(col, 0.12, lid)
    if kind == K_SIGN:
        return sign_plate(uv, fw, seed, a, b, p)
    if kind == K_FOLIAGE:
        # leaf clusters (~20 cm) made of leaves (~4 cm), dark gaps into the canopy between clusters
        clusters = fbm(uv * 5.0, fw * 5.0, seed, 3)
        leaves = fbm(uv * 25.0, fw * 25.0, seed + 3, 2)
        col = wp.lerp(a, b, smooth(0.35, 0.65, fbm(uv * 0.7, fw * 0.7, seed + 1, 3)))
        col = col * (0.55 + 0.9 * leaves) * (1.0 + 0.5 * speckle(uv, 0.025, fw, seed + 2))
        gap = smooth(0.38, 0.28, clusters)
        col = wp.lerp(col, col * 0.3, gap)
        return make_surface(col, 0.0, lid)
    if kind == K_BARK:
        col = a * (0.6 + 0.8 * fbm(wp.vec2(uv[0] * 18.0, uv[1] * 1.5), fw * 18.0, seed, 4))
        return make_surface(col, 0.0, lid)
    if kind == K_PAINT or kind == K_CAR_FRONT or kind == K_CAR_REAR:
        return car_part(kind, uv, fw, seed, a, p, lid)
    if kind == K_CAR_GLASS:
        return make_surface(a * (0.9 + 0.2 * fbm(uv * 2.0, fw * 2.0, seed, 2)), 0.35, lid)
    if kind == K_TYRE:
        if p[0] > 0.0:
            # wheel face, uv centred on the axle: rim with spokes inside the rubber
            r = wp.length(uv)
            ang = wp.atan2(uv[1], uv[0]) + 3.14159265
            # five spokes, filtered over the angle the footprint spans at this radius
            spokes = fpulse(ang, 1.2566371, 0.7, fw / wp.max(r, 0.02))
            rim = fbox(r, 0.0, 0.62 * p[0], fw) * (0.45 + 0.55 * spokes)
            hub = fbox(r, 0.0, 0.12 * p[0], fw)
            col = wp.lerp(wp.vec3(0.025), wp.vec3(0.38, 0.38, 0.4), wp.clamp(rim + hub, 0.0, 1.0))
            return make_surface(col, 0.0, lid)
        tread = 0.7 + 0.3 * fpulse(uv[0], 0.035, 0.015, fw)
        return make_surface(wp.vec3(0.03) * tread, 0.0, lid)
    if kind == K_CLOTH:
        weave = 0.85 + 0.3 * fbm(uv * 30.0, fw * 30.0, seed, 2)
        col = a * weave
        head = fbox(uv[1], p[0], 10.0, fw)
        col = wp.lerp(col, b, head)
        legs = fbox(uv[1], -1.0, p[1], fw)
        col = wp.lerp(col, wp.vec3(0.08, 0.09, 0.14) * weave, legs)
        return make_surface(col, 0.0, lid)
    # K_CONCRETE and anything unknown
    col = a * (0.8 + 0.4 * fbm(uv * 0.8, fw * 0.8, seed, 5)) * (1.0 + 0.3 * speckle(uv, 0.01, fw, seed + 1))
    joint = wp.float32(0.0)
    if p[0] > 0.0:
        joint = wp.max(fline(uv[0], p[0], 0.02, fw), fline(uv[1], p[0], 0.02, fw))
    col = wp.lerp(col, col * 0.6, joint)
    return make_surface(col, 0.0, lid)


# ---------------------------------------------------------------------------------------------
# light


@wp.func
def sky(scene: SynthScene, d: wp.vec3, fw: float) -> wp.vec3:
    """Sky radiance in direction d: gradient, sun disc and glow, procedural clouds."""
    z = d[2]
    if z < 0.0:
        return scene.horizon * 0.55
    t = wp.pow(1.0 - z, 4.0)
    c = wp.lerp(scene.zenith, scene.horizon, t)
    mu = wp.max(wp.dot(d, scene.sun_dir), 0.0)
    c = c + scene.sun_color * (wp.pow(mu, 2000.0) * 30.0 + wp.pow(mu, 32.0) * 0.12)
    if z > 0.005:
        inv = 1.0 / (z + 0.03)
        p = wp.vec2(d[0] * inv, d[1] * inv) * 0.6 + wp.vec2(13.7, 4.2)
        n = fbm(p, fw * inv * inv * 0.6, 71, 6)
        cover = smooth(0.5, 0.72, n) * smooth(0.005, 0.12, z)
        cloud = wp.vec3(0.95, 0.96, 0.98) * (0.75 + 0.45 * fbm(p * 3.0, fw * inv * inv * 1.8, 73, 4))
        c = wp.lerp(c, cloud, cover * 0.92)
    return c


@wp.func
def aces(x: float) -> float:
    return wp.clamp((x * (2.51 * x + 0.03)) / (x * (2.43 * x + 0.59) + 0.14), 0.0, 1.0)


@wp.func
def shade(scene: SynthScene, o: wp.vec3, d: wp.vec3, h: Hit, tk: float, pixel_angle: float) -> wp.vec3:
    """Radiance along the ray: sky, or the hit surface lit by sun (with shadow ray) and sky."""
    if h.face < 0:
        return sky(scene, d, pixel_angle)
    i0 = h.face * 3
    ng = wp.normalize(h.normal)
    ns = scene.face_normal[i0] * h.u + scene.face_normal[i0 + 1] * h.v + scene.face_normal[i0 + 2] * (1.0 - h.u - h.v)
    ns = wp.normalize(wp.quat_rotate(h.rot, ns))
    if wp.dot(ns, ng) < 0.0:
        ns = -ns
    if wp.dot(ng, d) > 0.0:
        ng = -ng
        ns = -ns
    n = ns
    cosi = wp.max(-wp.dot(ng, d), 0.0)
    uv = scene.face_uv[i0] * h.u + scene.face_uv[i0 + 1] * h.v + scene.face_uv[i0 + 2] * (1.0 - h.u - h.v)
    fw = h.dist * pixel_angle / wp.sqrt(wp.max(cosi, 0.04))
    srf = surface(scene, scene.face_material[h.face], uv, fw)
    p = o + d * h.dist
    ndl = wp.dot(n, scene.sun_dir)
    direct = wp.vec3(0.0)
    if ndl > 0.0:
        if not occluded(scene, p + ng * SHADOW_EPS, scene.sun_dir, tk):
            direct = scene.sun_color * ndl
    # sky light from above, a little bounce from the ground below
    amb = scene.ambient * (0.62 + 0.38 * n[2]) + wp.vec3(0.09, 0.085, 0.08) * (0.5 - 0.5 * n[2])
    col = wp.cw_mul(srf.albedo, direct + amb) + srf.emission
    if srf.mirror > 0.0:
        r = d - n * (2.0 * wp.dot(d, n))
        fres = srf.mirror * (0.3 + 0.7 * wp.pow(1.0 - cosi, 5.0))
        col = wp.lerp(col, sky(scene, r, pixel_angle * 4.0), fres)
    # aerial perspective
    haze = 1.0 - wp.exp(-h.dist / 900.0)
    return wp.lerp(col, scene.horizon * 0.95, haze)


# ---------------------------------------------------------------------------------------------
# kernels


@wp.kernel
def render_camera_kernel(
    scene: SynthScene,
    cam: CameraParams,
    frame_times: wp.array(dtype=wp.float32),  # [B] frame timestamps, seconds since the capture start
    dirs: wp.array2d(dtype=wp.vec3),  # [S, H*W] camera-frame unit rays; sample 0 = pixel centre; 0 = outside the lens
    pixel_dt: wp.array(dtype=wp.float32),  # [H*W] rolling-shutter time of each pixel after the frame time
    rgb: wp.array4d(dtype=wp.uint8),  # [B, H, W, 3] out
    depth: wp.array3d(dtype=wp.float32),  # [B, H, W] out: ray distance through the pixel centre, 0 = none
    actor: wp.array3d(dtype=wp.int16),  # [B, H, W] out: actor index at the pixel centre, -1 = static / none
):
    b, y, x = wp.tid()
    width = rgb.shape[2]
    pix = y * width + x
    t = frame_times[b] + pixel_dt[pix]
    tk = t * scene.key_rate
    T = wp.transform_multiply(rig_pose(scene, tk), cam.T_rig_cam)
    o = wp.transform_get_translation(T)
    acc = wp.vec3(0.0)
    depth[b, y, x] = 0.0
    actor[b, y, x] = wp.int16(-1)
    samples = dirs.shape[0]
    for s in range(samples):
        dc = dirs[s, pix]
        if wp.length_sq(dc) > 0.0:
            d = wp.transform_vector(T, dc)
            h = trace(scene, o, d, tk, scene.max_dist)
            if s == 0 and h.face >= 0:
                depth[b, y, x] = h.dist
                actor[b, y, x] = wp.int16(h.actor)
            acc += shade(scene, o, d, h, tk, cam.pixel_angle)
    acc = acc / float(samples)
    # exposure, white balance, lens falloff, filmic tone curve, display gamma
    c0 = dirs[0, pix]
    vig = 1.0 - cam.vignette * (1.0 - c0[2] * c0[2])
    e = cam.exposure * vig
    for ch in range(3):
        val = wp.pow(aces(acc[ch] * e * cam.white_balance[ch]), 1.0 / 2.2)
        rgb[b, y, x, ch] = wp.uint8(int(val * 255.0 + 0.5))


@wp.kernel
def scan_lidar_kernel(
    scene: SynthScene,
    T_rig_lidar: wp.transform,
    sweep_times: wp.array(dtype=wp.float32),  # [B] sweep start, seconds since the capture start
    column_dt: wp.array(dtype=wp.float32),  # [W] firing time of each column after the sweep start
    rays: wp.array2d(dtype=wp.vec3),  # [W, C] lidar-frame unit rays
    min_range: float,
    max_range: float,
    range_sigma: float,
    seed: int,
    first_sweep: int,  # global index of sweep 0 of this batch (keys the RNG)
    range_clean: wp.array3d(dtype=wp.float32),  # [B, W, C] out: noise-free range, 0 = no surface in range
    range_noisy: wp.array3d(dtype=wp.float32),  # [B, W, C] out: measured range, 0 = no return (dropped)
    intensity: wp.array3d(dtype=wp.float32),  # [B, W, C] out
    actor: wp.array3d(dtype=wp.int16),  # [B, W, C] out: -1 static / none
):
    b, w, c = wp.tid()
    n_cols = rays.shape[0]
    n_ch = rays.shape[1]
    t = sweep_times[b] + column_dt[w]
    tk = t * scene.key_rate
    T = wp.transform_multiply(rig_pose(scene, tk), T_rig_lidar)
    o = wp.transform_get_translation(T)
    d = wp.transform_vector(T, rays[w, c])
    h = trace(scene, o, d, tk, max_range)
    range_clean[b, w, c] = 0.0
    range_noisy[b, w, c] = 0.0
    intensity[b, w, c] = 0.0
    actor[b, w, c] = wp.int16(-1)
    if h.face < 0 or h.dist < min_range:
        return
    range_clean[b, w, c] = h.dist
    actor[b, w, c] = wp.int16(h.actor)
    n = wp.normalize(h.normal)
    cosi = wp.abs(wp.dot(n, d))
    i0 = h.face * 3
    uv = scene.face_uv[i0] * h.u + scene.face_uv[i0 + 1] * h.v + scene.face_uv[i0 + 2] * (1.0 - h.u - h.v)
    srf = surface(scene, scene.face_material[h.face], uv, h.dist * 0.003)
    refl = wp.clamp(srf.lidar, 0.0, 1.0)
    state = wp.rand_init(seed, ((first_sweep + b) * n_cols + w) * n_ch + c)
    # dark, far and grazing surfaces return less often; glass often lets the beam through
    rr = h.dist / max_range
    p_drop = 0.01 + 0.5 * wp.pow(1.0 - refl, 3.0) * rr * rr + 0.35 * wp.pow(1.0 - cosi, 8.0) + 0.5 * srf.mirror
    if wp.randf(state) < wp.min(p_drop, 0.97):
        return
    r = h.dist + range_sigma * wp.randn(state)
    if r < min_range or r > max_range:
        return
    range_noisy[b, w, c] = r
    inten = refl * (0.3 + 0.7 * cosi) * (1.0 + 0.04 * wp.randn(state))
    intensity[b, w, c] = wp.clamp(inten, 0.0, 1.0)
