"""Rows of contiguous float vector arrays moved 8 or 16 bytes per instruction on CUDA.

Warp reads and writes a vector of float32 one float at a time. For a row of a [N, k] array
that is k instructions per thread, each touching as many sectors as the warp has lanes: a
32-byte record takes eight 4-byte loads 32 bytes apart. These functions move a vec2 in one
8-byte access and a vec4 or vec8 in one or two 16-byte accesses. They need the array's data
aligned to the access (16 bytes for vec4 and vec8, 8 for vec2), which torch's allocations are;
callers that take user tensors copy a misaligned one first. float64 (tests only) and the CPU
move element by element. Each function has a float32 and a float64 overload (Warp picks one by
the array's type).
"""

import warp as wp

vec8f = wp.types.vector(8, wp.float32)
vec8d = wp.types.vector(8, wp.float64)


@wp.func_native("""
#if defined(__CUDA_ARCH__)
const float2 v = reinterpret_cast<const float2*>(a.data)[i];
return wp::vec2f(v.x, v.y);
#else
return a.data[i];
#endif
""")
def load_row2(a: wp.array(dtype=wp.vec2f), i: int) -> wp.vec2f:
    """Row i of a contiguous vec2 array, in one 8-byte load on CUDA."""
    ...


@wp.func_native("return a.data[i];")
def load_row2(a: wp.array(dtype=wp.vec2d), i: int) -> wp.vec2d:  # noqa: F811
    """float64 :func:`load_row2`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
reinterpret_cast<float2*>(a.data)[i] = make_float2(v.c[0], v.c[1]);
#else
a.data[i] = v;
#endif
""")
def store_row2(a: wp.array(dtype=wp.vec2f), i: int, v: wp.vec2f):
    """Write row i of a contiguous vec2 array, in one 8-byte store on CUDA."""
    ...


@wp.func_native("a.data[i] = v;")
def store_row2(a: wp.array(dtype=wp.vec2d), i: int, v: wp.vec2d):  # noqa: F811
    """float64 :func:`store_row2`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
const float4 v = reinterpret_cast<const float4*>(a.data)[i];
return wp::vec4f(v.x, v.y, v.z, v.w);
#else
return a.data[i];
#endif
""")
def load_row4(a: wp.array(dtype=wp.vec4f), i: int) -> wp.vec4f:
    """Row i of a contiguous vec4 array, in one 16-byte load on CUDA."""
    ...


@wp.func_native("return a.data[i];")
def load_row4(a: wp.array(dtype=wp.vec4d), i: int) -> wp.vec4d:  # noqa: F811
    """float64 :func:`load_row4`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
reinterpret_cast<float4*>(a.data)[i] = make_float4(v.c[0], v.c[1], v.c[2], v.c[3]);
#else
a.data[i] = v;
#endif
""")
def store_row4(a: wp.array(dtype=wp.vec4f), i: int, v: wp.vec4f):
    """Write row i of a contiguous vec4 array, in one 16-byte store on CUDA."""
    ...


@wp.func_native("a.data[i] = v;")
def store_row4(a: wp.array(dtype=wp.vec4d), i: int, v: wp.vec4d):  # noqa: F811
    """float64 :func:`store_row4`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
const float4* p = reinterpret_cast<const float4*>(a.data) + 2 * (size_t)i;
const float4 u = p[0], v = p[1];
wp::vec_t<8, float> r;
r.c[0] = u.x; r.c[1] = u.y; r.c[2] = u.z; r.c[3] = u.w; r.c[4] = v.x; r.c[5] = v.y; r.c[6] = v.z; r.c[7] = v.w;
return r;
#else
return a.data[i];
#endif
""")
def load_row8(a: wp.array(dtype=vec8f), i: int) -> vec8f:
    """Row i of a contiguous vec8 array, in two 16-byte loads on CUDA."""
    ...


@wp.func_native("return a.data[i];")
def load_row8(a: wp.array(dtype=vec8d), i: int) -> vec8d:  # noqa: F811
    """float64 :func:`load_row8`."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
float4* p = reinterpret_cast<float4*>(a.data) + 2 * (size_t)i;
p[0] = make_float4(v.c[0], v.c[1], v.c[2], v.c[3]);
p[1] = make_float4(v.c[4], v.c[5], v.c[6], v.c[7]);
#else
a.data[i] = v;
#endif
""")
def store_row8(a: wp.array(dtype=vec8f), i: int, v: vec8f):
    """Write row i of a contiguous vec8 array, in two 16-byte stores on CUDA."""
    ...


@wp.func_native("a.data[i] = v;")
def store_row8(a: wp.array(dtype=vec8d), i: int, v: vec8d):  # noqa: F811
    """float64 :func:`store_row8`."""
    ...
