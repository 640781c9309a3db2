/* braze_dnnl_conv.c: convolution with prepacked weights and epilogues.
 * Follows braze_dnnl_core.c in one translation unit (see onednn.helper_text). */

/* ------------------------------------------------------------------ convolution */

#define CONV_MAX_ALT 4

struct braze_packed_conv {
    int64_t OC, IC, KH, KW, G, sh, sw, ph, pw, dh, dw;
    int64_t ph_end, pw_end; /* bottom / right padding (top / left: ph, pw) */
    int layout;
    int ohwi; /* the plain weights are [OC, KH, KW, IC] in memory (a channels-last OIHW tensor's) */
    int dt;   /* BRAZE_DT_*: the weights' dtype in every layout but `plain` */
    int w_dt; /* the plain weights' */
    int64_t owner;
    dnnl_memory_desc_t md; /* layout chosen at pack time (for a representative shape) */
    void *data;
    /* The caller's plain weights (kept alive by contract) and the other layouts later
     * shapes asked for, shared by their primitives. Reordering from the plain layout
     * takes a JIT reorder; blocked -> other blocked takes `simple:any` (76 ms for
     * 2048x1024 against 2.5 ms). Guarded by g_cache_mu (make_conv runs under it). */
    const void *plain;
    dnnl_memory_desc_t plain_md;
    int n_alt;
    dnnl_memory_desc_t alt_md[CONV_MAX_ALT];
    void *alt_data[CONV_MAX_ALT];
    wcache wc; /* run-time weights (a geometry from braze_conv_geometry): their re-laid-out copies */
    braze_live_b *lb; /* and conv_gemm's GEMM site, where it applies (NULL elsewhere) */
};

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t p_end, int64_t d) {
    return (in + p + p_end - d * (k - 1) - 1) / s + 1;
}

#define CONV_OH(P, H) conv_out(H, (P)->KH, (P)->sh, (P)->ph, (P)->ph_end, (P)->dh)
#define CONV_OW(P, W) conv_out(W, (P)->KW, (P)->sw, (P)->pw, (P)->pw_end, (P)->dw)

/* Memory descs of one conv call, src and dst in the dtypes of `types` (BRAZE_TYPES), weights
 * in P->dt and `any` layout, or (any_w = 0) plain torch layout in the plain weights' dtype. */
static int conv_mds(const braze_packed_conv *P, int64_t N, int64_t H, int64_t W, int any_w, int types,
                    dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei, dnnl_memory_desc_t *dst) {
    int64_t OH = CONV_OH(P, H), OW = CONV_OW(P, W);
    dnnl_format_tag_t t = P->layout ? dnnl_nhwc : dnnl_nchw;
    dnnl_dims_t sd = {N, P->IC, H, W}, dd = {N, P->OC, OH, OW};
    dnnl_data_type_t wdt = dt_of(any_w ? P->dt : P->w_dt);
    if (dnnl_memory_desc_create_with_tag(src, 4, sd, dt_of(SRC_DT(types)), t)) return 1;
    if (dnnl_memory_desc_create_with_tag(dst, 4, dd, dt_of(DST_DT(types)), t)) return 1;
    if (wei) {
        if (P->G == 1) {
            dnnl_dims_t wd = {P->OC, P->IC, P->KH, P->KW};
            if (dnnl_memory_desc_create_with_tag(wei, 4, wd, wdt,
                                                 any_w ? dnnl_format_tag_any : P->ohwi ? dnnl_ohwi : dnnl_oihw))
                return 1;
        } else {
            dnnl_dims_t wd = {P->G, P->OC / P->G, P->IC / P->G, P->KH, P->KW};
            if (dnnl_memory_desc_create_with_tag(wei, 5, wd, wdt, any_w ? dnnl_format_tag_any : dnnl_goihw))
                return 1;
        }
    }
    return 0;
}

static dnnl_status_t conv_pd(dnnl_primitive_desc_t *pd, const braze_packed_conv *P,
                             const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei,
                             const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst,
                             const_dnnl_primitive_attr_t attr) {
    dnnl_dims_t strides = {P->sh, P->sw}, dil = {P->dh - 1, P->dw - 1}, pad = {P->ph, P->pw},
                pad_end = {P->ph_end, P->pw_end};
    return dnnl_convolution_forward_primitive_desc_create(pd, g_engine, dnnl_forward_inference,
                                                          dnnl_convolution_direct, src, wei, bias,
                                                          dst, strides, dil, pad, pad_end, attr);
}

#define CONV_HW_HINT 56

/* A conv's geometry with no weights yet (checked; its owner id set), or NULL with err set. */
static braze_packed_conv *conv_new(int64_t OC, int64_t IC, int64_t KH, int64_t KW, int64_t groups,
                                   int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                   int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h, int64_t dil_w, int layout,
                                   int w_dt, int dt, char *ctx, size_t ctxlen, char *err, int errlen) {
    snprintf(ctx, ctxlen,
             "OC=%lld IC=%lld KH=%lld KW=%lld groups=%lld stride=%lldx%lld "
             "pad=%lld,%lld,%lld,%lld dil=%lldx%lld layout=%s dtype=%s from %s",
             (long long)OC, (long long)IC, (long long)KH, (long long)KW, (long long)groups,
             (long long)stride_h, (long long)stride_w, (long long)pad_h, (long long)pad_w,
             (long long)pad_h_end, (long long)pad_w_end, (long long)dil_h, (long long)dil_w, layout & 1 ? "nhwc" : "nchw",
             dt_name(dt), dt_name(w_dt));
    if (braze_dnnl_init(err, errlen)) return NULL;
    if (OC <= 0 || IC <= 0 || KH <= 0 || KW <= 0 || groups <= 0 || OC % groups || IC % groups ||
        stride_h <= 0 || stride_w <= 0 || pad_h < 0 || pad_w < 0 || pad_h_end < 0 || pad_w_end < 0 ||
        dil_h <= 0 || dil_w <= 0 || w_dt < 0 || w_dt > 2 || dt < 0 || dt > 2 ||
        layout < 0 || layout > 3 || (layout & 2 && groups != 1)) {
        set_err(err, errlen, "braze_dnnl: invalid conv arguments (%s)", ctx);
        return NULL;
    }
    braze_packed_conv *P = (braze_packed_conv *)calloc(1, sizeof *P);
    if (!P) {
        set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
        return NULL;
    }
    *P = (braze_packed_conv){.OC = OC, .IC = IC, .KH = KH, .KW = KW, .G = groups, .sh = stride_h,
                             .sw = stride_w, .ph = pad_h, .pw = pad_w, .dh = dil_h, .dw = dil_w,
                             .ph_end = pad_h_end, .pw_end = pad_w_end, .layout = layout & 1, .ohwi = layout >> 1,
                             .dt = dt, .w_dt = w_dt};
    dnnl_memory_desc_t s2 = NULL, d2 = NULL;
    int bad = conv_mds(P, 1, KH * dil_h, KW * dil_w, 0, 0, &s2, &P->plain_md, &d2);
    if (s2) dnnl_memory_desc_destroy(s2);
    if (d2) dnnl_memory_desc_destroy(d2);
    if (bad) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        braze_free_packed_conv(P);
        return NULL;
    }
    pthread_mutex_lock(&g_cache_mu);
    P->owner = g_next_owner++;
    pthread_mutex_unlock(&g_cache_mu);
    return P;
}

braze_packed_conv *braze_conv_geometry_typed(int dt, int64_t OC, int64_t IC, int64_t KH, int64_t KW,
                                             int64_t groups, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                             int64_t pad_w, int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h,
                                             int64_t dil_w, int layout, char *err, int errlen) {
    char ctx[320];
    braze_packed_conv *P = conv_new(OC, IC, KH, KW, groups, stride_h, stride_w, pad_h, pad_w, pad_h_end, pad_w_end,
                                    dil_h, dil_w, layout, dt, dt, ctx, sizeof ctx, err, errlen);
    /* the GEMM site reads an OIHW weight's rows in (ic, kh, kw) order: not an OHWI one */
    if (P && P->layout == 1 && !P->ohwi && P->G == 1 && P->KH * P->KW <= 64 && P->dt == BRAZE_DT_F32 &&
        !(P->lb = braze_live_b_new(OC, IC * KH * KW, 1, dt, err, errlen))) {
        braze_free_packed_conv(P);
        return NULL;
    }
    return P;
}

braze_packed_conv *braze_conv_geometry(int64_t OC, int64_t IC, int64_t KH, int64_t KW, int64_t groups,
                                       int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                       int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h, int64_t dil_w,
                                       int layout, char *err, int errlen) {
    return braze_conv_geometry_typed(BRAZE_DT_F32, OC, IC, KH, KW, groups, stride_h, stride_w, pad_h, pad_w,
                                     pad_h_end, pad_w_end, dil_h, dil_w, layout, err, errlen);
}

braze_packed_conv *braze_pack_conv_weights(const float *W, int64_t OC, int64_t IC, int64_t KH,
                                           int64_t KW, int64_t groups, int64_t stride_h,
                                           int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                           int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h,
                                           int64_t dil_w, int layout, char *err, int errlen) {
    return braze_pack_conv_typed(W, BRAZE_DT_F32, BRAZE_DT_F32, OC, IC, KH, KW, groups, stride_h, stride_w, pad_h,
                                 pad_w, pad_h_end, pad_w_end, dil_h, dil_w, layout, err, errlen);
}

braze_packed_conv *braze_pack_conv_typed(const void *W, int w_dt, int dt, int64_t OC, int64_t IC, int64_t KH,
                                         int64_t KW, int64_t groups, int64_t stride_h, int64_t stride_w,
                                         int64_t pad_h, int64_t pad_w, int64_t pad_h_end, int64_t pad_w_end,
                                         int64_t dil_h, int64_t dil_w, int layout, char *err, int errlen) {
    char ctx[320];
    dnnl_memory_desc_t src = NULL, wany = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (!W) {
        set_err(err, errlen, "braze_dnnl: braze_pack_conv_weights: the weight is NULL");
        return NULL;
    }
    braze_packed_conv *P = conv_new(OC, IC, KH, KW, groups, stride_h, stride_w, pad_h, pad_w, pad_h_end, pad_w_end,
                                    dil_h, dil_w, layout, w_dt, dt, ctx, sizeof ctx, err, errlen);
    if (!P) return NULL;
    P->plain = W;
    {
        /* representative input: big enough for the kernel window */
        int64_t hh = CONV_HW_HINT, ww = CONV_HW_HINT;
        int64_t need_h = dil_h * (KH - 1) + 1, need_w = dil_w * (KW - 1) + 1;
        if (hh < need_h) hh = need_h;
        if (ww < need_w) ww = need_w;
        if (conv_mds(P, 1, hh, ww, 1, BRAZE_TYPES(dt, dt, 0), &src, &wany, &dst)) {
            set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
            goto fail;
        }
        DN(conv_pd(&pd, P, src, wany, NULL, dst, NULL));
        DN(dnnl_memory_desc_clone(&P->md, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)));
        P->data = weight_alloc(dnnl_memory_desc_get_size(P->md));
        if (!P->data) {
            set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
            goto fail;
        }
        if (do_reorder(P->plain_md, W, P->md, P->data, ctx, err, errlen)) goto fail;
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(wany);
    dnnl_memory_desc_destroy(dst);
    return P;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (src) dnnl_memory_desc_destroy(src);
    if (wany) dnnl_memory_desc_destroy(wany);
    if (dst) dnnl_memory_desc_destroy(dst);
    braze_free_packed_conv(P);
    return NULL;
}

void braze_free_packed_conv(braze_packed_conv *P) {
    if (!P) return;
    if (P->owner) cache_drop_owner(P->owner);
    if (P->md) dnnl_memory_desc_destroy(P->md);
    if (P->plain_md) dnnl_memory_desc_destroy(P->plain_md);
    for (int i = 0; i < P->n_alt; i++) {
        dnnl_memory_desc_destroy(P->alt_md[i]);
        free(P->alt_data[i]);
    }
    wcache_free(&P->wc);
    braze_live_b_free(P->lb);
    free(P->data);
    free(P);
}

typedef struct {
    const braze_packed_conv *P;
    int64_t N, H, W;
    int has_bias, has_res, act; /* has_bias: 1 a bias, | 2 a scale before it (braze_conv2d_ws) */
    const char *ctx;
} conv_arg;

static int is_reference(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
           strncmp(impl, "ref", 3) == 0;
}

int64_t braze_conv_live_packs(const braze_packed_conv *P) { return P && P->lb ? braze_live_b_packs(P->lb) : 0; }

int braze_packed_conv_layouts(const braze_packed_conv *P) {
    pthread_mutex_lock(&g_cache_mu);
    int n = P ? 1 + P->n_alt : 0;
    pthread_mutex_unlock(&g_cache_mu);
    return n;
}

static void *conv_find_alt(const braze_packed_conv *P, const_dnnl_memory_desc_t md) {
    for (int i = 0; i < P->n_alt; i++)
        if (dnnl_memory_desc_equal(md, P->alt_md[i])) return P->alt_data[i];
    return NULL;
}

static int make_conv(cache_entry *e, void *p, char *err, int errlen) {
    conv_arg *c = (conv_arg *)p;
    braze_packed_conv *P = (braze_packed_conv *)c->P; /* its alternate layouts grow here */
    const char *ctx = c->ctx;
    int rc = 1;
    dnnl_memory_desc_t src = NULL, dst = NULL, wany = NULL, bias = NULL, chan = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int scaled = (c->has_bias & 2) != 0;
    if (conv_mds(P, c->N, c->H, c->W, 1, c->act, &src, &wany, &dst)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    if (scaled) { /* the scale and the bias: binary post-ops on [1, OC, 1, 1], the memory of [OC] */
        dnnl_dims_t cd = {1, P->OC, 1, 1};
        DN(dnnl_memory_desc_create_with_tag(&chan, 4, cd, dnnl_f32, dnnl_nchw));
    } else if (c->has_bias) {
        dnnl_dims_t bd = {P->OC};
        DN(dnnl_memory_desc_create_with_tag(&bias, 1, bd, dt_of(BIAS_DT(c->act)), dnnl_a));
    }
    /* the residual is a sum post-op (Y is preloaded with it): the JIT convolutions take
     * sum, while binary add sends oneDNN 3.2 to its reference kernel */
    DN(make_attr_chan(&attr, c->act, c->has_res ? dst : NULL, 1.f, 1, chan, scaled ? 1 + (c->has_bias & 1) : 0));
    /* weights `any`: the implementation picks its layout (a fixed packed layout can force
     * the reference kernel, e.g. for strided 1x1); re-lay the weights out when it differs */
    if (scaled) {
        /* the per-channel post-ops with a sum send some JIT convolutions (an RGB stem's) to the
         * reference kernel, 500 times slower: then the primitive applies nothing, and conv_apart
         * does it all over its result */
        dnnl_status_t st = conv_pd(&pd, P, src, wany, NULL, dst, attr);
        if (st != dnnl_success || is_reference(pd)) {
            if (pd) dnnl_primitive_desc_destroy(pd);
            pd = NULL;
            dnnl_primitive_attr_destroy(attr);
            attr = NULL;
            DN(make_attr_ex(&attr, 0, NULL, 1.f, 1));
            DN(conv_pd(&pd, P, src, wany, NULL, dst, attr));
            e->unfused = 1;
        }
    } else {
        DN(conv_pd(&pd, P, src, wany, bias, dst, attr));
    }
    if (!P->data) { /* run-time weights: each call re-lays them out with this reorder */
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        DN(dnnl_memory_desc_clone(&e->wei_md, want));
        DN(make_reorder(P->plain_md, want, &e->reorder, &e->reorder_scratch_md));
    } else {
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        DN(dnnl_memory_desc_clone(&e->wei_md, want));
        /* P's other layouts are shared by its entries, which may be created at once (the
         * cache lock guards them; the reorder runs outside it) */
        pthread_mutex_lock(&g_cache_mu);
        e->wei = dnnl_memory_desc_equal(want, P->md) ? P->data : conv_find_alt(P, want);
        pthread_mutex_unlock(&g_cache_mu);
        if (!e->wei) {
            void *data = weight_alloc(dnnl_memory_desc_get_size(want));
            if (!data) {
                set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
                goto fail;
            }
            if (do_reorder(P->plain_md, P->plain, want, data, ctx, err, errlen)) {
                free(data);
                goto fail;
            }
            pthread_mutex_lock(&g_cache_mu);
            void *other = conv_find_alt(P, want); /* made meanwhile by another thread */
            if (other) {
                e->wei = other;
                free(data);
            } else {
                e->wei = data;
                if (P->n_alt < CONV_MAX_ALT && !dnnl_memory_desc_clone(&P->alt_md[P->n_alt], want))
                    P->alt_data[P->n_alt++] = data;
                else
                    e->wei_alt = data; /* owned by this entry */
            }
            pthread_mutex_unlock(&g_cache_mu);
        }
    }
    DN(clone_scratch_md(pd, &e->scratch_md));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (wany) dnnl_memory_desc_destroy(wany);
    if (bias) dnnl_memory_desc_destroy(bias);
    if (chan) dnnl_memory_desc_destroy(chan);
    return rc;
}

static cache_entry *conv_entry(int64_t N, int64_t H, int64_t W, const braze_packed_conv *P, int has_bias,
                               int has_res, int act, const char *ctx, cache_entry *tmp, int *is_tmp, char *err,
                               int errlen) {
    int64_t k[KEYLEN] = {3, P->owner, N, H, W, has_bias, has_res, act};
    conv_arg arg = {P, N, H, W, has_bias, has_res, act, ctx};
    return get_entry(k, make_conv, &arg, tmp, is_tmp, err, errlen);
}

/* ------------------------------------------------------------------ run-time weights as a GEMM
 * A convolution with run-time weights and few output pixels is weight-bound: checking its cached
 * re-laid-out copy (one read of the weight for the fingerprint, braze_dnnl_wcache.c) costs about
 * 10 / M of its time at M = N x OH x OW pixels. Up to 48 pixels, where braze's own small-M
 * kernels run the GEMM, it runs as a GEMM site instead (braze_matmul_lw: a packed copy while the
 * page tables find the weight unwritten, else the plain weight read in place; beyond 48, oneDNN's
 * plain matmul is slower than the checked copy: docs/gemm.md): torch's OIHW weight is an
 * [OC, IC x KH x KW] matrix in the [N,K] layout, against columns of the NHWC input gathered in
 * the same (ic, kh, kw) order (a 1x1, stride-1, unpadded conv needs no columns: the input is A).
 * On ResNet-50's last stage at 5x5 pixels the plain weight ran 1.4x the frozen convolutions. */
static int g_conv_gemm_max = 48; /* atomic: the small-M plain-weight kernel's rows (docs/gemm.md) */

void braze_dnnl_set_conv_gemm_m(int max_m) { __atomic_store_n(&g_conv_gemm_max, max_m, __ATOMIC_RELAXED); }
int braze_dnnl_conv_gemm_m(void) { return __atomic_load_n(&g_conv_gemm_max, __ATOMIC_RELAXED); }

static int conv_gemm_applies(const braze_packed_conv *P, int64_t N, int64_t OH, int64_t OW, int act) {
    return P->lb && !(act & BRAZE_TYPES_MASK) && N * OH * OW <= braze_dnnl_conv_gemm_m();
}

/* What an unfused entry's primitive left to the helper, over its result T (NHWC, float32): Y =
 * act(T * scale + bias) + residual, or act(T * scale + bias + residual) (BRAZE_ACT_AFTER_RESIDUAL),
 * as oneDNN's post-ops compute it; act is eager's relu, relu6 or none. R may be Y. */
static void conv_apart(int act, const float *T, const float *scale, const float *bias, const float *R, float *Y,
                       int64_t pixels, int64_t OC) {
    int late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0, relu = eager_act(act);
#pragma omp parallel for schedule(static) if (pixels * OC >= 65536)
    for (int64_t p = 0; p < pixels; p++)
        for (int64_t c = 0; c < OC; c++) {
            int64_t i = p * OC + c;
            float v = T[i] * scale[c];
            if (bias) v += bias[c];
            if (R && late) v += R[i];
            if (relu) v = eager_relu(act, v);
            if (R && !late) v += R[i];
            Y[i] = v;
        }
}

static int conv_gemm_plain(const braze_packed_conv *P) {
    return P->KH == 1 && P->KW == 1 && P->sh == 1 && P->sw == 1 && !P->ph && !P->pw && !P->ph_end && !P->pw_end;
}

/* cols[m, (ic, kh, kw)] for the output pixels of X (NHWC): zero where a tap falls in the padding */
static void conv_gemm_columns(const braze_packed_conv *P, int64_t N, int64_t H, int64_t W, const float *X,
                              int64_t OH, int64_t OW, float *cols) {
    int64_t taps = P->KH * P->KW, IC = P->IC, M = N * OH * OW;
#pragma omp parallel for schedule(static) if (M * IC * taps > 65536)
    for (int64_t m = 0; m < M; m++) {
        int64_t n = m / (OH * OW), oh = m / OW % OH, ow = m % OW;
        const float *src[64]; /* KH x KW <= 64: conv_gemm_applies */
        for (int64_t kh = 0; kh < P->KH; kh++)
            for (int64_t kw = 0; kw < P->KW; kw++) {
                int64_t ih = oh * P->sh - P->ph + kh * P->dh, iw = ow * P->sw - P->pw + kw * P->dw;
                src[kh * P->KW + kw] = ih >= 0 && ih < H && iw >= 0 && iw < W ? X + ((n * H + ih) * W + iw) * IC : NULL;
            }
        float *c = cols + m * IC * taps;
        for (int64_t ic = 0; ic < IC; ic++)
            for (int64_t t = 0; t < taps; t++) *c++ = src[t] ? src[t][ic] : 0.0f;
    }
}

static int conv_gemm(int64_t N, int64_t H, int64_t W, const float *X, const braze_packed_conv *P, const float *Wt,
                     const float *bias, const float *residual, int act, int64_t OH, int64_t OW, float *Y,
                     const char *ctx, char *err, int errlen) {
    int64_t M = N * OH * OW, K = P->IC * P->KH * P->KW;
    const float *A = X;
    if (!conv_gemm_plain(P)) {
        /* slot 1: braze_matmul_w's kernels and primitives use slot 0 */
        float *cols = (float *)thread_scratch_at(1, (size_t)(M * K) * sizeof(float));
        if (!cols) {
            set_err(err, errlen, "braze_dnnl: out of memory (the columns of %s)", ctx);
            return 1;
        }
        conv_gemm_columns(P, N, H, W, X, OH, OW, cols);
        A = cols;
    }
    uint64_t gen = wtrack_gen(Wt, (size_t)(P->OC * K) * sizeof(float));
    return braze_matmul_lw(P->lb, gen, M, A, Wt, bias, residual, act, Y, err, errlen);
}

int braze_conv2d_prepare(int64_t N, int64_t H, int64_t W, const braze_packed_conv *P, int has_bias, int has_res,
                         int act) {
    char err[256], ctx[64] = "braze_conv2d_prepare";
    dnnl_alg_kind_t alg;
    float al;
    if (!P || N <= 0 || H <= 0 || W <= 0 || CONV_OH(P, H) <= 0 || CONV_OW(P, W) <= 0 ||
        act_alg(act, &alg, &al) < 0 || braze_dnnl_init(err, sizeof err))
        return 1;
    if (!(has_bias & 2) && conv_gemm_applies(P, N, CONV_OH(P, H), CONV_OW(P, W), act))
        return braze_matmul_lw_prepare(P->lb, N * CONV_OH(P, H) * CONV_OW(P, W), has_bias, has_res, act);
    cache_entry tmp;
    int is_tmp = 0;
    cache_entry *e = conv_entry(N, H, W, P, has_bias, has_res, act, ctx, &tmp, &is_tmp, err, sizeof err);
    return prepared(e, &tmp, &is_tmp);
}

/* braze_conv2d (Wt NULL: P's packed weights) and braze_conv2d_w (Wt: the plain weights of this
 * call, re-laid out into a per-thread buffer first). */
static int conv_call(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                     const void *scale, const void *bias, const void *residual, int act, int64_t OH, int64_t OW,
                     void *Y, char *err, int errlen) {
    char ctx[300];
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_desc_t src = NULL, dst = NULL, bmd = NULL;
    dnnl_memory_t mx = NULL, mw = NULL, mb = NULL, mr = NULL, my = NULL, ms = NULL;
    wuse use = {0};
    if (!P || !P->data != (Wt != NULL)) {
        set_err(err, errlen, "braze_dnnl: %s", !P ? "braze_conv2d: packed conv weight is NULL"
                : Wt ? "braze_conv2d_w: the conv was packed with constant weights (call braze_conv2d)"
                     : "braze_conv2d: the conv takes run-time weights (call braze_conv2d_w)");
        return 1;
    }
    snprintf(ctx, sizeof ctx,
             "braze_conv2d N=%lld IC=%lld H=%lld W=%lld -> OC=%lld OH=%lld OW=%lld kernel=%lldx%lld "
             "stride=%lldx%lld pad=%lld,%lld,%lld,%lld dil=%lldx%lld groups=%lld layout=%s bias=%d "
             "residual=%d act=%d scale=%d",
             (long long)N, (long long)P->IC, (long long)H, (long long)W, (long long)P->OC,
             (long long)OH, (long long)OW, (long long)P->KH, (long long)P->KW, (long long)P->sh,
             (long long)P->sw, (long long)P->ph, (long long)P->pw, (long long)P->ph_end,
             (long long)P->pw_end, (long long)P->dh,
             (long long)P->dw, (long long)P->G, P->layout ? "nhwc" : "nchw", bias != NULL,
             residual != NULL, act, scale != NULL);
    if (braze_dnnl_init(err, errlen)) return 1;
    if (scale && (!P->layout || (act & BRAZE_TYPES_MASK) || P->dt != BRAZE_DT_F32 ||
                  ((act & 0xff) && !eager_act(act)))) {
        set_err(err, errlen, "braze_dnnl: a scaled convolution is float32 NHWC, with relu, relu6 or no "
                "activation (%s)", ctx);
        return 1;
    }
    {
        dnnl_alg_kind_t alg;
        float al;
        if (act_alg(act, &alg, &al) < 0) {
            set_err(err, errlen, "braze_dnnl: unknown activation code %d (%s)", act, ctx);
            return 1;
        }
        if (eager_act_refused(act, residual != NULL, ctx, err, errlen)) return 1;
        if (SRC_DT(act) != P->dt) {
            set_err(err, errlen, "braze_dnnl: the input is %s but the weights are %s (%s)", dt_name(SRC_DT(act)),
                    dt_name(P->dt), ctx);
            return 1;
        }
    }
    if (N < 0 || H < 0 || W < 0 || OH != CONV_OH(P, H) || OW != CONV_OW(P, W) || OH <= 0 || OW <= 0) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; expected OH=%lld OW=%lld)", ctx,
                (long long)CONV_OH(P, H), (long long)CONV_OW(P, W));
        return 1;
    }
    if (N == 0) return 0; /* an empty batch (its data pointers may be NULL) */
    if (H == 0 || W == 0 || !X || !Y) {
        set_err(err, errlen, "braze_dnnl: conv2d of an input with zero height or width is not supported (%s)",
                ctx);
        return 1;
    }
    /* by M alone, never by whether the weight is tracked: the two ways give different bits */
    if (Wt && !scale && conv_gemm_applies(P, N, OH, OW, act))
        return conv_gemm(N, H, W, (const float *)X, P, (const float *)Wt, (const float *)bias, (const float *)residual,
                         act, OH, OW, (float *)Y, ctx, err, errlen);
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    e = conv_entry(N, H, W, P, (bias != NULL) | (scale != NULL) << 1, residual != NULL, act, ctx, &tmp, &is_tmp,
                   err, errlen);
    if (!e) return 1;
    if (conv_mds(P, N, H, W, 0, act, &src, NULL, &dst)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    {
        dnnl_exec_arg_t args[6];
        int n = 0;
        /* unfused: the primitive writes T, conv_apart the rest into Y */
        void *T = Y;
        if (e->unfused && !(T = thread_scratch_at(1, (size_t)(N * OH * OW * P->OC) * sizeof(float)))) {
            set_err(err, errlen, "braze_dnnl: out of memory (the result of %s)", ctx);
            goto fail;
        }
        DN(dnnl_memory_create(&mx, src, g_engine, (void *)X));
        DN(dnnl_memory_create(&my, dst, g_engine, T));
        const void *wdata = e->wei;
        if (Wt) {
            wdata = Wt;
            if (e->reorder) {
                size_t wbytes = (size_t)(P->OC * (P->IC / P->G) * P->KH * P->KW) * dt_size(P->w_dt);
                if (wcache_get((wcache *)&P->wc, P->plain_md, Wt, wbytes, wtrack_gen(Wt, wbytes), e->wei_md, e->reorder,
                               e->reorder_scratch_md, s, &use, ctx, err, errlen))
                    goto fail;
                wdata = use.data;
            }
        }
        DN(dnnl_memory_create(&mw, e->wei_md, g_engine, (void *)wdata));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, my};
        if (scale && !e->unfused) {
            dnnl_dims_t cd = {1, P->OC, 1, 1};
            DN(dnnl_memory_desc_create_with_tag(&bmd, 4, cd, dnnl_f32, dnnl_nchw));
            DN(dnnl_memory_create(&ms, bmd, g_engine, (void *)scale));
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, ms};
            if (bias) {
                DN(dnnl_memory_create(&mb, bmd, g_engine, (void *)bias));
                args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, mb};
            }
        } else if (bias && !scale) {
            dnnl_dims_t bd = {P->OC};
            DN(dnnl_memory_desc_create_with_tag(&bmd, 1, bd, dt_of(BIAS_DT(act)), dnnl_a));
            DN(dnnl_memory_create(&mb, bmd, g_engine, (void *)bias));
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
        }
        if (residual && residual != Y && !e->unfused)
            memcpy(Y, residual, (size_t)(N * OH * OW * P->OC) * dt_size(DST_DT(act)));
        if (run_primitive(e->prim, e->scratch_md, s, n, args, ctx, err, errlen)) goto fail;
        if (e->unfused)
            conv_apart(act, (const float *)T, (const float *)scale, (const float *)bias, (const float *)residual,
                       (float *)Y, N * OH * OW, P->OC);
        else
            braze_after_act(act, Y, N * OH * OW * P->OC);
    }
    rc = 0;
fail:
    if (mx) dnnl_memory_destroy(mx);
    if (mw) dnnl_memory_destroy(mw);
    if (use.data) wcache_release(&use);
    if (mb) dnnl_memory_destroy(mb);
    if (ms) dnnl_memory_destroy(ms);
    if (mr) dnnl_memory_destroy(mr);
    if (my) dnnl_memory_destroy(my);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bmd) dnnl_memory_desc_destroy(bmd);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

int braze_conv2d(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P,
                 const void *bias, const void *residual, int act, int64_t OH, int64_t OW, void *Y,
                 char *err, int errlen) {
    return conv_call(N, H, W, X, P, NULL, NULL, bias, residual, act, OH, OW, Y, err, errlen);
}

int braze_conv2d_w(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                   const void *bias, const void *residual, int act, int64_t OH, int64_t OW, void *Y,
                   char *err, int errlen) {
    if (!Wt) {
        set_err(err, errlen, "braze_dnnl: braze_conv2d_w: the weight is NULL");
        return 1;
    }
    return conv_call(N, H, W, X, P, Wt, NULL, bias, residual, act, OH, OW, Y, err, errlen);
}

int braze_conv2d_ws(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                    const void *scale, const void *bias, const void *residual, int act, int64_t OH, int64_t OW,
                    void *Y, char *err, int errlen) {
    if (!Wt || !scale) {
        set_err(err, errlen, "braze_dnnl: braze_conv2d_ws: the %s is NULL", Wt ? "scale" : "weight");
        return 1;
    }
    return conv_call(N, H, W, X, P, Wt, scale, bias, residual, act, OH, OW, Y, err, errlen);
}

int64_t braze_time_conv2d(int64_t reps, int64_t N, int64_t H, int64_t W, const void *X,
                          const braze_packed_conv *const *Ps, int nP, const void *bias, const void *residual,
                          int act, int64_t OH, int64_t OW, void *Y, char *err, int errlen) {
    if (reps < 0 || nP <= 0 || !Ps) {
        set_err(err, errlen, "braze_time_conv2d: reps=%lld and %d weights", (long long)reps, nP);
        return -1;
    }
    int64_t t0 = now_ns();
    for (int64_t i = 0; i < reps; i++)
        if (braze_conv2d(N, H, W, X, Ps[i % nP], bias, residual, act, OH, OW, Y, err, errlen)) return -1;
    return now_ns() - t0;
}
