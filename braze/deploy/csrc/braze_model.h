/* braze_model.h: the C API of a braze artifact (a directory written by CompiledModel.save or
 * `braze compile`). Build an application with
 *
 *     cc app.c -I DIR DIR/libbraze_model.so -Wl,-rpath,DIR
 *
 * and it runs with no Python: libbraze_model.so finds the libraries it needs next to itself.
 *
 * Every function that can fail returns NULL or a nonzero BRAZE_ERR_* code and writes a
 * NUL-terminated message into err[0..errlen). Nothing here aborts the process.
 * One loaded model may be run from many threads at once. */
#ifndef BRAZE_MODEL_H
#define BRAZE_MODEL_H

#include "braze_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct braze_model braze_model; /* a loaded artifact */

/* Loads the artifact in artifact_dir: checks every file against its SHA-256 (SHA256SUMS),
 * the ABI and braze versions and the CPU's instruction set, then reads the weights and
 * prepares the model. NULL on error, with the message in err. */
BRAZE_EXPORT braze_model *braze_model_load(const char *artifact_dir, char *err, int32_t errlen);

/* Runs the model. inputs: n_inputs tensors in declaration order (row-major, contiguous).
 * outputs: an array of n_outputs braze_tensor that braze fills: data and shape are
 * allocated here; release each with braze_tensor_release. On error nothing is allocated,
 * and the model stays usable. */
BRAZE_EXPORT int32_t braze_model_run(braze_model *m, const braze_tensor *inputs, int32_t n_inputs,
                                     braze_tensor *outputs, int32_t n_outputs, char *err, int32_t errlen);

/* Frees an output's data and shape (and sets them to NULL). */
BRAZE_EXPORT void braze_tensor_release(braze_tensor *t);

BRAZE_EXPORT void braze_model_free(braze_model *m);

/* The signature. Names are the model's input and output names; dims are the declared
 * sizes, -1 for a symbolic dim (braze_model_*_dim_name gives its symbol, "" for a fixed
 * one). Indexes out of range give NULL, -1 or "". */
BRAZE_EXPORT int32_t braze_model_num_inputs(const braze_model *m);
BRAZE_EXPORT int32_t braze_model_num_outputs(const braze_model *m);
BRAZE_EXPORT const char *braze_model_input_name(const braze_model *m, int32_t i);
BRAZE_EXPORT const char *braze_model_output_name(const braze_model *m, int32_t i);
BRAZE_EXPORT int32_t braze_model_input_dtype(const braze_model *m, int32_t i);
BRAZE_EXPORT int32_t braze_model_output_dtype(const braze_model *m, int32_t i);
BRAZE_EXPORT int32_t braze_model_input_ndim(const braze_model *m, int32_t i);
BRAZE_EXPORT int32_t braze_model_output_ndim(const braze_model *m, int32_t i);
BRAZE_EXPORT int64_t braze_model_input_dim(const braze_model *m, int32_t i, int32_t axis);
BRAZE_EXPORT int64_t braze_model_output_dim(const braze_model *m, int32_t i, int32_t axis);
BRAZE_EXPORT const char *braze_model_input_dim_name(const braze_model *m, int32_t i, int32_t axis);
BRAZE_EXPORT const char *braze_model_output_dim_name(const braze_model *m, int32_t i, int32_t axis);

#ifdef __cplusplus
}
#endif
#endif
