/* braze_arena.h: the scratch memory of a model's calls, one grow-only arena per calling thread,
 * so concurrent calls never share intermediates.
 *
 * A call at a shape larger than any before grows the arena, and the first touch of each new page
 * costs the kernel a fault and a zeroing. With a fresh allocation per growth (free, then
 * aligned_alloc: glibc maps large blocks anew and unmaps freed ones) every page faulted again:
 * the depthwise convnet's first call at 8x225x223 after 8x224x224 took 3.3x its steady call on an
 * AMD EPYC VM, 1.1x with this. So on Linux the arena is an anonymous mapping grown with mremap,
 * which keeps the pages already touched. Not advised huge pages: with the VM's THP defrag
 * "madvise", the first call at 8x224x224 then took 288 ms instead of 31 (direct compaction).
 * Elsewhere: aligned_alloc. */
#ifndef BRAZE_ARENA_H
#define BRAZE_ARENA_H

#include <stddef.h>
#include <stdlib.h>

#if defined(__linux__)
#include <sys/mman.h>
#ifndef MREMAP_MAYMOVE /* glibc's and musl's, declared only under _GNU_SOURCE */
#define MREMAP_MAYMOVE 1
extern void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...);
#endif
#endif

static _Thread_local char *tls_arena;
static _Thread_local size_t tls_arena_size;

/* At least `need` bytes of this thread's arena, 64-byte aligned, or NULL. Never NULL for
 * need = 0, and always a line past the end: a kernel may read element 0 of an empty
 * intermediate before a loop that runs no times (a hoisted load). */
static char *braze_arena(size_t need) {
    if (need <= tls_arena_size && tls_arena) return tls_arena;
#if defined(__linux__)
    const size_t huge = (size_t)2 << 20;
    size_t n = need + 64 >= huge ? (need + 64 + huge - 1) & ~(huge - 1) : (need + 64 + 4095) & ~(size_t)4095;
    void *p = tls_arena ? mremap(tls_arena, tls_arena_size, n, MREMAP_MAYMOVE)
                        : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL; /* the old arena stays (mremap leaves it on failure) */
#else
    free(tls_arena);
    size_t n = (need + 64 + 4095) & ~(size_t)4095;
    char *p = (char *)aligned_alloc(64, n);
    if (!p) {
        tls_arena_size = 0;
        return tls_arena = NULL;
    }
#endif
    tls_arena = (char *)p;
    tls_arena_size = n;
    return tls_arena;
}

#endif /* BRAZE_ARENA_H */
