"""What the host C of a CPU-target model adds to the shared entry (host.py): the calling thread's
team of threads around each entry, the per-thread arena, the oneDNN primitives of a new shape
created at once, per-kernel timers, and the kernels' C in the same source (c_kernel.py), split into
translation units (c_kernel.UNITS_C).

A target's host part (this one, cuda_host.CudaHost) answers the same questions; host.HOSTS
registers it by the target's kind.
"""

from __future__ import annotations

from .c_expr import c_sym_name
from .host_checks import C_DTYPE_NAMES


def _in_unit(i: int, before: str, text: str) -> str:
    return f"{before}#if BZ_UNIT({i})\n{text}#endif\n"


class CpuHost:
    kind = "cpu"
    timers = True  # BRAZE_DEBUG >= 3's per-kernel counters
    picks_kernels = True  # the helper's GEMM kernel per range of M, 1x1 convolutions as GEMMs, live weights
    checks_data = True  # a kernel's gathered index out of range, or integer divisor 0, fails the call (c_kernel)
    copy = "memcpy"  # a result that is a parameter, a constant or repeated: copied at the end
    links_helper = True  # a model with library calls links the oneDNN helper (braze/extern)

    def __init__(self, isa):
        self.isa = isa

    # --- the entry ----------------------------------------------------------------------
    def input_ptr(self, i: int) -> str:
        return f"((char *)inputs[{i}].data)"

    def output_lines(self, k: int, r) -> list[str]:
        return []

    def begin(self, f) -> list[str]:
        return []

    def prepare(self, prepares) -> list[str]:
        """At a shape this thread has not run with this model, create the shape's oneDNN
        primitives (``prepares``: (C call, its symbols)) on all threads at once before the first
        of them runs (each takes 0.2-1 ms to create; serially they made a LLaMA-style decoder's
        first call at a new length 1.6x its steady call). A primitive that fails here is created,
        and its error reported, by the call itself."""
        if len(prepares) < 2:
            return []
        syms = sorted({c_sym_name(x) for _, fs in prepares for x in fs})
        n = max(1, len(syms))
        now = ", ".join(syms) or "0"
        cases = " ".join(f"case {j}: (void){call}; break;" for j, (call, _) in enumerate(prepares))
        return [f"static _Thread_local int64_t seen_syms[{n}]; static _Thread_local const braze_instance *seen_model;",
                f"{{ const int64_t now_syms[{n}] = {{{now}}};",
                "  if (seen_model != M || memcmp(seen_syms, now_syms, sizeof now_syms)) {",
                "    #pragma omp parallel for schedule(dynamic, 1)",
                f"    for (int j = 0; j < {len(prepares)}; j++) switch (j) {{ {cases} }}",
                "    memcpy(seen_syms, now_syms, sizeof now_syms); seen_model = M; } }"]

    def end(self) -> list[str]:
        return []

    def entry(self, symbol: str, params: str, args: str, body: str) -> str:
        # the thread count is the model's, fewer while the cores are shared (braze_team.h): set
        # for this call on the calling thread (OpenMP's nthreads is per thread), restored after
        return (f"static int32_t {symbol}_body({params}) {{\n    {body}\n}}\n"
                f"BRAZE_EXPORT int32_t {symbol}({params}) {{\n"
                f"    int saved = omp_get_max_threads();\n"
                f"    int full = M->threads > 0 ? M->threads : saved;\n"
                f"    int team = M->adapt && full > 1 ? bz_team_size(full) : full;\n"
                f"    if (team == saved) return {symbol}_body({args});\n"
                f"    omp_set_num_threads(team);\n"
                f"    int32_t rc = {symbol}_body({args});\n"
                f"    omp_set_num_threads(saved);\n"
                f"    return rc;\n}}\n")

    # --- the model instance -------------------------------------------------------------
    def instance(self, n_const: int, const_bytes, library: bool) -> dict:
        """braze_create's and braze_destroy's target parts (host._model_c): the constants are the
        caller's memory; the oneDNN helper is started only by a model that calls it."""
        return {"head": "", "packs": library, "runtime": "braze_dnnl_init" if library else None,
                "fails": False, "fail_rc": "BRAZE_ERR_INTERNAL",
                "take": f"    for (int i = 0; i < {n_const}; i++) M->c[i] = constants[i];\n", "frees": ""}

    # --- the translation unit -----------------------------------------------------------
    def source(self, gen, model: str, bodies: list[str]) -> tuple[str, int, str]:
        """(C source, its translation units, no GPU source) of the model: the kernels, then the host."""
        from .c_kernel import c_prelude, kernel_prototype, kernel_to_c
        kernels = [_in_unit(i + 1, kernel_prototype(k), kernel_to_c(k, self.isa))
                   for i, k in enumerate(gen.kernels.values())]
        host = ['#include "braze_abi.h"\n#include "braze_arena.h"\n#include "braze_team.h"\n'
                '#include "braze_omp.h"\n' +
                ('#include "braze_dnnl.h"\n' + _ADOPT_HELPER_TEAMS if gen.uses_library else "") +
                "".join(f'#include "{h}"\n' for h in sorted(gen.helpers)) +
                ('#include "braze_attention.h"\n' if gen.attention else "") +
                "".join(f"{m}({k}, {', '.join(v)})\n" for h in sorted(gen.helpers) for k, (m, v) in gen.helpers[h].items()),
                C_DTYPE_NAMES, model, _profile_c(gen.profile_labels) if gen.profile else "",
                *bodies]
        parts = ["#include <stdlib.h>\n#include <string.h>\n#include <omp.h>\n", c_prelude(self.isa),
                 *kernels, _in_unit(0, "", "\n".join(host))]
        return "\n".join(parts), len(kernels) + 1, ""


# a library that links the oneDNN helper runs its OpenMP calls on the helper's runtime, which
# libdnnl's also run on (braze_omp.h, braze_dnnl_threads.c): one thread count, one team
_ADOPT_HELPER_TEAMS = ("__attribute__((constructor)) static void bz_omp_adopt_helper(void) "
                       "{ bz_omp_adopt(braze_dnnl_omp_ops()); }\n")


def _profile_c(labels: list[str]) -> str:
    n = max(len(labels), 1)
    names = ", ".join('"' + x.replace('"', "'") + '"' for x in labels) or '""'
    return (f"static double g_prof_s[{n}], g_prof_b[{n}], g_prof_f[{n}];\nstatic int64_t g_prof_n[{n}];\n"
            f"static const char *const g_prof_names[{n}] = {{{names}}};\n"
            "BRAZE_EXPORT int32_t braze_profile(const char *const **names, double **seconds, int64_t **calls, "
            "double **bytes, double **flops) {\n"
            "    *names = g_prof_names; *seconds = g_prof_s; *calls = g_prof_n; *bytes = g_prof_b; *flops = g_prof_f;\n"
            f"    return {len(labels)};\n}}\n")



__all__ = ["CpuHost"]
