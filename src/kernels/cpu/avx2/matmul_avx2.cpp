// AVX2 + FMA + F16C build of the SIMD matmul (see ../matmul_simd.inc).
#define TACHYON_LEVEL_NAMESPACE avx2
#include "kernels/cpu/matmul_simd.inc"
