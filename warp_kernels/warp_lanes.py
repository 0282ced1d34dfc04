"""Warp-level (32-lane) helpers for the hand-written backward passes, as native snippets.

CUDA: shuffles across the 32 lanes of a warp, so a gradient summed over a warp's pixels or
rays costs one atomic instead of 32. Each must be reached by all 32 lanes. CPU: every
thread stands alone (lane 0 of its own "warp"), so the helpers return the thread's value.
"""

import warp as wp


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return (int)(threadIdx.x & 31);
#else
return 0;
#endif
""")
def lane_id() -> int:
    """Lane of the thread in its CUDA warp (0 on the CPU)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return __any_sync(0xffffffff, pred != 0) ? 1 : 0;
#else
return pred;
#endif
""")
def warp_any(pred: int) -> int:
    """1 when any lane of the warp passes a non-zero pred."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
int m = x;  // shuffles rather than __reduce_max_sync, which needs sm_80
for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffff, m, o));
return m;
#else
return x;
#endif
""")
def warp_max_i32(x: int) -> int:
    """Largest x over the warp, in every lane."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
float s = x;
for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
return s;
#else
return x;
#endif
""")
def warp_sum_f32(x: wp.float32) -> wp.float32:
    """Sum of x over the warp, valid in lane 0."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
double s = x;
for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
return s;
#else
return x;
#endif
""")
def warp_sum_f64(x: wp.float64) -> wp.float64:
    """Sum of x over the warp, valid in lane 0."""
    ...
