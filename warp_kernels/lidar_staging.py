"""Per-warp staging of the lidar walks' windows in shared memory (native snippets).

The rasterizer's walks take a work item's sorted entries 32 at a time (a *window*) per CUDA warp
(``warp_kernels.lidar_raster``): lane l loads entry l's Gaussian index and its warp's ray-mask
word, the warp transposes the words, and each lane walks the entries that may reach its ray,
reading their 32-byte records. Here each warp stages its own windows, with no block barrier:
the records of the entries its mask words mark (a third of a tile's entries reach a given warp)
go to the warp's own slots of shared memory, as asynchronous copies (``cp.async``, sm_80 and
newer: the gathers bypass the registers) issued one window ahead, so that they land while the
warp walks the window before. A warp then waits only on its own copies (``cp.async.wait_group``
and ``__syncwarp``), never on the block's other warps.

The forward walks stage this way. Block-wide staging, which the backward keeps (staged per warp
it is slower: its windows start at each warp's own furthest ray and hold fewer of its entries),
takes a batch of BATCH entries at a time behind block barriers: there every warp
waits for its block's slowest at every batch, and each entry's record is staged for all of the
block's warps (benchmarks/RESULTS.md, raster-lidar).

A block's slots are a static ``__shared__`` array (CUDA) or a static array (CPU, where a block's
threads are fibers of one OS thread, blocks run one after another, and every thread is a warp of
its own with windows of one entry). Per warp, two slots (the window walked, the one landing) of
a window's records and Gaussian indices.
"""

import warp as wp

SLOTS = 2  # per warp: the window walked and the window landing


def _copy_record(dst: str, src: str, size: int) -> str:
    """Native code copying a record of ``size`` bytes (a multiple of 16; both addresses 16-byte
    aligned) from global ``src`` to shared ``dst`` (C expressions): asynchronously in 16-byte pieces
    that bypass L1 on sm_80 and newer, as a plain copy elsewhere."""
    assert size % 16 == 0
    issue = "".join(f"""
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n"
                 :: "r"(s_ + {16 * q}), "l"(g_ + {16 * q}) : "memory");""" for q in range(size // 16))
    return f"""
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
{{
    unsigned s_;
    asm("{{ .reg .u64 a_; cvta.to.shared.u64 a_, %1; cvt.u32.u64 %0, a_; }}" : "=r"(s_) : "l"({dst}));
    const char* g_ = (const char*)({src});{issue}
}}
#else
for (int b_ = 0; b_ < {size}; ++b_) ((char*)({dst}))[b_] = ((const char*)({src}))[b_];
#endif
"""


def make_staging_funcs(float_t, block_rays: int, block_warps: int) -> dict:
    """The staging functions for records of ``float_t`` (8 of them), in blocks of ``block_rays`` threads
    (``block_warps`` CUDA warps). Each takes the records' array, whose type tells the float32 and
    float64 functions apart (Warp resolves a call by its arguments' types)."""
    vec8 = wp.types.vector(8, float_t)
    rec = 8 * (4 if float_t == wp.float32 else 8)  # bytes per record
    entry = rec + 16  # a record and its Gaussian index (padded: records stay 16-byte aligned)
    # the slot entry of window entry j of thread t's warp, as a byte offset (CUDA: 32 lanes a warp;
    # the CPU: a warp of one thread, whose windows hold one entry)
    at = f"""
#if defined(__CUDA_ARCH__)
const int w_ = threadIdx.x >> 5;
const size_t off_ = (size_t){entry} * (({SLOTS} * w_ + slot) * 32 + j);
#else
const size_t off_ = (size_t){entry} * ({SLOTS} * t + slot);
#endif
"""

    buffer_snippet = f"""
#if defined(__CUDA_ARCH__)
__shared__ __align__(16) unsigned char buf[{entry * SLOTS * 32 * block_warps}];
#else
alignas(16) static unsigned char buf[{entry * SLOTS * block_rays}];  // blocks run one after another
#endif
return (uint64_t)buf;
"""
    stage_snippet = f"""
#if defined(__CUDA_ARCH__)
const int j = threadIdx.x & 31;
__syncwarp();  // every lane is past its reads of the slot (the window before last)
#else
const int j = 0;
#endif
{at}
if (h != 0) {{
    *(int*)(buf + off_ + {rec}) = i;
{_copy_record("buf + off_", f"(const char*)splats.data + (size_t){rec} * i", rec)}
}}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
asm volatile("cp.async.commit_group;\\n" ::: "memory");
#endif
"""
    if float_t == wp.float32:  # two 16-byte loads
        record_snippet = f"""{at}
const float4* p = (const float4*)(buf + off_);
const float4 a = p[0], b = p[1];
wp::vec_t<8, float> r;
r.c[0] = a.x; r.c[1] = a.y; r.c[2] = a.z; r.c[3] = a.w; r.c[4] = b.x; r.c[5] = b.y; r.c[6] = b.z; r.c[7] = b.w;
return r;
"""
    else:
        record_snippet = f"""{at}
return *(const wp::vec_t<8, double>*)(buf + off_);
"""
    id_snippet = f"""{at}
return *(const int*)(buf + off_ + {rec});
"""

    @wp.func_native(buffer_snippet)
    def staging_buffer(splats: wp.array(dtype=vec8)) -> wp.uint64:
        """The block's slots (a handle for the functions below)."""
        ...

    @wp.func_native(stage_snippet)
    def stage_window(buf: wp.uint64, splats: wp.array(dtype=vec8), slot: int, i: int, h: int, t: int):
        """Start copying the record of Gaussian i (the lane's window entry; none where its mask word h is
        0) into the warp's ``slot``; reached by all 32 lanes (thread t of the block)."""
        ...

    @wp.func_native(record_snippet)
    def staged_record(buf: wp.uint64, splats: wp.array(dtype=vec8), slot: int, j: int, t: int) -> vec8:
        """The record of window entry j in the warp's ``slot`` (thread t of the block)."""
        ...

    @wp.func_native(id_snippet)
    def staged_id(buf: wp.uint64, splats: wp.array(dtype=vec8), slot: int, j: int, t: int) -> int:
        """The Gaussian index of window entry j in the warp's ``slot``."""
        ...

    return {"buffer": staging_buffer, "stage": stage_window, "record": staged_record, "id": staged_id}


@wp.func_native("""
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 800
if (ahead != 0) asm volatile("cp.async.wait_group 1;\\n" ::: "memory");
else asm volatile("cp.async.wait_group 0;\\n" ::: "memory");
#endif
__syncwarp();
#endif
""")
def window_wait(ahead: int):
    """Wait until the warp's window before the last staged has landed (``ahead`` != 0: one window is
    staged ahead of it), or every staged window (``ahead`` = 0); reached by all 32 lanes."""
    ...
