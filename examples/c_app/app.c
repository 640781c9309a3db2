/* Loads a braze artifact and runs it once, with no Python.
 *
 *   make ARTIFACT=/path/to/artifact
 *   ./app /path/to/artifact batch=2 seq=16 [--in prefix] [--out prefix]
 *
 * Every symbolic dim comes from a NAME=VALUE argument. With --in, input i's raw bytes are
 * read from <prefix><i>.bin; without, element j of input i is sin(i + j / 1000) for float
 * inputs and j % 7 for integer ones. The app prints the signature and each output's shape
 * and sum; with --out it writes output k's raw bytes to <prefix><k>.bin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braze_model.h"

static int64_t dim_value(const char *name, int argc, char **argv) {
    size_t n = strlen(name);
    for (int a = 2; a < argc; a++)
        if (strncmp(argv[a], name, n) == 0 && argv[a][n] == '=') return atoll(argv[a] + n + 1);
    return -1;
}

static void fill(braze_tensor *t, int i, int64_t numel) {
    for (int64_t j = 0; j < numel; j++) {
        double v = sin(i + j / 1000.0);
        switch (t->dtype) {
        case BRAZE_FLOAT32: ((float *)t->data)[j] = (float)v; break;
        case BRAZE_FLOAT64: ((double *)t->data)[j] = v; break;
        case BRAZE_INT64: ((int64_t *)t->data)[j] = j % 7; break;
        case BRAZE_INT32: ((int32_t *)t->data)[j] = (int32_t)(j % 7); break;
        default: memset((char *)t->data + j * braze_dtype_size(t->dtype), 0, (size_t)braze_dtype_size(t->dtype));
        }
    }
}

int main(int argc, char **argv) {
    char err[1024];
    const char *out_prefix = NULL, *in_prefix = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: %s ARTIFACT_DIR [NAME=VALUE ...] [--out PREFIX]\n", argv[0]);
        return 2;
    }
    for (int a = 2; a + 1 < argc; a++)
        if (strcmp(argv[a], "--out") == 0) out_prefix = argv[a + 1];
        else if (strcmp(argv[a], "--in") == 0) in_prefix = argv[a + 1];
    braze_model *m = braze_model_load(argv[1], err, sizeof err);
    if (!m) {
        fprintf(stderr, "load failed: %s\n", err);
        return 1;
    }
    int32_t n_in = braze_model_num_inputs(m), n_out = braze_model_num_outputs(m);
    braze_tensor *in = calloc((size_t)n_in, sizeof *in), *out = calloc((size_t)n_out, sizeof *out);
    int64_t(*shapes)[8] = calloc((size_t)n_in, sizeof *shapes);
    for (int i = 0; i < n_in; i++) {
        int32_t nd = braze_model_input_ndim(m, i);
        int64_t numel = 1;
        printf("input %d %s %s [", i, braze_model_input_name(m, i), braze_dtype_name(braze_model_input_dtype(m, i)));
        for (int d = 0; d < nd && d < 8; d++) {
            int64_t v = braze_model_input_dim(m, i, d);
            const char *sym = braze_model_input_dim_name(m, i, d);
            if (v < 0) v = dim_value(sym, argc, argv);
            if (v < 0) {
                fprintf(stderr, "give the size of %s as %s=VALUE\n", sym, sym);
                return 2;
            }
            printf("%s%lld", d ? ", " : "", (long long)v);
            shapes[i][d] = v;
            numel *= v;
        }
        printf("]\n");
        in[i] = (braze_tensor){malloc((size_t)(numel ? numel : 1) * 8), braze_model_input_dtype(m, i), nd, shapes[i]};
        if (!in_prefix) {
            fill(&in[i], i, numel);
            continue;
        }
        char path[4096];
        size_t bytes = (size_t)numel * (size_t)braze_dtype_size(in[i].dtype);
        snprintf(path, sizeof path, "%s%d.bin", in_prefix, i);
        FILE *f = fopen(path, "rb");
        if (!f || fread(in[i].data, 1, bytes, f) != bytes) {
            fprintf(stderr, "cannot read %zu bytes from %s\n", bytes, path);
            return 1;
        }
        fclose(f);
    }
    if (braze_model_run(m, in, n_in, out, n_out, err, sizeof err) != BRAZE_OK) {
        fprintf(stderr, "run failed: %s\n", err);
        return 1;
    }
    for (int k = 0; k < n_out; k++) {
        int64_t numel = braze_numel(&out[k]);
        double sum = 0;
        for (int64_t j = 0; out[k].dtype == BRAZE_FLOAT32 && j < numel; j++) sum += ((float *)out[k].data)[j];
        printf("output %d %s [", k, braze_model_output_name(m, k));
        for (int d = 0; d < out[k].ndim; d++) printf("%s%lld", d ? ", " : "", (long long)out[k].shape[d]);
        printf("] sum %.6g\n", sum);
        if (out_prefix) {
            char path[4096];
            snprintf(path, sizeof path, "%s%d.bin", out_prefix, k);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(out[k].data, (size_t)braze_dtype_size(out[k].dtype), (size_t)numel, f) != (size_t)numel) {
                fprintf(stderr, "cannot write %s\n", path);
                return 1;
            }
            fclose(f);
        }
        braze_tensor_release(&out[k]);
    }
    for (int i = 0; i < n_in; i++) free(in[i].data);
    free(in), free(out), free(shapes);
    braze_model_free(m);
    return 0;
}
