/* NVRTC ships no C standard headers: empty stand-in so braze_vec.h compiles as device code (malloc is builtin) */
