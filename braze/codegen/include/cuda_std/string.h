/* NVRTC ships no C standard headers: stand-in so braze_vec.h compiles as device code (memcpy is builtin) */
#define __builtin_memcpy memcpy
