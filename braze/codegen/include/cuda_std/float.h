/* NVRTC ships no C standard headers: this minimal float.h lets braze_vec.h/braze_vmath.h compile as device code */
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define DBL_MAX 1.7976931348623158e+308
