/* braze_dnnl_conv_bwd.c: a convolution's gradients (training), float32, run-time weights.
 * Follows braze_dnnl_conv.c in one translation unit (see onednn.helper_text).
 *
 * Both take a geometry from braze_conv_geometry (its layout: the activations' NCHW or NHWC) and
 * the plain weight [OC, IC/groups, KH, KW]. oneDNN picks the weights' layout (`any`), and the
 * activations' too when they are NCHW: on plain NCHW oneDNN falls back to im2col + GEMM, so those
 * are reordered into its blocked layout and back around the call. NHWC activations are used as
 * they are: oneDNN's backward kernels read channels-last directly. Measured on a small convnet's
 * training step (Zen 5, 2 threads): the NCHW activations' reorders took 1.1 ms of the step's 6.7 ms
 * in oneDNN. Some weight gradients run slower on NHWC than on the blocked layout (16x32x48x48 into
 * 64 3x3 filters, stride 2: 1.27 against 0.76 ms), but reordering NHWC into it costs more still
 * (the step's four weight gradients: 2.8 ms a step with the reorders, 2.7 ms without). */

/* ------------------------------------------------------------------ backward */

enum { CONV_BWD_DATA = 0, CONV_BWD_WEIGHTS = 1 };

typedef struct {
    const braze_packed_conv *P;
    int64_t N, H, W;
    int dir;
    const char *ctx;
} conv_bwd_arg;

/* One backward primitive with its reorders. The cache entry holds the primitive; the layouts it
 * wants (diff_dst, and src or weights, and the result) live in this struct, one per entry, found
 * through the entry's wei_alt (entry_release frees it, through alt_release). */
typedef struct {
    dnnl_memory_desc_t in_md[2];  /* the primitive's inputs: diff_dst and (weights | src) */
    dnnl_memory_desc_t out_md;    /* its result: diff_src | diff_weights */
    dnnl_memory_desc_t plain_in[2], plain_out;
    dnnl_primitive_t in_re[2], out_re; /* plain -> wanted, wanted -> plain (NULL: same layout) */
    dnnl_memory_desc_t scratch[3];     /* the reorders' scratchpads */
} conv_bwd_plan;

static void conv_bwd_plan_free(void *p) {
    conv_bwd_plan *q = (conv_bwd_plan *)p;
    if (!q) return;
    for (int i = 0; i < 2; i++) {
        if (q->in_md[i]) dnnl_memory_desc_destroy(q->in_md[i]);
        if (q->plain_in[i]) dnnl_memory_desc_destroy(q->plain_in[i]);
        if (q->in_re[i]) dnnl_primitive_destroy(q->in_re[i]);
    }
    for (int i = 0; i < 3; i++)
        if (q->scratch[i]) dnnl_memory_desc_destroy(q->scratch[i]);
    if (q->out_md) dnnl_memory_desc_destroy(q->out_md);
    if (q->plain_out) dnnl_memory_desc_destroy(q->plain_out);
    if (q->out_re) dnnl_primitive_destroy(q->out_re);
}

static int make_conv_bwd(cache_entry *e, void *p, char *err, int errlen) {
    conv_bwd_arg *c = (conv_bwd_arg *)p;
    const braze_packed_conv *P = c->P;
    const char *ctx = c->ctx;
    int rc = 1;
    dnnl_memory_desc_t src = NULL, dst = NULL, wei = NULL, src_any = NULL, dst_any = NULL, wei_any = NULL;
    dnnl_primitive_desc_t fwd = NULL, pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    conv_bwd_plan *q = (conv_bwd_plan *)calloc(1, sizeof *q);
    if (!q) {
        set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
        return 1;
    }
    e->wei_alt = q;
    e->alt_release = conv_bwd_plan_free;
    if (conv_mds(P, c->N, c->H, c->W, 0, 0, &src, &wei, &dst)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    {
        int64_t OH = CONV_OH(P, c->H), OW = CONV_OW(P, c->W);
        dnnl_dims_t sd = {c->N, P->IC, c->H, c->W}, dd = {c->N, P->OC, OH, OW};
        dnnl_format_tag_t act = P->layout ? dnnl_nhwc : dnnl_format_tag_any;
        DN(dnnl_memory_desc_create_with_tag(&src_any, 4, sd, dnnl_f32, act));
        DN(dnnl_memory_desc_create_with_tag(&dst_any, 4, dd, dnnl_f32, act));
        if (P->G == 1) {
            dnnl_dims_t wd = {P->OC, P->IC, P->KH, P->KW};
            DN(dnnl_memory_desc_create_with_tag(&wei_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
        } else {
            dnnl_dims_t wd = {P->G, P->OC / P->G, P->IC / P->G, P->KH, P->KW};
            DN(dnnl_memory_desc_create_with_tag(&wei_any, 5, wd, dnnl_f32, dnnl_format_tag_any));
        }
    }
    dnnl_dims_t strides = {P->sh, P->sw}, dil = {P->dh - 1, P->dw - 1}, pad = {P->ph, P->pw},
                pad_end = {P->ph_end, P->pw_end};
    DN(dnnl_convolution_forward_primitive_desc_create(&fwd, g_engine, dnnl_forward_training, dnnl_convolution_direct,
                                                      src_any, wei_any, NULL, dst_any, strides, dil, pad, pad_end,
                                                      NULL));
    DN(make_user_scratch_attr(&attr));
    if (c->dir == CONV_BWD_DATA)
        DN(dnnl_convolution_backward_data_primitive_desc_create(&pd, g_engine, dnnl_convolution_direct, src_any,
                                                                wei_any, dst_any, strides, dil, pad, pad_end, fwd,
                                                                attr));
    else
        DN(dnnl_convolution_backward_weights_primitive_desc_create(&pd, g_engine, dnnl_convolution_direct, src_any,
                                                                   wei_any, NULL, dst_any, strides, dil, pad,
                                                                   pad_end, fwd, attr));
    {
        int second = c->dir == CONV_BWD_DATA ? dnnl_query_weights_md : dnnl_query_src_md;
        int out = c->dir == CONV_BWD_DATA ? dnnl_query_diff_src_md : dnnl_query_diff_weights_md;
        DN(dnnl_memory_desc_clone(&q->in_md[0], dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0)));
        DN(dnnl_memory_desc_clone(&q->in_md[1], dnnl_primitive_desc_query_md(pd, second, 0)));
        DN(dnnl_memory_desc_clone(&q->out_md, dnnl_primitive_desc_query_md(pd, out, 0)));
        DN(dnnl_memory_desc_clone(&q->plain_in[0], dst));
        DN(dnnl_memory_desc_clone(&q->plain_in[1], c->dir == CONV_BWD_DATA ? wei : src));
        DN(dnnl_memory_desc_clone(&q->plain_out, c->dir == CONV_BWD_DATA ? src : wei));
    }
    for (int i = 0; i < 2; i++) DN(make_reorder(q->plain_in[i], q->in_md[i], &q->in_re[i], &q->scratch[i]));
    DN(make_reorder(q->out_md, q->plain_out, &q->out_re, &q->scratch[2]));
    DN(clone_scratch_md(pd, &e->scratch_md));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fwd) dnnl_primitive_desc_destroy(fwd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    dnnl_memory_desc_t mds[6] = {src, dst, wei, src_any, dst_any, wei_any};
    for (int i = 0; i < 6; i++)
        if (mds[i]) dnnl_memory_desc_destroy(mds[i]);
    return rc;
}

/* Per-thread buffers for the reordered operands and the result (slots 3-5: thread_scratch_at). */
static void *conv_bwd_buffer(int slot, const_dnnl_memory_desc_t md, const char *ctx, char *err, int errlen) {
    void *b = thread_scratch_at(3 + slot, dnnl_memory_desc_get_size(md));
    if (!b) set_err(err, errlen, "braze_dnnl: out of memory (%zu bytes; %s)", dnnl_memory_desc_get_size(md), ctx);
    return b;
}

/* a gradient of no pixels: no input gradient to write, a zero weight gradient (float32) */
static int conv_bwd_of_nothing(int dir, const braze_packed_conv *P, void *out) {
    if (dir == CONV_BWD_WEIGHTS && out) memset(out, 0, (size_t)(P->OC * (P->IC / P->G) * P->KH * P->KW) * 4);
    return 0;
}

static int conv_bwd_call(int dir, int64_t N, int64_t H, int64_t W, const void *dY, const void *other,
                         const braze_packed_conv *P, int64_t OH, int64_t OW, void *out, char *err, int errlen) {
    char ctx[300];
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_t m[3] = {NULL, NULL, NULL};
    const char *name = dir == CONV_BWD_DATA ? "braze_conv2d_bwd_data" : "braze_conv2d_bwd_weights";
    if (!P || P->data || P->dt != BRAZE_DT_F32) {
        set_err(err, errlen, "braze_dnnl: %s: %s", name,
                !P ? "the conv geometry is NULL" : "takes a float32 geometry from braze_conv_geometry");
        return 1;
    }
    snprintf(ctx, sizeof ctx,
             "%s N=%lld IC=%lld H=%lld W=%lld -> OC=%lld OH=%lld OW=%lld kernel=%lldx%lld stride=%lldx%lld "
             "pad=%lld,%lld,%lld,%lld dil=%lldx%lld groups=%lld layout=%s",
             name, (long long)N, (long long)P->IC, (long long)H, (long long)W, (long long)P->OC, (long long)OH,
             (long long)OW, (long long)P->KH, (long long)P->KW, (long long)P->sh, (long long)P->sw, (long long)P->ph,
             (long long)P->pw, (long long)P->ph_end, (long long)P->pw_end, (long long)P->dh, (long long)P->dw,
             (long long)P->G, P->layout ? "nhwc" : "nchw");
    if (N >= 0 && (H == 0 || W == 0) && OH >= 0 && OW >= 0) /* an empty input (a transposed convolution's
        padding can eat all of it; fuzz seed 7442: a zero-sized dim) */
        return conv_bwd_of_nothing(dir, P, out);
    if (N >= 0 && H > 0 && W > 0 && OH == CONV_OH(P, H) && OW == CONV_OW(P, W) && (OH == 0 || OW == 0)) {
        /* the forward convolution's output is empty (a dilated kernel wider than the padded input,
         * fuzz seed 5532): both gradients are zeros (oneDNN takes no zero-sized dims) */
        size_t n = dir == CONV_BWD_DATA ? (size_t)(N * P->IC * H * W)
                                        : (size_t)(P->OC * (P->IC / P->G) * P->KH * P->KW);
        if (n && out) memset(out, 0, n * 4);
        return 0;
    }
    if (braze_dnnl_init(err, errlen)) return 1;
    if (N < 0 || H <= 0 || W <= 0 || OH != CONV_OH(P, H) || OW != CONV_OW(P, W) || OH <= 0 || OW <= 0) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; expected OH=%lld OW=%lld)", ctx,
                (long long)CONV_OH(P, H), (long long)CONV_OW(P, W));
        return 1;
    }
    if (N == 0) return conv_bwd_of_nothing(dir, P, out); /* an empty batch */
    if (!dY || !other || !out) {
        set_err(err, errlen, "braze_dnnl: a NULL tensor (%s)", ctx);
        return 1;
    }
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    {
        int64_t k[KEYLEN] = {5 + dir, P->owner, N, H, W};
        conv_bwd_arg arg = {P, N, H, W, dir, ctx};
        e = get_entry(k, make_conv_bwd, &arg, &tmp, &is_tmp, err, errlen);
    }
    if (!e) return 1;
    {
        const conv_bwd_plan *q = (const conv_bwd_plan *)e->wei_alt;
        const void *ins[2] = {dY, other};
        void *ready[2];
        for (int i = 0; i < 2; i++) {
            ready[i] = (void *)ins[i];
            if (q->in_re[i]) {
                if (!(ready[i] = conv_bwd_buffer(i, q->in_md[i], ctx, err, errlen))) goto fail;
                if (run_reorder(q->in_re[i], q->scratch[i], s, q->plain_in[i], ins[i], q->in_md[i], ready[i], ctx,
                                  err, errlen))
                    goto fail;
            }
        }
        void *res = out;
        if (q->out_re && !(res = conv_bwd_buffer(2, q->out_md, ctx, err, errlen))) goto fail;
        dnnl_exec_arg_t args[4];
        DN(dnnl_memory_create(&m[0], q->in_md[0], g_engine, ready[0]));
        DN(dnnl_memory_create(&m[1], q->in_md[1], g_engine, ready[1]));
        DN(dnnl_memory_create(&m[2], q->out_md, g_engine, res));
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m[0]};
        args[1] = (dnnl_exec_arg_t){dir == CONV_BWD_DATA ? DNNL_ARG_WEIGHTS : DNNL_ARG_SRC, m[1]};
        args[2] = (dnnl_exec_arg_t){dir == CONV_BWD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_DIFF_WEIGHTS, m[2]};
        if (run_primitive(e->prim, e->scratch_md, s, 3, args, ctx, err, errlen)) goto fail;
        if (q->out_re &&
            run_reorder(q->out_re, q->scratch[2], s, q->out_md, res, q->plain_out, out, ctx, err, errlen))
            goto fail;
    }
    rc = 0;
fail:
    for (int i = 0; i < 3; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

int braze_conv2d_bwd_data(int64_t N, int64_t H, int64_t W, const void *dY, const braze_packed_conv *P, const void *Wt,
                          int64_t OH, int64_t OW, void *dX, char *err, int errlen) {
    return conv_bwd_call(CONV_BWD_DATA, N, H, W, dY, Wt, P, OH, OW, dX, err, errlen);
}

int braze_conv2d_bwd_weights(int64_t N, int64_t H, int64_t W, const void *X, const void *dY,
                             const braze_packed_conv *P, int64_t OH, int64_t OW, void *dW, char *err, int errlen) {
    return conv_bwd_call(CONV_BWD_WEIGHTS, N, H, W, dY, X, P, OH, OW, dW, err, errlen);
}
