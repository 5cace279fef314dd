// AVX-512 F/BW/VL/VNNI build of the SIMD matmul (see ../matmul_simd.inc).
#define TACHYON_LEVEL_NAMESPACE avx512
#include "kernels/cpu/matmul_simd.inc"
