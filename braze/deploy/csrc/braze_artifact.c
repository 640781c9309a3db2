/* braze_artifact.c: the loader compiled into an artifact's libbraze_model.so (braze_model.h).
 *
 * It follows the model's own C and a block braze.deploy writes for this artifact, which
 * defines: BZA_ENTRY, BZA_CREATE, BZA_DESTROY (the model's symbols), BZA_THREADS (the
 * compiled model's thread count, 0: OpenMP's default), BZA_ADAPT (1: fewer threads while the
 * cores are shared, braze_team.h), BZA_N_CONST,
 * bza_const_offset[] / bza_const_nbytes[] (each constant's bytes in the safetensors data
 * section), bza_files[][2] (file, SHA-256), bza_weights_sha256, BZA_ABI_VERSION,
 * BZA_BRAZE_VERSION, BZA_ISA, bza_cpu_missing() and the signature tables (bza_in_* /
 * bza_out_*).
 *
 * Loading checks, in this order, and fails with a message naming the file and what to do:
 * the CPU (before any instruction of the artifact's ISA can run), the files' digests,
 * meta.json's ABI version, the weights' digest. No Python, no compiler. The library cannot
 * check its own bytes; braze.load checks them against meta.json before loading it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("arch=x86-64") /* the loader's checks run on any x86-64 CPU */

/* ------------------------------------------------------------------ SHA-256 (FIPS 180-4) */

typedef struct {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t fill;
} bza_sha256;

static const uint32_t bza_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define BZA_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void bza_sha256_block(bza_sha256 *s, const unsigned char *p) {
    uint32_t w[64], a, b, c, d, e, f, g, h;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = BZA_ROR(w[i - 15], 7) ^ BZA_ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = BZA_ROR(w[i - 2], 17) ^ BZA_ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (BZA_ROR(e, 6) ^ BZA_ROR(e, 11) ^ BZA_ROR(e, 25)) + ((e & f) ^ (~e & g)) + bza_k[i] + w[i];
        uint32_t t2 = (BZA_ROR(a, 2) ^ BZA_ROR(a, 13) ^ BZA_ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d, s->h[4] += e, s->h[5] += f, s->h[6] += g,
        s->h[7] += h;
}

static void bza_sha256_init(bza_sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->fill = 0;
}

static void bza_sha256_update(bza_sha256 *s, const unsigned char *p, size_t n) {
    s->len += n;
    while (n) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, take);
        s->fill += take, p += take, n -= take;
        if (s->fill == 64) {
            bza_sha256_block(s, s->buf);
            s->fill = 0;
        }
    }
}

static void bza_sha256_hex(bza_sha256 *s, char out[65]) {
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0, lenb[8];
    bza_sha256_update(s, &pad, 1);
    while (s->fill != 56) bza_sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    bza_sha256_update(s, lenb, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}

/* ------------------------------------------------------------------ files */

/* The whole file (NUL-terminated after *size bytes), or NULL with a message. */
static char *bza_read(const char *dir, const char *name, size_t *size, char *err, int32_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        braze_fail(err, errlen, BRAZE_ERR_INTERNAL,
                   "braze artifact: %s: %s%s (copy the whole artifact directory again, or save it again)", path,
                   errno == ENOENT ? "the file is missing" : "cannot open it: ", errno == ENOENT ? "" : strerror(errno));
        return NULL;
    }
    char *data = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = (char *)malloc((size_t)n + 1)) != NULL && fread(data, 1, (size_t)n, f) == (size_t)n) {
        data[n] = 0;
        *size = (size_t)n;
        fclose(f);
        return data;
    }
    braze_fail(err, errlen, data ? BRAZE_ERR_INTERNAL : BRAZE_ERR_ALLOC, "braze artifact: %s: %s", path,
               data ? "cannot read the file" : "out of memory reading the file");
    free(data);
    fclose(f);
    return NULL;
}

static void bza_hex(const char *data, size_t n, char out[65]) {
    bza_sha256 s;
    bza_sha256_init(&s);
    bza_sha256_update(&s, (const unsigned char *)data, n);
    bza_sha256_hex(&s, out);
}

static int bza_mismatch(const char *dir, const char *name, char *err, int32_t errlen) {
    return braze_fail(err, errlen, BRAZE_ERR_INTERNAL,
                      "braze artifact: %s/%s: its SHA-256 does not match the one the artifact recorded (the file "
                      "was changed or damaged); copy the artifact again, or save it again",
                      dir, name);
}

/* Every file in bza_files (all but the library itself and meta.json, which hold their
 * digests; weights.safetensors is checked as it is read) matches its recorded SHA-256. */
static int bza_check_files(const char *dir, char *err, int32_t errlen) {
    char hex[65];
    for (int i = 0; i < BZA_N_FILES; i++) {
        if (strcmp(bza_files[i][0], "weights.safetensors") == 0) continue;
        size_t n;
        char *data = bza_read(dir, bza_files[i][0], &n, err, errlen);
        if (!data) return 1;
        bza_hex(data, n, hex);
        free(data);
        if (strcmp(hex, bza_files[i][1]) != 0) return bza_mismatch(dir, bza_files[i][0], err, errlen);
    }
    return 0;
}

/* meta.json's "abi_version" is the one this library was built for. */
static int bza_check_meta(const char *dir, char *err, int32_t errlen) {
    size_t n;
    char *meta = bza_read(dir, "meta.json", &n, err, errlen);
    if (!meta) return 1;
    const char *p = strstr(meta, "\"abi_version\":");
    long abi = p ? strtol(p + 14, NULL, 10) : -1;
    free(meta);
    if (abi != BZA_ABI_VERSION)
        return braze_fail(err, errlen, BRAZE_ERR_INTERNAL,
                          "braze artifact: %s/meta.json: ABI version %ld, but libbraze_model.so is built for ABI %d "
                          "(braze %s); save the model again with one braze version",
                          dir, abi, BZA_ABI_VERSION, BZA_BRAZE_VERSION);
    return 0;
}

#pragma GCC pop_options

/* ------------------------------------------------------------------ the model */

struct braze_model {
    braze_instance *inst;
    char *weights; /* the constants, each 64-byte aligned */
};

static void *bza_aligned(size_t n) { return aligned_alloc(64, (n + 63) & ~(size_t)63); }

/* The constants, 64-byte aligned, from weights.safetensors (whose digest the model holds). */
static char *bza_load_weights(const char *dir, void **ptrs, char *err, int32_t errlen) {
    size_t n;
    char hex[65];
    char *file = bza_read(dir, "weights.safetensors", &n, err, errlen);
    if (!file) return NULL;
    bza_hex(file, n, hex);
    if (strcmp(hex, bza_weights_sha256) != 0) {
        free(file);
        bza_mismatch(dir, "weights.safetensors", err, errlen);
        return NULL;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0 && n >= 8; i--) hlen = hlen << 8 | (unsigned char)file[i];
    size_t total = 0;
    for (int i = 0; i < BZA_N_CONST; i++) total += (bza_const_nbytes[i] + 63) & ~(int64_t)63;
    char *w = (char *)bza_aligned(total ? total : 64);
    if (!w) {
        free(file);
        braze_fail(err, errlen, BRAZE_ERR_ALLOC, "braze artifact: out of memory for the weights (%zu bytes)", total);
        return NULL;
    }
    size_t off = 0;
    for (int i = 0; i < BZA_N_CONST; i++) {
        memcpy(w + off, file + 8 + hlen + bza_const_offset[i], (size_t)bza_const_nbytes[i]);
        ptrs[i] = w + off;
        off += (bza_const_nbytes[i] + 63) & ~(int64_t)63;
    }
    free(file);
    return w;
}

BRAZE_EXPORT braze_model *braze_model_load(const char *artifact_dir, char *err, int32_t errlen) {
    if (err && errlen > 0) err[0] = 0;
    const char *missing = bza_cpu_missing();
    if (missing) {
        braze_fail(err, errlen, BRAZE_ERR_INTERNAL,
                   "braze artifact: %s/libbraze_model.so was compiled for %s, and this CPU lacks %s; compile the "
                   "model on (or for) a machine like this one",
                   artifact_dir ? artifact_dir : "?", BZA_ISA, missing);
        return NULL;
    }
    if (!artifact_dir) {
        braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "braze_model_load: artifact_dir is NULL");
        return NULL;
    }
    if (bza_check_files(artifact_dir, err, errlen) || bza_check_meta(artifact_dir, err, errlen)) return NULL;
    braze_model *m = (braze_model *)calloc(1, sizeof *m);
    void *ptrs[BZA_N_CONST > 0 ? BZA_N_CONST : 1];
    if (!m) {
        braze_fail(err, errlen, BRAZE_ERR_ALLOC, "braze_model_load: out of memory");
        return NULL;
    }
    m->weights = bza_load_weights(artifact_dir, ptrs, err, errlen);
    if (!m->weights || BZA_CREATE(ptrs, BZA_N_CONST, BZA_THREADS, &m->inst, err, errlen) != BRAZE_OK) {
        braze_model_free(m);
        return NULL;
    }
    braze_set_adapt(m->inst, BZA_ADAPT);
    return m;
}

void braze_model_free(braze_model *m) {
    if (!m) return;
    if (m->inst) BZA_DESTROY(m->inst);
    free(m->weights);
    free(m);
}

void braze_tensor_release(braze_tensor *t) {
    if (!t) return;
    free(t->data);
    free((void *)t->shape);
    t->data = NULL;
    t->shape = NULL;
}

typedef struct {
    braze_tensor *out;
    int32_t n;
} bza_call;

static void *bza_alloc(void *ctx, int32_t index, int32_t dtype, int32_t ndim, const int64_t *shape) {
    bza_call *c = (bza_call *)ctx;
    if (index < 0 || index >= c->n || c->out[index].data || ndim < 0) return NULL;
    size_t bytes = (size_t)braze_dtype_size(dtype);
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && bytes > SIZE_MAX / (size_t)shape[i])) return NULL;
        bytes *= (size_t)shape[i];
    }
    int64_t *sh = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
    void *data = bza_aligned(bytes ? bytes : 64);
    if (!sh || !data) {
        free(sh);
        free(data);
        return NULL;
    }
    memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
    c->out[index] = (braze_tensor){data, dtype, ndim, sh};
    return data;
}

int32_t braze_model_run(braze_model *m, const braze_tensor *inputs, int32_t n_inputs, braze_tensor *outputs,
                        int32_t n_outputs, char *err, int32_t errlen) {
    if (err && errlen > 0) err[0] = 0;
    if (!m || !outputs || (n_inputs > 0 && !inputs))
        BRAZE_FAIL(BRAZE_ERR_INTERNAL, "braze_model_run: model, inputs or outputs is NULL");
    if (n_inputs != BZA_N_IN)
        BRAZE_FAIL(BRAZE_ERR_RANK, "braze_model_run: the model takes %d inputs, got %d", BZA_N_IN, (int)n_inputs);
    if (n_outputs != BZA_N_OUT)
        BRAZE_FAIL(BRAZE_ERR_RANK, "braze_model_run: the model has %d outputs, got room for %d", BZA_N_OUT,
                   (int)n_outputs);
    memset(outputs, 0, sizeof *outputs * (size_t)n_outputs);
    bza_call c = {outputs, n_outputs};
    int32_t rc = BZA_ENTRY(m->inst, inputs, n_inputs, bza_alloc, &c, err, errlen);
    if (rc == BRAZE_OK)
        for (int32_t i = 0; i < n_outputs; i++)
            if (!outputs[i].data) rc = braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "output %d was not produced", i);
    if (rc != BRAZE_OK)
        for (int32_t i = 0; i < n_outputs; i++) braze_tensor_release(&outputs[i]);
    return rc;
}

/* ------------------------------------------------------------------ signature */

#define BZA_IN(i) ((i) >= 0 && (i) < BZA_N_IN)
#define BZA_OUT(i) ((i) >= 0 && (i) < BZA_N_OUT)

int32_t braze_model_num_inputs(const braze_model *m) { return m ? BZA_N_IN : -1; }
int32_t braze_model_num_outputs(const braze_model *m) { return m ? BZA_N_OUT : -1; }
const char *braze_model_input_name(const braze_model *m, int32_t i) { return m && BZA_IN(i) ? bza_in_name[i] : NULL; }
const char *braze_model_output_name(const braze_model *m, int32_t i) { return m && BZA_OUT(i) ? bza_out_name[i] : NULL; }
int32_t braze_model_input_dtype(const braze_model *m, int32_t i) { return m && BZA_IN(i) ? bza_in_dtype[i] : -1; }
int32_t braze_model_output_dtype(const braze_model *m, int32_t i) { return m && BZA_OUT(i) ? bza_out_dtype[i] : -1; }
int32_t braze_model_input_ndim(const braze_model *m, int32_t i) { return m && BZA_IN(i) ? bza_in_ndim[i] : -1; }
int32_t braze_model_output_ndim(const braze_model *m, int32_t i) { return m && BZA_OUT(i) ? bza_out_ndim[i] : -1; }

int64_t braze_model_input_dim(const braze_model *m, int32_t i, int32_t axis) {
    return m && BZA_IN(i) && axis >= 0 && axis < bza_in_ndim[i] ? bza_in_dims[bza_in_first[i] + axis] : -1;
}
int64_t braze_model_output_dim(const braze_model *m, int32_t i, int32_t axis) {
    return m && BZA_OUT(i) && axis >= 0 && axis < bza_out_ndim[i] ? bza_out_dims[bza_out_first[i] + axis] : -1;
}
const char *braze_model_input_dim_name(const braze_model *m, int32_t i, int32_t axis) {
    return m && BZA_IN(i) && axis >= 0 && axis < bza_in_ndim[i] ? bza_in_dim_names[bza_in_first[i] + axis] : "";
}
const char *braze_model_output_dim_name(const braze_model *m, int32_t i, int32_t axis) {
    return m && BZA_OUT(i) && axis >= 0 && axis < bza_out_ndim[i] ? bza_out_dim_names[bza_out_first[i] + axis] : "";
}

/* For braze.load: the compiled instance its Python calls run against. */
BRAZE_EXPORT braze_instance *braze_model_instance(braze_model *m) { return m ? m->inst : NULL; }
