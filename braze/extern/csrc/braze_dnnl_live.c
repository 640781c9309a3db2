/* braze_dnnl_live.c: GEMMs on live weights (plug-in mode: a weight is an input of every call)
 * at the speed of prepacked ones. Follows braze_dnnl_smallm*.c in one translation unit
 * (onednn.helper_text).
 *
 * braze_matmul_w reads the plain weight at each call; at small M its kernels run 1.1-1.4x the
 * packed weight's time (docs/gemm.md), which was most of BERT's live/frozen gap at batch 1. A
 * packed copy is sound only while the weight is known unwritten, and a fingerprint costs a full
 * read of the weight, about what the GEMM itself costs at small M. The kernel's page tables know
 * for far less (braze_live_check, braze_dnnl_wtrack.c). So each GEMM site keeps a packed copy per
 * weight it is called with (model instances sharing the library), made at the call that arms the
 * weight's range (its second) and again after a write, and used while its generation stays.
 * Training graphs have no sites (Options.weight_copies): every step writes the weights.
 *
 * A copy must not change a call's bits: the same inputs give the same result at every call. So in
 * a process that tracks writes every call computes in the packed kernel's arithmetic, on a copy
 * or without one (a weight not tracked yet, or not at all): braze_matmul_w's kernels give the
 * packed weight's bits already (tests/extern/test_onednn_live.py) except its small-M [N,K] one,
 * which the kernel that transposes the weight as it goes replaces here (smallw_nk_chunk). In a
 * process that does not (no kernel support, BRAZE_WRITE_TRACKING=0) there are no copies, and in
 * AVX2 builds neither, whose kernels' bits differ from a packed weight's (measured). */

#define LIVE_SLOTS 4

typedef struct {
    const void *w;     /* the plain weight this slot follows (NULL: empty) */
    uint64_t gen;      /* its write generation at the last call (braze_live_check) */
    uint64_t edges;    /* and the bytes on its partial pages then (wtrack_edges) */
    braze_packed_b *B; /* its bytes as of gen, packed; NULL until a call finds them unwritten */
    int pins;          /* calls running on B now */
    uint64_t used;
} live_slot;

struct braze_live_b {
    int64_t N, K;
    int transposed, dt;
    pthread_mutex_t mu;
    live_slot s[LIVE_SLOTS];
    uint64_t clock;
    int64_t packs; /* copies made, for tests */
};

braze_live_b *braze_live_b_new(int64_t N, int64_t K, int transposed_layout, int dt, char *err, int errlen) {
    if (N < 0 || K < 0 || dt < 0 || dt > 2) {
        set_err(err, errlen, "braze_dnnl: braze_live_b_new: invalid arguments (N=%lld K=%lld dtype code %d)",
                (long long)N, (long long)K, dt);
        return NULL;
    }
    braze_live_b *L = (braze_live_b *)calloc(1, sizeof *L);
    if (!L) {
        set_err(err, errlen, "braze_dnnl: braze_live_b_new: out of memory");
        return NULL;
    }
    *L = (braze_live_b){N, K, transposed_layout != 0, dt};
    pthread_mutex_init(&L->mu, NULL);
    return L;
}

void braze_live_b_free(braze_live_b *L) {
    if (!L) return;
    for (int i = 0; i < LIVE_SLOTS; i++) braze_free_packed_b(L->s[i].B);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

int64_t braze_live_b_packs(braze_live_b *L) {
    pthread_mutex_lock(&L->mu);
    int64_t n = L->packs;
    pthread_mutex_unlock(&L->mu);
    return n;
}

/* The slot following w, or one to follow it (empty, else the least recent unpinned); NULL when
 * all are pinned. Under L->mu. */
static live_slot *live_slot_for(braze_live_b *L, const void *w) {
    live_slot *victim = NULL;
    for (int i = 0; i < LIVE_SLOTS; i++) {
        live_slot *s = &L->s[i];
        if (s->w == w) return s;
        if (!s->pins && (!victim || !s->w || (victim->w && s->used < victim->used))) victim = s;
    }
    return victim;
}

/* W's packed copy as of gen (braze_live_check's), pinned; made here when there is none (the
 * call that arms W's range, and the first after each write); NULL to run without one. */
static braze_packed_b *live_packed(braze_live_b *L, const void *W, uint64_t gen) {
    uint64_t edges = wtrack_edges(W, (size_t)(L->N * L->K) * dt_size(L->dt));
    pthread_mutex_lock(&L->mu);
    live_slot *s = live_slot_for(L, W);
    braze_packed_b *B = NULL;
    int same = s && s->w == W && s->gen == gen && s->edges == edges;
    if (s && same && s->B) {
        B = s->B;
        s->pins++;
    } else if (s && !same && !s->pins) {
        braze_free_packed_b(s->B);
        *s = (live_slot){W, gen, edges};
        same = 1;
    }
    if (s) s->used = ++L->clock;
    pthread_mutex_unlock(&L->mu);
    if (B || !same) return B; /* a copy, or a slot another call is running on */
    /* pack it (outside the lock; a failure just means no copy) */
    B = braze_pack_b_typed(W, L->dt, L->dt, L->N, L->K, L->transposed, NULL, 0);
    if (!B) return NULL;
    int kept = 0;
    pthread_mutex_lock(&L->mu);
    if (s->w == W && s->gen == gen && s->edges == edges && !s->B && !s->pins) {
        s->B = B;
        s->pins++;
        L->packs++;
        kept = 1;
    }
    pthread_mutex_unlock(&L->mu);
    if (!kept) { /* another call packed or moved the slot meanwhile */
        braze_free_packed_b(B);
        return NULL;
    }
    return B;
}

static void live_unpin(braze_live_b *L, const braze_packed_b *B) {
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (L->s[i].B == B) L->s[i].pins--;
    pthread_mutex_unlock(&L->mu);
}

int braze_matmul_lw(braze_live_b *L, uint64_t gen, int64_t M, const void *A, const void *W, const void *bias,
                    const void *residual, int act, void *C, char *err, int errlen) {
    if (!L) {
        set_err(err, errlen, "braze_dnnl: braze_matmul_lw: the GEMM site is NULL");
        return 1;
    }
    int64_t N = L->N, K = L->K;
    int tracked = gen && M > 0 && N > 0 && K > 0 && W && SRC_DT(act) == L->dt;
#if !defined(BRAZE_SMALLW_NK)
    /* AVX2 builds: their [N,K] small-M kernel has no form in the packed kernel's arithmetic, and
     * from M = 48 their plain-weight products differ from a packed weight's in the last bits */
    tracked = 0;
#endif
    braze_packed_b *B = tracked && gen != WT_PENDING ? live_packed(L, W, gen) : NULL;
    if (B) {
        int rc = braze_matmul(M, N, K, A, B, bias, residual, act, C, err, errlen);
        live_unpin(L, B);
        return rc;
    }
#if defined(BRAZE_SMALLW_NK)
    /* braze_matmul_w's [N,K] small-M kernel sums in another order than the packed kernel. Where
     * this process tracks writes, any weight may have a copy at some call (an untracked one too,
     * once its memory changes kind), so every call runs the packed kernel's arithmetic */
    if (wtrack_on() && L->transposed && M > 0 && N > 0 && K > 0 && SRC_DT(act) == L->dt &&
        smallm_w_applies(M, N, K, 1, act)) {
        int go = matmul_args(M, N, K, A, W != NULL, bias, residual, act, C, "braze_matmul_lw", err, errlen);
        if (go) return go == 1;
        if (smallw_panel_matmul(M, N, K, (const float *)A, (const float *)W, 1, (const float *)bias,
                                (const float *)residual, act, (float *)C))
            return 0;
    }
#endif
    return braze_matmul_w(M, N, K, A, W, L->transposed, bias, residual, act, C, err, errlen);
}

int braze_matmul_lw_prepare(braze_live_b *L, int64_t M, int has_bias, int has_res, int act) {
    int rc = braze_matmul_w_prepare(M, L->N, L->K, L->transposed, has_bias, has_res, act);
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (L->s[i].B) rc |= braze_matmul_prepare(M, L->s[i].B, has_bias, has_res, act);
    pthread_mutex_unlock(&L->mu);
    return rc;
}
