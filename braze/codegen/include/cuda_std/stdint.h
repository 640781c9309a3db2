/* NVRTC ships no C standard headers: this minimal stdint.h lets braze_vec.h/braze_vmath.h compile as device code */
typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t; typedef long long int64_t; typedef unsigned long long uint64_t;
#define INT64_MAX 9223372036854775807LL
#define INT64_MIN (-INT64_MAX - 1)
#define INT32_MAX 2147483647
#define INT32_MIN (-INT32_MAX - 1)
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#define SIZE_MAX 18446744073709551615ULL
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ULL
