/* braze_dnnl_matmul.c: prepacked GEMM weights, matmul with epilogues, batched matmul.
 * Follows braze_dnnl_core.c in one translation unit (see onednn.helper_text). */

/* ------------------------------------------------------------------ GEMM weights */

struct braze_packed_b {
    int64_t N, K, owner;
    int dt;                /* BRAZE_DT_*: what data holds */
    dnnl_memory_desc_t md; /* layout of data (a K x N weights md) */
    void *data;
    int64_t smallm_kp; /* data is BA16a64b with K padded to this: the small-M path reads it (else 0) */
    const float *src;  /* the caller's float32 [N,K] weight, kept by braze_pack_b_const (else NULL): what
                        * AVX2 builds' small-M kernel reads up to 12 rows */
    float *panels;     /* AVX2 builds: src copied into the kernel's 16-column panels (its 13 to 127 rows;
                        * braze_dnnl_smallm_avx2.c), else NULL */
};

#define SMALLM_DEFAULT_MAX 48 /* measured: docs/gemm.md */
/* at or below this M, braze_matmul runs braze_dnnl_smallm.c's kernel where it applies */
static int g_smallm_max = SMALLM_DEFAULT_MAX;
void braze_dnnl_set_small_m(int max_m) { __atomic_store_n(&g_smallm_max, max_m, __ATOMIC_RELAXED); }
int braze_dnnl_small_m(void) { return __atomic_load_n(&g_smallm_max, __ATOMIC_RELAXED); }
#define BMM_SMALL_M 16 /* measured: bmm_small, benchmarks/results/small_m_bmm.md */
static int g_bmm_small_max = BMM_SMALL_M;
void braze_dnnl_set_small_bmm(int max_m) { __atomic_store_n(&g_bmm_small_max, max_m, __ATOMIC_RELAXED); }
int braze_dnnl_small_bmm(void) { return __atomic_load_n(&g_bmm_small_max, __ATOMIC_RELAXED); }
int64_t braze_packed_b_small_m_rows(const braze_packed_b *B) {
#if defined(__AVX512F__)
    return B ? B->smallm_kp : 0;
#elif defined(__AVX2__) && defined(__FMA__)
    return B && B->src ? B->K : 0;
#else
    return 0;
#endif
}
/* braze_dnnl_smallm.c: whether it can take a call with this weight, M and epilogue; the
 * product, where it can (1 if it ran, 0 without the scratch memory it needed) */
static int smallm_fits(const braze_packed_b *B, int64_t M, int act);
int braze_packed_b_small_m_takes(const braze_packed_b *B, int64_t M, int act) {
    return B && M > 0 && smallm_fits(B, M, act);
}
static int smallm_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                         const void *bias, const void *res, int act, void *C);
/* the small-M kernel's own copy of a kept float32 [N,K] constant, where it has one (else NULL) */
static float *smallm_own_panels(const float *W, int64_t N, int64_t K);
/* the same for a plain run-time weight (braze_matmul_w) */
static int smallm_w_applies(int64_t M, int64_t N, int64_t K, int transposed, int act);
static int smallm_w_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed,
                           const float *bias, const float *res, int act, float *C);

/* The packed layout the small-M kernel reads: 64-column panels of K (padded) rows, i.e.
 * oneDNN's BA16a64b for float32; for bfloat16 (AVX512_BF16 builds), BA16a64b2a: panels of K / 2
 * rows of 64 columns' pairs (k, k + 1), K padded to 32. Returns the padded K, or 0 for any other
 * layout or dtype. */
static int64_t smallm_layout(const_dnnl_memory_desc_t md, int64_t K, int dt) {
#if !defined(__AVX512F__)
    (void)md, (void)K, (void)dt;
    return 0; /* the kernel is AVX-512 only */
#endif
#if !defined(__AVX512BF16__)
    if (dt == BRAZE_DT_BF16) return 0;
#endif
    int nblks = 0, bf = dt == BRAZE_DT_BF16;
    dnnl_format_kind_t kind;
    dnnl_dims_t *blks, *idxs, *strides, *padded;
    if ((dt != BRAZE_DT_F32 && !bf) || dnnl_memory_desc_query(md, dnnl_query_format_kind, &kind) ||
        kind != dnnl_blocked || dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &nblks) ||
        nblks != 2 + bf || dnnl_memory_desc_query(md, dnnl_query_inner_blks, &blks) ||
        dnnl_memory_desc_query(md, dnnl_query_inner_idxs, &idxs) ||
        dnnl_memory_desc_query(md, dnnl_query_strides, &strides) ||
        dnnl_memory_desc_query(md, dnnl_query_padded_dims, &padded))
        return 0;
    int64_t kp = (*padded)[0], kb = bf ? 32 : 16; /* K rows per block */
    if ((*blks)[0] != 16 || (*blks)[1] != 64 || (*idxs)[0] != 0 || (*idxs)[1] != 1 || kp < K || kp % kb ||
        (bf && ((*blks)[2] != 2 || (*idxs)[2] != 0)) || (*strides)[0] != kb * 64 || (*strides)[1] != kp * 64)
        return 0;
    return kp;
}

/* The row stride, in elements of es bytes, that a plain weight with rows ld apart gets: ld plus a
 * cache line when the rows are a multiple of 4 KB apart (see pad_plain_rows), else 0 (none). */
static int64_t padded_ld(int64_t ld, size_t es) { return ((size_t)ld * es) % 4096 ? 0 : ld + (int64_t)(64 / es); }

/* Where oneDNN's matmul takes the weight plain (its AVX2 gemm:jit; AVX-512 picks a blocked
 * layout), a row stride that is a multiple of 4 KB puts the rows of a K-block of the weight in
 * the same L1 sets: BERT's 768 x 3072 FFN weight ran at 60 GFLOP/s against 127 with a stride of
 * 3 KB (docs/gemm.md). Such a weight is packed with its rows 64 bytes longer. Returns the padded
 * md in *out, or NULL when md needs none (or oneDNN refuses the padded one). */
static void pad_plain_rows(const_dnnl_memory_desc_t md, const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t dst,
                           int64_t K, int64_t N, int dt, dnnl_memory_desc_t *out) {
    int nblks = -1;
    dnnl_format_kind_t kind;
    dnnl_dims_t *strides;
    *out = NULL;
    if (dnnl_memory_desc_query(md, dnnl_query_format_kind, &kind) || kind != dnnl_blocked ||
        dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &nblks) || nblks != 0 ||
        dnnl_memory_desc_query(md, dnnl_query_strides, &strides) || ((*strides)[0] != 1 && (*strides)[1] != 1))
        return;
    int64_t ld = padded_ld((*strides)[0] == 1 ? (*strides)[1] : (*strides)[0], dt_size(dt)); /* ab: N; ba: K */
    if (!ld) return;
    dnnl_dims_t wd = {K, N}, st = {(*strides)[0] == 1 ? 1 : ld, (*strides)[1] == 1 ? 1 : ld};
    dnnl_memory_desc_t padded = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_create_with_strides(&padded, 2, wd, dt_of(dt), st) != dnnl_success) return;
    if (dnnl_matmul_primitive_desc_create(&pd, g_engine, src, padded, NULL, dst, NULL) != dnnl_success) {
        dnnl_memory_desc_destroy(padded);
        return;
    }
    dnnl_primitive_desc_destroy(pd);
    *out = padded;
}

#define PACK_M_HINT 128 /* representative M for picking the packed layout */
#define SMALL_M 2       /* at or below: plain weights, runtime M (see braze_matmul) */

/* What a braze_matmul call runs, from its BRAZE_PATH (act's other bits: the epilogue) */
enum { MM_SMALLM, MM_PER_M, MM_RUNTIME_M };
/* oneDNN's primitive for a call the small-M kernel does not take: GEMV-like calls (M <= SMALL_M)
 * run a plain-weight runtime-M primitive, as at M=1 the packed-weight kernel's overhead loses to it
 * (MLP batch 1: 2.45 -> 2.23 ms); a residual's run-time-M md is unsupported */
static int runtime_m_forced(void) { return __atomic_load_n(&g_runtime_m, __ATOMIC_RELAXED); }
static int dnnl_rule(int64_t M, int has_res) {
    return runtime_m_forced() || (M <= SMALL_M && !has_res) ? MM_RUNTIME_M : MM_PER_M;
}
static int mm_kernel(int64_t M, const braze_packed_b *B, int path, int act, int has_res) {
    switch (path) {
    case BRAZE_PATH_DNNL: return runtime_m_forced() ? MM_RUNTIME_M : MM_PER_M; /* BRAZE_DNNL_RUNTIME_M */
    case BRAZE_PATH_DNNL_RT: return has_res ? MM_PER_M : MM_RUNTIME_M;
    case BRAZE_PATH_SMALLM: return smallm_fits(B, M, act) && braze_dnnl_small_m() > 0 ? MM_SMALLM : dnnl_rule(M, has_res);
    default: return smallm_fits(B, M, act) && M <= braze_dnnl_small_m() ? MM_SMALLM : dnnl_rule(M, has_res);
    }
}

braze_packed_b *braze_pack_b_typed(const void *W, int w_dt, int dt, int64_t N, int64_t K, int transposed_layout,
                                   char *err, int errlen) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "braze_pack_b N=%lld K=%lld transposed=%d dtype=%s from %s", (long long)N,
             (long long)K, transposed_layout, dt_name(dt), dt_name(w_dt));
    braze_packed_b *B = NULL;
    dnnl_memory_desc_t plain = NULL, any = NULL, src = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (braze_dnnl_init(err, errlen)) return NULL;
    if (N < 0 || K < 0 || (!W && N > 0 && K > 0) || w_dt < 0 || w_dt > 2 || dt < 0 || dt > 2) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s, W=%p)", ctx, (const void *)W);
        return NULL;
    }
    B = (braze_packed_b *)calloc(1, sizeof *B);
    if (!B) goto oom;
    B->N = N;
    B->K = K;
    B->dt = dt;
    if (N == 0 || K == 0) return B; /* an empty weight: braze_matmul needs no primitive for it */
    {
        dnnl_dims_t wd = {K, N}, sd = {PACK_M_HINT, K}, dd = {PACK_M_HINT, N};
        DN(dnnl_memory_desc_create_with_tag(&plain, 2, wd, dt_of(w_dt),
                                            transposed_layout ? dnnl_ba : dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&any, 2, wd, dt_of(dt), dnnl_format_tag_any));
        DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dt_of(dt), dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
        DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, src, any, NULL, dst, NULL));
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_memory_desc_t padded = NULL;
        pad_plain_rows(want, src, dst, K, N, dt, &padded);
        if (padded)
            B->md = padded;
        else
            DN(dnnl_memory_desc_clone(&B->md, want));
        size_t sz = dnnl_memory_desc_get_size(B->md);
        B->data = weight_alloc(sz);
        if (!B->data) goto oom;
        if (do_reorder(plain, W, B->md, B->data, ctx, err, errlen)) goto fail;
        B->smallm_kp = smallm_layout(B->md, K, dt);
    }
    pthread_mutex_lock(&g_cache_mu);
    B->owner = g_next_owner++;
    pthread_mutex_unlock(&g_cache_mu);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_destroy(plain);
    dnnl_memory_desc_destroy(any);
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(dst);
    return B;
oom:
    set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (plain) dnnl_memory_desc_destroy(plain);
    if (any) dnnl_memory_desc_destroy(any);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (B) braze_free_packed_b(B);
    return NULL;
}

braze_packed_b *braze_pack_b_err(const float *W, int64_t N, int64_t K, int transposed_layout,
                                 char *err, int errlen) {
    return braze_pack_b_typed(W, BRAZE_DT_F32, BRAZE_DT_F32, N, K, transposed_layout, err, errlen);
}

braze_packed_b *braze_pack_b_const(const void *W, int w_dt, int dt, int64_t N, int64_t K, int transposed_layout,
                                   char *err, int errlen) {
    braze_packed_b *B = braze_pack_b_typed(W, w_dt, dt, N, K, transposed_layout, err, errlen);
    if (B && w_dt == BRAZE_DT_F32 && dt == BRAZE_DT_F32 && transposed_layout) {
        B->src = (const float *)W;
        B->panels = smallm_own_panels(B->src, N, K);
    }
    return B;
}

braze_packed_b *braze_pack_b(const float *W, int64_t N, int64_t K, int transposed_layout) {
    return braze_pack_b_err(W, N, K, transposed_layout, NULL, 0);
}

void braze_free_packed_b(braze_packed_b *B) {
    if (!B) return;
    if (B->owner) cache_drop_owner(B->owner);
    if (B->md) dnnl_memory_desc_destroy(B->md);
    free(B->data);
    free(B->panels);
    free(B);
}

/* Creates the matmul primitive for (M or runtime M) against the packed weight;
 * if the implementation for this M rejects the packed layout, makes one with
 * weights `any` and re-lays the weight out for it (kept in the entry). */
static int create_matmul_entry(cache_entry *e, int64_t M, const braze_packed_b *B, int has_bias,
                               int has_res, int act, int runtime_m, const char *ctx, char *err, int errlen) {
    int rc = 1;
    int64_t N = B->N, K = B->K;
    int64_t m = runtime_m ? DNNL_RUNTIME_DIM_VAL : M;
    dnnl_memory_desc_t src = NULL, dst = NULL, bias = NULL, res = NULL, any = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_dims_t sd = {m, K}, dd = {m, N}, bd = {1, N}, wd = {K, N};
    DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dt_of(SRC_DT(act)), dnnl_ab));
    DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dt_of(DST_DT(act)), dnnl_ab));
    if (has_bias) DN(dnnl_memory_desc_create_with_tag(&bias, 2, bd, dt_of(BIAS_DT(act)), dnnl_ab));
    if (has_res) DN(dnnl_memory_desc_create_with_tag(&res, 2, dd, dt_of(DST_DT(act)), dnnl_ab));
    DN(make_attr_ex(&attr, act, res, 1.f, has_res == RES_IN_C));
    /* runtime M: blocked weights get only the reference kernel; use a plain
     * [N,K] (torch) layout, which the brgemm kernel accepts with runtime dims */
    if (runtime_m || dnnl_matmul_primitive_desc_create(&pd, g_engine, src, B->md, bias, dst, attr) != dnnl_success) {
        pd = NULL;
        /* fallback: the layout this M wants */
        DN(dnnl_memory_desc_create_with_tag(&any, 2, wd, dt_of(B->dt),
                                            runtime_m ? dnnl_ba : dnnl_format_tag_any));
        DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, src, any, bias, dst, attr));
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        DN(dnnl_memory_desc_clone(&e->wei_md, want));
        e->wei_alt = weight_alloc(dnnl_memory_desc_get_size(want));
        if (!e->wei_alt) {
            set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
            goto fail;
        }
        if (do_reorder(B->md, B->data, want, e->wei_alt, ctx, err, errlen)) goto fail;
    } else {
        DN(dnnl_memory_desc_clone(&e->wei_md, B->md));
    }
    DN(clone_scratch_md(pd, &e->scratch_md));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bias) dnnl_memory_desc_destroy(bias);
    if (res) dnnl_memory_desc_destroy(res);
    if (any) dnnl_memory_desc_destroy(any);
    return rc;
}

typedef struct {
    int64_t M;
    const braze_packed_b *B;
    int has_bias, has_res, act, runtime_m;
    const char *ctx;
} mm_arg;

static int make_mm(cache_entry *e, void *a, char *err, int errlen) {
    mm_arg *m = (mm_arg *)a;
    return create_matmul_entry(e, m->M, m->B, m->has_bias, m->has_res, m->act, m->runtime_m, m->ctx, err, errlen);
}

/* C = act(bias) + residual (or act(bias + residual)) for a product over K = 0 terms: oneDNN
 * takes no zero-sized dims, and the product itself is all zeros. */
static float scalar_act(int act, float v) {
    switch (act & 0xff) {
    case BRAZE_ACT_RELU: return v > 0.f ? v : 0.f;
    case BRAZE_ACT_GELU_ERF: return 0.5f * v * (1.f + erff(v * 0.70710678f));
    case BRAZE_ACT_GELU_TANH: return 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    case BRAZE_ACT_SILU: return v / (1.f + expf(-v));
    case BRAZE_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case BRAZE_ACT_TANH: return tanhf(v);
    default: return v;
    }
}

static void empty_k_epilogue(int64_t M, int64_t N, const void *bias, const void *residual, int act, void *C) {
    /* an eager act comes last, after the rounding too: braze_after_act's, as after a primitive */
    int late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0, dd = DST_DT(act), a = eager_act(act) ? 0 : act;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float v = bias ? dt_load(bias, n, BIAS_DT(act)) : 0.f;
            float r = residual ? dt_load(residual, m * N + n, dd) : 0.f;
            dt_store(C, m * N + n, dd, late ? scalar_act(a, v + r) : scalar_act(a, v) + r);
        }
    braze_after_act(act, C, M * N);
}

/* The cache entry (the primitive) for this call's shape and epilogue, created if new: rm, one
 * primitive for every M (MM_RUNTIME_M). */
static cache_entry *matmul_entry(int64_t M, const braze_packed_b *B, int has_bias, int has_res, int act, int rm,
                                 const char *ctx, cache_entry *tmp, int *is_tmp, char *err, int errlen) {
    int64_t k[KEYLEN] = {1, B->owner, rm ? -1 : M, B->N, B->K, has_bias, has_res, act, rm};
    mm_arg arg = {M, B, has_bias, has_res, act, rm, ctx};
    return get_entry(k, make_mm, &arg, tmp, is_tmp, err, errlen);
}

int braze_matmul_prepare(int64_t M, const braze_packed_b *B, int has_bias, int has_res, int act) {
    char err[256], ctx[64] = "braze_matmul_prepare";
    dnnl_alg_kind_t alg;
    float al;
    int path = BRAZE_PATH_OF(act);
    act &= ~BRAZE_PATH_MASK;
    if (!B || M <= 0 || B->N <= 0 || B->K <= 0 || act_alg(act, &alg, &al) < 0 || braze_dnnl_init(err, sizeof err))
        return 1;
    int kernel = mm_kernel(M, B, path, act, has_res);
    if (kernel == MM_SMALLM) return 0; /* no primitive to create */
    cache_entry tmp;
    int is_tmp = 0;
    cache_entry *e = matmul_entry(M, B, has_bias, has_res, act, kernel == MM_RUNTIME_M, ctx, &tmp, &is_tmp, err,
                                  sizeof err);
    return prepared(e, &tmp, &is_tmp);
}

/* Checks braze_matmul's and braze_matmul_w's arguments; 0 to go on, 1 on an error (err set),
 * 2 when the call is done (an empty product; with K = 0, the epilogue alone). */
static int matmul_args(int64_t M, int64_t N, int64_t K, const void *A, int w_ok, const void *bias,
                       const void *residual, int act, void *C, const char *ctx, char *err, int errlen) {
    dnnl_alg_kind_t alg;
    float al;
    if (braze_dnnl_init(err, errlen)) return 1;
    if (M < 0 || N < 0 || K < 0 || (M > 0 && N > 0 && (!C || (K > 0 && (!A || !w_ok))))) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; A=%p C=%p)", ctx, (const void *)A, (void *)C);
        return 1;
    }
    if (act_alg(act, &alg, &al) < 0) {
        set_err(err, errlen, "braze_dnnl: unknown activation code %d (%s)", act, ctx);
        return 1;
    }
    if (eager_act_refused(act, residual != NULL, ctx, err, errlen)) return 1;
    if (M == 0 || N == 0) return 2;
    if (K == 0) {
        empty_k_epilogue(M, N, bias, residual, act, C);
        return 2;
    }
    return 0;
}

/* Runs a matmul entry's primitive: C[M,N] = epilogue(A[M,K] @ weights), the weights (in the
 * entry's layout) at wdata. */
static int run_matmul(const cache_entry *e, int64_t M, int64_t N, int64_t K, const void *A, const void *wdata,
                      const void *bias, const void *residual, int act, void *C, const char *ctx, char *err,
                      int errlen) {
    int rc = 1;
    dnnl_memory_t ma = NULL, mw = NULL, mb = NULL, mr = NULL, mc = NULL;
    dnnl_memory_desc_t src = NULL, dst = NULL, bmd = NULL;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    {
        dnnl_dims_t sd = {M, K}, dd = {M, N}, bd = {1, N};
        DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dt_of(SRC_DT(act)), dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dt_of(DST_DT(act)), dnnl_ab));
        DN(dnnl_memory_create(&ma, src, g_engine, (void *)A));
        DN(dnnl_memory_create(&mc, dst, g_engine, C));
        DN(dnnl_memory_create(&mw, e->wei_md, g_engine, (void *)wdata));
        dnnl_exec_arg_t args[6];
        int n = 0;
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ma};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mc};
        if (bias) {
            DN(dnnl_memory_desc_create_with_tag(&bmd, 2, bd, dt_of(BIAS_DT(act)), dnnl_ab));
            DN(dnnl_memory_create(&mb, bmd, g_engine, (void *)bias));
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
        }
        if (residual && residual != C) { /* a residual in C is the sum post-op's: it reads C itself */
            DN(dnnl_memory_create(&mr, dst, g_engine, (void *)residual));
            int idx = residual_post_op_index(act);
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1, mr};
        }
        if (run_primitive(e->prim, e->scratch_md, s, n, args, ctx, err, errlen)) goto fail;
        braze_after_act(act, C, M * N);
    }
    rc = 0;
fail:
    if (ma) dnnl_memory_destroy(ma);
    if (mw) dnnl_memory_destroy(mw);
    if (mb) dnnl_memory_destroy(mb);
    if (mr) dnnl_memory_destroy(mr);
    if (mc) dnnl_memory_destroy(mc);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bmd) dnnl_memory_desc_destroy(bmd);
    return rc;
}

int braze_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                 const void *bias, const void *residual, int act, void *C, char *err,
                 int errlen) {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "braze_matmul M=%lld N=%lld K=%lld bias=%d residual=%d act=%d",
             (long long)M, (long long)N, (long long)K, bias != NULL, residual != NULL, act);
    int path = BRAZE_PATH_OF(act);
    act &= ~BRAZE_PATH_MASK;
    int is_tmp = 0;
    cache_entry tmp, *e = NULL;
    if (!B) {
        set_err(err, errlen, "braze_dnnl: packed weight is NULL (%s)", ctx);
        return 1;
    }
    dnnl_alg_kind_t alg;
    float al;
    if (act_alg(act, &alg, &al) < 0) {
        set_err(err, errlen, "braze_dnnl: unknown activation code %d (%s)", act, ctx);
        return 1;
    }
    if (N != B->N || K != B->K || SRC_DT(act) != B->dt) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; packed weight is N=%lld K=%lld in %s, A in %s)",
                ctx, (long long)B->N, (long long)B->K, dt_name(B->dt), dt_name(SRC_DT(act)));
        return 1;
    }
    int go = matmul_args(M, N, K, A, 1, bias, residual, act, C, ctx, err, errlen);
    if (go) return go == 1;
    int has_res = res_kind(residual, C), kernel = mm_kernel(M, B, path, act, has_res);
    if (kernel == MM_SMALLM) {
        if (smallm_matmul(M, N, K, A, B, bias, residual, act, C)) return 0;
        kernel = dnnl_rule(M, has_res);
    }
    e = matmul_entry(M, B, bias != NULL, has_res, act, kernel == MM_RUNTIME_M, ctx, &tmp, &is_tmp, err, errlen);
    if (!e) return 1;
    int rc = run_matmul(e, M, N, K, A, e->wei_alt ? e->wei_alt : B->data, bias, residual, act, C, ctx, err, errlen);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

int64_t braze_time_matmul(int64_t reps, int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *const *Bs,
                          int nB, const void *bias, const void *residual, int act, void *C, char *err, int errlen) {
    if (reps < 0 || nB <= 0 || !Bs) {
        set_err(err, errlen, "braze_time_matmul: reps=%lld and %d weights", (long long)reps, nB);
        return -1;
    }
    int64_t t0 = now_ns();
    for (int64_t i = 0; i < reps; i++)
        if (braze_matmul(M, N, K, A, Bs[i % nB], bias, residual, act, C, err, errlen)) return -1;
    return now_ns() - t0;
}

/* ------------------------------------------------------------------ run-time weights */

typedef struct {
    int64_t M, N, K;
    int transposed, has_bias, has_res, act;
    const char *ctx;
    int64_t ld; /* the weight's row stride in elements when not dense (a padded copy), else 0 */
} mmw_arg;

/* A live weight whose rows are a multiple of 4 KB apart (GPT-2's 768 x 3072 Conv1D weight: 12 KB
 * rows) runs oneDNN's AVX2 gemm:jit at half speed, as a packed one did (pad_plain_rows). From
 * PAD_COPY_M rows of A the product runs on a copy with rows a line longer, made at each call in
 * the calling thread's scratchpad: the copy costs about one read and one write of the weight,
 * less than the slow product from there (docs/gemm.md). AVX-512 builds never copy: oneDNN's
 * brgemm re-blocks the weight itself. Returns the copy's row stride in elements, or 0. */
#define PAD_COPY_M 48
static int64_t live_pad_ld(int64_t M, int64_t N, int64_t K, int transposed, int act) {
#if defined(__AVX512F__)
    (void)M, (void)N, (void)K, (void)transposed, (void)act;
    return 0;
#else
    return M < PAD_COPY_M ? 0 : padded_ld(transposed ? K : N, dt_size(SRC_DT(act)));
#endif
}

/* A primitive reading the caller's plain weight as it is: [N,K] row-major (transposed) or
 * [K,N]. oneDNN's brgemm copies it into its blocked form block by block, in cache. */
static int make_mmw(cache_entry *e, void *a, char *err, int errlen) {
    mmw_arg *m = (mmw_arg *)a;
    const char *ctx = m->ctx;
    int rc = 1;
    dnnl_memory_desc_t src = NULL, dst = NULL, bias = NULL, res = NULL, wei = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_dims_t sd = {m->M, m->K}, dd = {m->M, m->N}, bd = {1, m->N}, wd = {m->K, m->N};
    int act = m->act;
    DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dt_of(SRC_DT(act)), dnnl_ab));
    DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dt_of(DST_DT(act)), dnnl_ab));
    if (m->ld) { /* [K,N] dims over a [N,K] (ba) or [K,N] (ab) copy with rows ld apart */
        dnnl_dims_t st = {m->transposed ? 1 : m->ld, m->transposed ? m->ld : 1};
        DN(dnnl_memory_desc_create_with_strides(&wei, 2, wd, dt_of(SRC_DT(act)), st));
    } else {
        DN(dnnl_memory_desc_create_with_tag(&wei, 2, wd, dt_of(SRC_DT(act)), m->transposed ? dnnl_ba : dnnl_ab));
    }
    if (m->has_bias) DN(dnnl_memory_desc_create_with_tag(&bias, 2, bd, dt_of(BIAS_DT(act)), dnnl_ab));
    if (m->has_res) DN(dnnl_memory_desc_create_with_tag(&res, 2, dd, dt_of(DST_DT(act)), dnnl_ab));
    DN(make_attr_ex(&attr, m->act, res, 1.f, m->has_res == RES_IN_C));
    DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, src, wei, bias, dst, attr));
    DN(dnnl_memory_desc_clone(&e->wei_md, wei));
    DN(clone_scratch_md(pd, &e->scratch_md));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (wei) dnnl_memory_desc_destroy(wei);
    if (bias) dnnl_memory_desc_destroy(bias);
    if (res) dnnl_memory_desc_destroy(res);
    return rc;
}

/* ld: live_pad_ld's stride for this call (0: the weight as it is) */
static cache_entry *matmul_w_entry(int64_t M, int64_t N, int64_t K, int transposed, int has_bias, int has_res,
                                   int act, int64_t ld, const char *ctx, cache_entry *tmp, int *is_tmp, char *err,
                                   int errlen) {
    int64_t k[KEYLEN] = {4, 0, M, N, K, transposed != 0, has_bias, has_res, act, ld};
    mmw_arg arg = {M, N, K, transposed != 0, has_bias, has_res, act, ctx, ld};
    return get_entry(k, make_mmw, &arg, tmp, is_tmp, err, errlen);
}

int braze_matmul_w_prepare(int64_t M, int64_t N, int64_t K, int transposed_layout, int has_bias, int has_res,
                           int act) {
    char err[256], ctx[64] = "braze_matmul_w_prepare";
    dnnl_alg_kind_t alg;
    float al;
    if (M <= 0 || N <= 0 || K <= 0 || act_alg(act, &alg, &al) < 0 || braze_dnnl_init(err, sizeof err)) return 1;
    if (smallm_w_applies(M, N, K, transposed_layout, act)) return 0;
    cache_entry tmp;
    int is_tmp = 0;
    cache_entry *e = matmul_w_entry(M, N, K, transposed_layout, has_bias, has_res, act,
                                    live_pad_ld(M, N, K, transposed_layout, act), ctx, &tmp, &is_tmp, err, sizeof err);
    return prepared(e, &tmp, &is_tmp);
}

int braze_matmul_w(int64_t M, int64_t N, int64_t K, const void *A, const void *W, int transposed_layout,
                   const void *bias, const void *residual, int act, void *C, char *err, int errlen) {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "braze_matmul_w M=%lld N=%lld K=%lld transposed=%d bias=%d residual=%d act=%d",
             (long long)M, (long long)N, (long long)K, transposed_layout, bias != NULL, residual != NULL, act);
    int go = matmul_args(M, N, K, A, W != NULL, bias, residual, act, C, ctx, err, errlen);
    if (go) return go == 1;
    if (smallm_w_matmul(M, N, K, (const float *)A, (const float *)W, transposed_layout, (const float *)bias,
                        (const float *)residual, act, (float *)C))
        return 0;
    int is_tmp = 0;
    int64_t ld = live_pad_ld(M, N, K, transposed_layout, act);
    if (ld) { /* the padded copy, made before anything is written to C (it may be the residual) */
        int64_t rows = transposed_layout ? N : K, cols = transposed_layout ? K : N;
        size_t es = dt_size(SRC_DT(act));
        char *copy = (char *)thread_scratch_at(2, (size_t)(rows * ld) * es);
        if (!copy) {
            set_err(err, errlen, "braze_dnnl: out of memory for a weight's padded copy (%s)", ctx);
            return 1;
        }
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            memcpy(copy + (size_t)(r * ld) * es, (const char *)W + (size_t)(r * cols) * es, (size_t)cols * es);
        W = copy;
    }
    cache_entry tmp, *e = matmul_w_entry(M, N, K, transposed_layout, bias != NULL, res_kind(residual, C), act, ld,
                                         ctx, &tmp, &is_tmp, err, errlen);
    if (!e) return 1;
    int rc = run_matmul(e, M, N, K, A, W, bias, residual, act, C, ctx, err, errlen);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

/* ------------------------------------------------------------------ batched matmul */

#define BMM_MAX_BATCH 4

typedef struct {
    int nb;
    const int64_t *ab, *bb;
    int64_t M, N, K;
    int ta, tb;
    float alpha;
    int types;
    const char *ctx;
} bmm_arg;

/* dims [bd..., r, c], dense row-major over [bd..., r, c], or over [bd..., c, r] when trans */
static int nd_desc(int nb, const int64_t *bd, int64_t r, int64_t c, int trans, dnnl_data_type_t dt,
                   dnnl_memory_desc_t *md) {
    dnnl_dims_t dims, strides;
    int nd = nb + 2;
    for (int i = 0; i < nb; i++) dims[i] = bd[i];
    dims[nb] = r;
    dims[nb + 1] = c;
    strides[nb] = trans ? 1 : c;
    strides[nb + 1] = trans ? r : 1;
    int64_t st = r * c;
    for (int i = nb - 1; i >= 0; i--) {
        strides[i] = st;
        st *= bd[i];
    }
    return dnnl_memory_desc_create_with_strides(md, nd, dims, dt, strides) != dnnl_success;
}

static int bmm_mds(const bmm_arg *m, dnnl_memory_desc_t *a, dnnl_memory_desc_t *w, dnnl_memory_desc_t *c) {
    int64_t cb[BMM_MAX_BATCH];
    for (int i = 0; i < m->nb; i++) cb[i] = m->ab[i] > m->bb[i] ? m->ab[i] : m->bb[i];
    dnnl_data_type_t in = dt_of(SRC_DT(m->types)), out = dt_of(DST_DT(m->types));
    return nd_desc(m->nb, m->ab, m->M, m->K, m->ta, in, a) || nd_desc(m->nb, m->bb, m->K, m->N, m->tb, in, w) ||
           nd_desc(m->nb, cb, m->M, m->N, 0, out, c);
}

static int make_bmm(cache_entry *e, void *p, char *err, int errlen) {
    bmm_arg *m = (bmm_arg *)p;
    const char *ctx = m->ctx;
    int rc = 1;
    dnnl_memory_desc_t a = NULL, w = NULL, c = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (bmm_mds(m, &a, &w, &c)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_strides failed (%s)", ctx);
        goto fail;
    }
    DN(make_attr(&attr, BRAZE_ACT_NONE, NULL, m->alpha));
    DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, a, w, NULL, c, attr));
    DN(clone_scratch_md(pd, &e->scratch_md));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (a) dnnl_memory_desc_destroy(a);
    if (w) dnnl_memory_desc_destroy(w);
    if (c) dnnl_memory_desc_destroy(c);
    return rc;
}

/* Up to braze_dnnl_small_bmm() rows (BMM_SMALL_M), a product on the small-M kernels (smallm_w_matmul:
 * A[M,K] against the caller's [K,N] or, transB, [N,K] matrix) per batch: attention at decode (q @ K^T,
 * p @ V, M = 1 query per head). With a matrix per thread the batches run in parallel; else on the
 * calling thread (braze's teams run a region inside the inactive one alone). A primitive per shape
 * cost 0.15-0.35 ms to create at each new sequence length, which at decode is every step. Against a
 * primitive already made, 0.64-1.15x its time at M = 1, 0.86-1.09x at 8-16, 1.05-1.83x at 32-48
 * (docs/gemm.md). float32, A untransposed; 0 where it does not apply or could not run (the caller
 * then runs oneDNN's). braze_dnnl_set_small_m(0) turns it off with the GEMMs' kernel. */
static int bmm_small(int types, int nb, const int64_t *ab, const int64_t *bb, int64_t M, int64_t N, int64_t K,
                     const void *A, int transA, const void *Bm, int transB, float alpha, void *C) {
    if (types || transA || M > braze_dnnl_small_bmm() || !smallm_w_applies(M, N, K, transB, BRAZE_ACT_NONE)) return 0;
    int64_t cb[BMM_MAX_BATCH], out = 1;
    for (int i = 0; i < nb; i++) out *= cb[i] = ab[i] > bb[i] ? ab[i] : bb[i];
    int ok = 1;
#pragma omp parallel for schedule(static) if (out > 1 && out >= omp_get_max_threads()) reduction(&& : ok)
    for (int64_t o = 0; o < out; o++) {
        int64_t ia = 0, ib = 0, r = o, sa = 1, sb = 1; /* o's index in each operand's batch (1 broadcasts) */
        for (int i = nb - 1; i >= 0; i--) {
            int64_t c = r % cb[i];
            r /= cb[i];
            ia += (ab[i] == 1 ? 0 : c) * sa;
            ib += (bb[i] == 1 ? 0 : c) * sb;
            sa *= ab[i];
            sb *= bb[i];
        }
        ok = smallm_w_matmul(M, N, K, (const float *)A + ia * M * K, (const float *)Bm + ib * K * N, transB, NULL,
                             NULL, BRAZE_ACT_NONE, (float *)C + o * M * N) && ok;
    }
    if (ok && alpha != 1.0f)
        for (int64_t i = 0; i < out * M * N; i++) ((float *)C)[i] *= alpha;
    return ok;
}

int braze_batch_matmul_typed(int types, int nb, const int64_t *a_batch, const int64_t *b_batch, int64_t M,
                             int64_t N, int64_t K, const void *A, int transA, const void *Bm, int transB,
                             float alpha, void *C, char *err, int errlen) {
    char ctx[300];
    int n = snprintf(ctx, sizeof ctx, "braze_batch_matmul M=%lld N=%lld K=%lld transA=%d transB=%d %s->%s batch A=[",
                     (long long)M, (long long)N, (long long)K, transA, transB, dt_name(SRC_DT(types)),
                     dt_name(DST_DT(types)));
    for (int i = 0; i < nb && i < BMM_MAX_BATCH && a_batch && n < 250; i++)
        n += snprintf(ctx + n, sizeof ctx - n, i ? ",%lld" : "%lld", (long long)a_batch[i]);
    n += snprintf(ctx + n, sizeof ctx - n, "] B=[");
    for (int i = 0; i < nb && i < BMM_MAX_BATCH && b_batch && n < 280; i++)
        n += snprintf(ctx + n, sizeof ctx - n, i ? ",%lld" : "%lld", (long long)b_batch[i]);
    snprintf(ctx + n, sizeof ctx - n, "]");
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_desc_t a = NULL, w = NULL, c = NULL;
    dnnl_memory_t ma = NULL, mw = NULL, mc = NULL;
    if (braze_dnnl_init(err, errlen)) return 1;
    int bad = nb < 1 || nb > BMM_MAX_BATCH || !a_batch || !b_batch || M < 0 || N < 0 || K < 0 ||
              (types & ~(BRAZE_TYPES_MASK & ~BRAZE_TYPES(0, 0, 3))) || SRC_DT(types) == 3 || DST_DT(types) == 3;
    int64_t out = 1;
    for (int i = 0; !bad && i < nb; i++) {
        int64_t p = a_batch[i], q = b_batch[i];
        bad = p < 0 || q < 0 || (p != q && p != 1 && q != 1);
        out *= p == 1 ? q : p; /* 1 broadcasts to q, even to 0 */
    }
    /* an empty tensor's data pointer may be NULL */
    bad = bad || (out > 0 && M > 0 && N > 0 && (!C || (K > 0 && (!A || !Bm))));
    if (bad) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; 1 to %d batch dims, each equal or 1 on one side)",
                ctx, BMM_MAX_BATCH);
        return 1;
    }
    if (out == 0 || M == 0 || N == 0) return 0;
    if (!C || (K > 0 && (!A || !Bm))) {
        set_err(err, errlen, "braze_dnnl: NULL data pointer (%s)", ctx);
        return 1;
    }
    if (K == 0) {
        memset(C, 0, (size_t)(out * M * N) * dt_size(DST_DT(types))); /* +0.0 in every dtype */
        return 0;
    }
    if (bmm_small(types, nb, a_batch, b_batch, M, N, K, A, transA, Bm, transB, alpha, C)) return 0;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    bmm_arg arg = {nb, a_batch, b_batch, M, N, K, transA != 0, transB != 0, alpha, types, ctx};
    {
        /* a primitive per shape: one with runtime M, N and K (gemm:jit instead of brgemm) was
         * as fast, but 10x further from eager on an attention sample (docs/gemm.md) */
        union { float f; int32_t i; } u = {alpha};
        int64_t k[KEYLEN] = {2, 0, nb, M, N, K, (transA != 0) | (transB != 0) << 1 | (int64_t)types << 2, u.i};
        for (int i = 0; i < nb; i++) {
            k[8 + i] = a_batch[i];
            k[8 + BMM_MAX_BATCH + i] = b_batch[i];
        }
        e = get_entry(k, make_bmm, &arg, &tmp, &is_tmp, err, errlen);
        if (!e) return 1;
    }
    if (bmm_mds(&arg, &a, &w, &c)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_strides failed (%s)", ctx);
        goto fail;
    }
    DN(dnnl_memory_create(&ma, a, g_engine, (void *)A));
    DN(dnnl_memory_create(&mw, w, g_engine, (void *)Bm));
    DN(dnnl_memory_create(&mc, c, g_engine, C));
    {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mc}};
        if (run_primitive(e->prim, e->scratch_md, s, 3, args, ctx, err, errlen)) goto fail;
    }
    rc = 0;
fail:
    if (ma) dnnl_memory_destroy(ma);
    if (mw) dnnl_memory_destroy(mw);
    if (mc) dnnl_memory_destroy(mc);
    if (a) dnnl_memory_desc_destroy(a);
    if (w) dnnl_memory_desc_destroy(w);
    if (c) dnnl_memory_desc_destroy(c);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

int braze_batch_matmul_bcast(int nb, const int64_t *a_batch, const int64_t *b_batch, int64_t M, int64_t N,
                             int64_t K, const float *A, int transA, const float *Bm, int transB, float alpha,
                             float *C, char *err, int errlen) {
    return braze_batch_matmul_typed(0, nb, a_batch, b_batch, M, N, K, A, transA, Bm, transB, alpha, C, err, errlen);
}

int braze_batch_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A, int transA,
                       const float *Bm, int transB, float alpha, float *C, char *err, int errlen) {
    return braze_batch_matmul_bcast(1, &batch, &batch, M, N, K, A, transA, Bm, transB, alpha, C, err, errlen);
}
