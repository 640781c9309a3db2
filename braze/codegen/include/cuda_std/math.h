/* NVRTC ships no C standard headers: this minimal math.h lets braze_vec.h/braze_vmath.h compile as device code */
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
