/* cuda_emu.h: just enough CUDA for g++ -std=c++20 to compile and run braze's .cu sources on the CPU,
 * so the device code (generated kernels, braze_cuda_lib.cuh) is tested where there is no GPU.
 *
 * A launch runs its grid's blocks one after another on blockDim's threads (real std::threads, created
 * once per launch, so __syncthreads can block and data races between threads stay possible to observe).
 * Because only one block runs at a time, `__shared__` can be `static`: every thread of the running
 * block sees the same variable, and the block-end barrier keeps the next block from touching it before
 * the last one is done (its contents carry over, which is as undefined as on the GPU). The cost: one
 * launch at a time per process, and no `extern __shared__` (dynamic shared memory).
 * A thread that returns early drops out of __syncthreads for the rest of its block, as on the hardware.
 * Warp shuffles exchange through a block-wide slot per thread between two __syncthreads, so every
 * thread of the block must reach them together (bz_block_reduce's calls do), not only its warp's.
 */
#ifndef BRAZE_CUDA_EMU_H
#define BRAZE_CUDA_EMU_H

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <bit>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local dim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim, gridDim;
inline thread_local std::barrier<> *bz_emu_sync; /* the running block's __syncthreads barrier */

inline void __syncthreads() { bz_emu_sync->arrive_and_wait(); }
inline void __trap() { std::abort(); } /* a kernel's failed device-heap allocation */
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
template <class T> T __shfl_xor_sync(unsigned, T v, int lanes, int width = 32) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    static uint64_t slot[1024]; /* one per thread of the running block (one launch at a time) */
    const unsigned t = threadIdx.x, src = (t & ~(unsigned)(width - 1)) | ((t ^ (unsigned)lanes) & (width - 1));
    __syncthreads(); /* every read of the last exchange is done */
    std::memcpy(&slot[t], &v, sizeof v);
    __syncthreads();
    T out;
    std::memcpy(&out, &slot[src < blockDim.x ? src : t], sizeof out);
    return out;
}

template <class... P, class... A>
void bz_emu_launch(void (*k)(P...), dim3 grid, dim3 block, A... args) {
    const unsigned nt = block.x * block.y * block.z;
    const uint64_t nb = (uint64_t)grid.x * grid.y * grid.z;
    if (nt == 0 || nb == 0) return;
    std::optional<std::barrier<>> sync(std::in_place, nt);
    /* runs once all threads finished a block, before any starts the next: early returns dropped out of
     * `sync`, so it is rebuilt at full strength for the next block */
    auto fresh = [&]() noexcept { sync.emplace(nt); };
    std::barrier<decltype(fresh)> block_end(nt, fresh);
    std::vector<std::jthread> threads;
    threads.reserve(nt);
    for (unsigned t = 0; t < nt; ++t)
        threads.emplace_back([&, t] {
            threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
            blockDim = block;
            gridDim = grid;
            for (uint64_t b = 0; b < nb; ++b) {
                blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / ((uint64_t)grid.x * grid.y));
                bz_emu_sync = &*sync;
                k(P(args)...);
                sync->arrive_and_drop();
                block_end.arrive_and_wait();
            }
        });
}

#endif /* BRAZE_CUDA_EMU_H */
