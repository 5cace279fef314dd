// The amx level's SIMD matmul: the AVX-512 build of ../matmul_simd.inc with AMX tiles on, which
// runs prompt-sized products of repacked Q8_0 weights on the tiles (tile_q8_0_rows).
#define TACHYON_LEVEL_NAMESPACE amx
#include "kernels/cpu/matmul_simd.inc"
