"""Warp-level (32-lane) helpers for the hand-written backward passes, as native snippets.

CUDA: shuffles and votes across the 32 lanes of a warp, so a gradient summed over a warp's
pixels or rays costs one atomic instead of 32. Each must be reached by all 32 lanes. CPU:
every thread stands alone (lane 0 of a "warp" of width 1), so the sums return the thread's
value and a ballot its own predicate; the multi-value sums (``warp_sum8``, ``warp_sum2``)
have no CPU meaning, and kernels take another path there (``on_cuda``).
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


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return 1;
#else
return 0;
#endif
""")
def on_cuda() -> int:
    """1 in CUDA code, 0 in CPU code: picks the warp-level path at compile time (uniform branch)."""
    ...


# Eight sums over a warp at once by a transposed butterfly: at each of the first three steps a
# lane keeps half of its values and trades the other half with its partner, so the values
# halve as the lanes summed double. 4 + 2 + 1 + 1 + 1 = 9 shuffles instead of 8 x 5 = 40, and
# the sums end up in eight lanes (lane 4s holds value s), which then add them with one
# atomic instruction instead of eight.
_SUM8 = """
#if defined(__CUDA_ARCH__)
const unsigned all = 0xffffffffu;
const int l = threadIdx.x & 31;
const bool h16 = (l & 16) != 0, h8 = (l & 8) != 0, h4 = (l & 4) != 0;
T s0 = h16 ? a4 : a0, s1 = h16 ? a5 : a1, s2 = h16 ? a6 : a2, s3 = h16 ? a7 : a3;
s0 += __shfl_xor_sync(all, h16 ? a0 : a4, 16);
s1 += __shfl_xor_sync(all, h16 ? a1 : a5, 16);
s2 += __shfl_xor_sync(all, h16 ? a2 : a6, 16);
s3 += __shfl_xor_sync(all, h16 ? a3 : a7, 16);
T u0 = h8 ? s2 : s0, u1 = h8 ? s3 : s1;
u0 += __shfl_xor_sync(all, h8 ? s0 : s2, 8);
u1 += __shfl_xor_sync(all, h8 ? s1 : s3, 8);
T w = h4 ? u1 : u0;
w += __shfl_xor_sync(all, h4 ? u0 : u1, 4);
w += __shfl_xor_sync(all, w, 2);
w += __shfl_xor_sync(all, w, 1);
return w;
#else
return a0;
#endif
"""


@wp.func_native(_SUM8.replace("T ", "float "))
def warp_sum8_f32(a0: wp.float32, a1: wp.float32, a2: wp.float32, a3: wp.float32, a4: wp.float32,
                  a5: wp.float32, a6: wp.float32, a7: wp.float32) -> wp.float32:
    """CUDA: the warp's sum of value ``a{s}`` lands in lane 4s (s = lane >> 2 where lane % 4 == 0;
    other lanes hold partial sums). Reached by all 32 lanes. CPU: unused (returns a0)."""
    ...


@wp.func_native(_SUM8.replace("T ", "double "))
def warp_sum8_f64(a0: wp.float64, a1: wp.float64, a2: wp.float64, a3: wp.float64, a4: wp.float64,
                  a5: wp.float64, a6: wp.float64, a7: wp.float64) -> wp.float64:
    """float64 ``warp_sum8_f32``."""
    ...


_SUM2 = """
#if defined(__CUDA_ARCH__)
const unsigned all = 0xffffffffu;
const bool h16 = (threadIdx.x & 16) != 0;
T s = h16 ? b : a;
s += __shfl_xor_sync(all, h16 ? a : b, 16);
for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(all, s, o);
return s;
#else
return a;
#endif
"""


@wp.func_native(_SUM2.replace("T ", "float "))
def warp_sum2_f32(a: wp.float32, b: wp.float32) -> wp.float32:
    """CUDA: the warp's sum of ``a`` in lane 0 and of ``b`` in lane 16 (5 shuffles for both).
    Reached by all 32 lanes. CPU: unused (returns a)."""
    ...


@wp.func_native(_SUM2.replace("T ", "double "))
def warp_sum2_f64(a: wp.float64, b: wp.float64) -> wp.float64:
    """float64 ``warp_sum2_f32``."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return 32;
#else
return 1;
#endif
""")
def warp_width() -> int:
    """Lanes of a warp: 32 on CUDA, 1 on the CPU (where every thread is a warp of its own)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return (int)__ballot_sync(0xffffffffu, pred != 0);
#else
return pred != 0 ? 1 : 0;
#endif
""")
def warp_ballot(pred: int) -> int:
    """Bit l set where lane l passes a non-zero pred (a warp-uniform value). Reached by all 32 lanes."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
return __ffs(m) - 1;
#else
int b = 0;
while (b < 32 && ((((unsigned)m) >> b) & 1u) == 0u) ++b;
return b < 32 ? b : -1;
#endif
""")
def lowest_bit(m: int) -> int:
    """Index of the lowest set bit of m (-1 when m is 0)."""
    ...


@wp.func_native("""
if (n <= 0) return 0;
if (n >= 32) return -1;
return (int)((1u << n) - 1u);
""")
def bits_below(n: int) -> int:
    """Bits 0 .. n - 1 set (none for n <= 0, all 32 for n >= 32), as an int32."""
    ...


# A 32 x 32 bit matrix transposed across the warp: lane l holds row l, and ends up holding
# column l. Five butterfly steps; at step s a lane swaps, with lane l ^ s, the s-bit groups
# where the row's and the column's bit s differ (the off-diagonal blocks of each 2s x 2s block).
@wp.func_native("""
#if defined(__CUDA_ARCH__)
const unsigned all = 0xffffffffu;
const int l = threadIdx.x & 31;
unsigned x = (unsigned)h, y;
y = __shfl_xor_sync(all, x, 16);
x = (l & 16) ? ((x & 0xFFFF0000u) | (y >> 16)) : ((x & 0x0000FFFFu) | (y << 16));
y = __shfl_xor_sync(all, x, 8);
x = (l & 8) ? ((x & 0xFF00FF00u) | ((y >> 8) & 0x00FF00FFu)) : ((x & 0x00FF00FFu) | ((y << 8) & 0xFF00FF00u));
y = __shfl_xor_sync(all, x, 4);
x = (l & 4) ? ((x & 0xF0F0F0F0u) | ((y >> 4) & 0x0F0F0F0Fu)) : ((x & 0x0F0F0F0Fu) | ((y << 4) & 0xF0F0F0F0u));
y = __shfl_xor_sync(all, x, 2);
x = (l & 2) ? ((x & 0xCCCCCCCCu) | ((y >> 2) & 0x33333333u)) : ((x & 0x33333333u) | ((y << 2) & 0xCCCCCCCCu));
y = __shfl_xor_sync(all, x, 1);
x = (l & 1) ? ((x & 0xAAAAAAAAu) | ((y >> 1) & 0x55555555u)) : ((x & 0x55555555u) | ((y << 1) & 0xAAAAAAAAu));
return (int)x;
#else
return (int)((((unsigned)h) >> (lane & 31)) & 1u);
#endif
""")
def warp_transpose_bits(h: int, lane: int) -> int:
    """CUDA: lane l passes row l of a 32 x 32 bit matrix (bit r: entry l meets ray r of the warp) and gets
    column l (bit e: entry e meets this lane's ray). Reached by all 32 lanes. CPU (a warp of one thread
    and one entry): bit ``lane % 32`` of h, in bit 0."""
    ...


# Eight record gradients added to global memory as two 16-byte vector reductions (sm_90:
# ``atomicAdd`` on float4 compiles to one RED.128 each) instead of eight 4-byte ones: per
# (ray, Gaussian) pair, where a warp-wide sum is not possible (each lane at its own entry).
@wp.func_native("""
#if defined(__CUDA_ARCH__)
float* p = ((float*)a.data) + i * 8;
#if __CUDA_ARCH__ >= 900
atomicAdd((float4*)p, make_float4(a0, a1, a2, a3));
atomicAdd((float4*)(p + 4), make_float4(a4, a5, a6, a7));
#else
atomicAdd(p, a0); atomicAdd(p + 1, a1); atomicAdd(p + 2, a2); atomicAdd(p + 3, a3);
atomicAdd(p + 4, a4); atomicAdd(p + 5, a5); atomicAdd(p + 6, a6); atomicAdd(p + 7, a7);
#endif
#endif
""")
def add8_f32(a: wp.array(dtype=wp.float32), i: int, a0: wp.float32, a1: wp.float32, a2: wp.float32,
             a3: wp.float32, a4: wp.float32, a5: wp.float32, a6: wp.float32, a7: wp.float32):
    """CUDA: a[8 i + f] += a{f} for f = 0..7, atomically (a's data 16-byte aligned). CPU: nothing
    (the kernels add with ``wp.atomic_add`` there)."""
    ...


@wp.func_native("""
#if defined(__CUDA_ARCH__)
double* p = ((double*)a.data) + i * 8;
atomicAdd(p, a0); atomicAdd(p + 1, a1); atomicAdd(p + 2, a2); atomicAdd(p + 3, a3);
atomicAdd(p + 4, a4); atomicAdd(p + 5, a5); atomicAdd(p + 6, a6); atomicAdd(p + 7, a7);
#endif
""")
def add8_f64(a: wp.array(dtype=wp.float64), i: int, a0: wp.float64, a1: wp.float64, a2: wp.float64,
             a3: wp.float64, a4: wp.float64, a5: wp.float64, a6: wp.float64, a7: wp.float64):
    """float64 ``add8_f32`` (eight scalar atomics: no vector form)."""
    ...
