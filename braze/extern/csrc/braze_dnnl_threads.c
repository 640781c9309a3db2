/* braze_dnnl_threads.c: the helper's thread teams are braze's (braze_omp.h), and so are
 * libdnnl's.
 *
 * libdnnl is built against libgomp and imports ten OpenMP entry points. When the helper
 * loads, its constructor rewrites those imports in libdnnl's GOT (under RELRO: made writable
 * for the write, read-only again after) to the helper's own entry points. So a GEMM inside
 * oneDNN runs on the same team, with the same thread count (omp_set_num_threads of the
 * calling thread) and the same wait policy, as braze's kernels around it. Two runtimes would
 * each keep their threads spinning beside the other's, and a count set in one would not
 * reach the other.
 *
 * If an import is one braze does not provide, or none is found, nothing is rewritten and the
 * helper's table is libgomp's instead (braze_dnnl_omp_status says which), so that every
 * braze library that runs through this table agrees with oneDNN again. */
#define BZ_OMP_EXPORT_PREFIX braze_dnnl_omp
#include "braze_omp.h"

#include <elf.h>
#include <link.h>

#define BZ_DNNL_IMPORT(f) {#f, (void *)f},
static const struct {
    const char *name;
    void *fn;
} bz_dnnl_imports[] = {BZ_OMP_ENTRY_POINTS(BZ_DNNL_IMPORT)};
#define BZ_DNNL_NIMPORTS (int)(sizeof bz_dnnl_imports / sizeof bz_dnnl_imports[0])

/* 1: libdnnl runs on braze's entry points; 0: not yet looked; negative: why not */
enum { BZ_BIND_OK = 1, BZ_BIND_NONE = -1, BZ_BIND_UNKNOWN = -2, BZ_BIND_MPROTECT = -3, BZ_BIND_NOLIB = -4 };
static int bz_dnnl_bind_status;

static void *bz_dnnl_import_fn(const char *name) {
    for (int i = 0; i < BZ_DNNL_NIMPORTS; i++)
        if (!strcmp(bz_dnnl_imports[i].name, name)) return bz_dnnl_imports[i].fn;
    return NULL;
}

static int bz_is_openmp_name(const char *name) { return !strncmp(name, "GOMP_", 5) || !strncmp(name, "omp_", 4); }

typedef struct {
    ElfW(Addr) base;
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Rela) *rel[2];
    size_t nrel[2];
    ElfW(Addr) relro, relro_end;
} bz_elf;

/* every OpenMP import's GOT slot: a pass that only counts (write = 0), or that rewrites them */
static int bz_elf_imports(const bz_elf *e, int write, int *unknown) {
    int n = 0;
    long page = sysconf(_SC_PAGESIZE);
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < e->nrel[k]; i++) {
            const ElfW(Rela) *r = &e->rel[k][i];
            unsigned type = ELF64_R_TYPE(r->r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const char *name = e->strtab + e->symtab[ELF64_R_SYM(r->r_info)].st_name;
            if (!bz_is_openmp_name(name)) continue;
            void *fn = bz_dnnl_import_fn(name);
            if (!fn) {
                (*unknown)++;
                continue;
            }
            n++;
            if (!write) continue;
            ElfW(Addr) slot = e->base + r->r_offset;
            void *pg = (void *)(slot & ~(ElfW(Addr))(page - 1));
            int relro = slot >= e->relro && slot < e->relro_end;
            if (mprotect(pg, (size_t)page, PROT_READ | PROT_WRITE)) return -1;
            __atomic_store_n((void **)slot, fn, __ATOMIC_RELEASE);
            if (relro) mprotect(pg, (size_t)page, PROT_READ);
        }
    }
    return n;
}

static int bz_dnnl_bind_one(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libdnnl.so")) return 0;
    bz_elf e;
    memset(&e, 0, sizeof e);
    e.base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(e.base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            e.relro = e.base + ph->p_vaddr;
            e.relro_end = e.relro + ph->p_memsz;
        }
    }
    if (!dyn) return bz_dnnl_bind_status = BZ_BIND_NOLIB;
    /* glibc has added the load address to these in place; a loader that does not would leave
     * them below it */
#define BZ_PTR(v) ((ElfW(Addr))(v) < e.base ? e.base + (ElfW(Addr))(v) : (ElfW(Addr))(v))
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: e.symtab = (const ElfW(Sym) *)BZ_PTR(dyn->d_un.d_ptr); break;
        case DT_STRTAB: e.strtab = (const char *)BZ_PTR(dyn->d_un.d_ptr); break;
        case DT_JMPREL: e.rel[0] = (const ElfW(Rela) *)BZ_PTR(dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: e.nrel[0] = dyn->d_un.d_val / sizeof(ElfW(Rela)); break;
        case DT_RELA: e.rel[1] = (const ElfW(Rela) *)BZ_PTR(dyn->d_un.d_ptr); break;
        case DT_RELASZ: e.nrel[1] = dyn->d_un.d_val / sizeof(ElfW(Rela)); break;
        }
    }
#undef BZ_PTR
    if (!e.symtab || !e.strtab) return bz_dnnl_bind_status = BZ_BIND_NOLIB;
    int unknown = 0;
    int n = bz_elf_imports(&e, 0, &unknown);
    if (unknown) return bz_dnnl_bind_status = BZ_BIND_UNKNOWN;
    if (n == 0) return bz_dnnl_bind_status = BZ_BIND_NONE;
    if (bz_elf_imports(&e, 1, &unknown) < 0) return bz_dnnl_bind_status = BZ_BIND_MPROTECT;
    return bz_dnnl_bind_status = BZ_BIND_OK;
}

__attribute__((constructor)) static void bz_dnnl_bind(void) {
    dl_iterate_phdr(bz_dnnl_bind_one, NULL);
    if (bz_dnnl_bind_status == 0) bz_dnnl_bind_status = BZ_BIND_NOLIB;
    /* a GOT half rewritten cannot happen (mprotect of a page already mapped only fails for a
     * bad address), but unbound, libdnnl keeps libgomp: then so does every braze library */
    if (bz_dnnl_bind_status != BZ_BIND_OK && bz_omp_gomp_load() == 0)
        __atomic_store_n(&bz_omp_table, (const bz_omp_ops *)&bz_omp_gomp, __ATOMIC_RELEASE);
}

/* 1: libdnnl's OpenMP calls run on braze's teams; negative: they run on libgomp (why, above) */
BRAZE_EXPORT int32_t braze_dnnl_omp_status(void) { return bz_dnnl_bind_status; }
