// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, F16 and BF16 weights repacked at load into
// tiles of rows, the layout the SIMD kernels compute in ("lanes are rows", see
// matmul_simd_q8.inc; 16-value pieces of 8 rows for the 16-bit floats), so that decoding streams
// each thread's rows as one run instead of gathering short rows (and, for the quantized types,
// transposing their blocks) on every call. Same bytes per weight as the file (Q6_K: +1%, its d
// padded to a cache line); results are bit for bit the same. AVX2 reads the 16-row tiles as two
// 8-row groups (the 256-bit half h of each vector, rows 8h..8h+7).
//
// Tile t holds rows T*t..T*t+T-1, T = repacked_tile_rows(type) (a last partial tile is padded
// with zero blocks); its blocks (32 columns, 256 for the K-quants) follow each other,
// repacked_block_bytes(type) apart. Block b of a Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 tile (T = 16: a
// 512-bit vector holds a dword of each row):
//   q  Q4_0/Q4_1/Q5_0/Q5_1: 4 x 64 bytes: vector p, lane r (4 bytes) = bytes 4p..4p+3 of row
//      r's qs, i.e. values 4p..4p+3 in the low nibbles and 16+4p..16+4p+3 in the high ones;
//      Q8_0: 8 x 64 bytes: vector j, lane r = values 4j..4j+3 of row r (signed bytes)
//   qh 64 bytes (Q5_0/Q5_1 only): lane r = row r's qh (bit i: the fifth bit of value i)
//   d  16 x f16: the rows' scales
//   m  16 x f16: the rows' offsets (Q4_1 and Q5_1 only)
// so the 256-bit half h of each vector (and d[8h..8h+7], m[8h..8h+7]) is the same block of the
// 8 rows 8h..8h+7 alone: AVX2 reads a tile as two 8-row groups.
// F16/BF16 (T = 8; 32 values per block): 2 pieces of 16 columns, each 8 x 32 bytes: row r's
//   values 16h..16h+15 at h * 256 + r * 32.
// Q4_K (T = 16; a super-block of 256 columns, 16 x 144 bytes), the header first so that the
// decode kernel reads each block front to back:
//   scales 3 x 64 bytes: vector i, lane r = bytes 4i..4i+3 of row r's 12 scale bytes
//   d      16 x f16, then dmin 16 x f16
//   qs     32 x 64 bytes: vector p, lane r = bytes 4p..4p+3 of row r's qs
// Q5_K (T = 16; 16 x 176 bytes): Q4_K's header, then for l = 0..7 two vectors, lane r = row
//   r's bytes qh 4l..4l+3 and qs 4l..4l+3, then the qs vectors 8..31 (the decode kernel reads
//   qh l with qs l first, then again from its cache for the later chunks)
// Q6_K (T = 16; 256 columns, 16 x 210 bytes and 32 bytes padding d to a cache line):
//   scales 4 x 64 bytes: vector i, lane r = row r's signed scales 4i..4i+3
//   d      16 x f16, 32 zero bytes
//   then for each half h of the values (128h..128h+127), 1536 bytes: for l = 0..7, three
//   vectors, lane r = row r's bytes: qh 32h+4l..+3, ql 64h+4l..+3, ql 64h+32+4l..+3 (what
//   the decode kernel reads together, so that it reads the block front to back)
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace tachyon::kernels {

inline constexpr int kRepackedQuantTileRows = 16;  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, K-quants
inline constexpr int kRepackedFloatTileRows = 8;   // F16, BF16

constexpr int repacked_tile_rows(DType type) {
  return type == DType::kF16 || type == DType::kBF16 ? kRepackedFloatTileRows
                                                     : kRepackedQuantTileRows;
}

// Bytes of one repacked block (a block of the type's columns, 32 or 256, of a whole tile; 0: the
// type is not repacked).
constexpr int64_t repacked_block_bytes(DType type) {
  return type == DType::kQ4_K   ? 16 * 144
         : type == DType::kQ5_K ? 16 * 176
         : type == DType::kQ6_K ? 16 * 210 + 32
         : type == DType::kQ4_0 ? 16 * 16 + 32
         : type == DType::kQ4_1 ? 16 * 16 + 64
         : type == DType::kQ5_0 ? 16 * 16 + 64 + 32
         : type == DType::kQ5_1 ? 16 * 16 + 64 + 64
         : type == DType::kQ8_0 ? 16 * 32 + 32
         : type == DType::kF16 || type == DType::kBF16 ? 8 * 32 * 2
                                : 0;
}
// F16/BF16: bytes of one 16-column piece of a tile (8 rows x 16 values).
inline constexpr int64_t kRepackedPieceBytes = 8 * 16 * 2;
// Offset of the 16 scales (f16) in a repacked quantized block; the offsets (Q4_1, Q5_1) follow
// them.
constexpr int64_t repacked_scales_offset(DType type) {
  return type == DType::kQ8_0 ? 512 : type == DType::kQ5_0 || type == DType::kQ5_1 ? 320 : 256;
}
// Offset of the 16 rows' high bits (Q5_0, Q5_1: one dword per row, lane r = row r's qh).
inline constexpr int64_t kRepackedHighBitsOffset = 256;
// Q4_K/Q5_K: offsets of d and dmin in a repacked super-block (its scales come first), and the
// bytes of that header.
inline constexpr int64_t kRepackedKDOffset = 192;
inline constexpr int64_t kRepackedKDminOffset = 224;
inline constexpr int64_t kRepackedKHeaderBytes = 256;
// Q4_K/Q5_K: offset of qs vector p (lane r = row r's qs bytes 4p..4p+3).
constexpr int64_t repacked_k_qs_offset(DType type, int p) {
  if (type == DType::kQ4_K) return kRepackedKHeaderBytes + 64 * p;
  return p < 8 ? kRepackedKHeaderBytes + 128 * p + 64 : kRepackedKHeaderBytes + 64 * (p + 8);
}
// Q5_K: offset of qh vector l (lane r = row r's qh bytes 4l..4l+3).
constexpr int64_t repacked_q5_k_qh_offset(int l) { return kRepackedKHeaderBytes + 128 * l; }
// Q6_K: offsets of d and of the first half, the bytes of a half and of one group l in it.
inline constexpr int64_t kRepackedQ6KDOffset = 256;
inline constexpr int64_t kRepackedQ6KHalvesOffset = 320;
inline constexpr int64_t kRepackedQ6KHalfBytes = 1536;
inline constexpr int64_t kRepackedQ6KGroupBytes = 192;

class RepackedWeights {
 public:
  // Whether `w`'s type has a repacked layout (and its shape fits it). Every SIMD level reads
  // every layout.
  static bool supports(const WeightMatrix& w);
  // Bytes of `w` repacked (supports(w) must hold).
  static int64_t packed_bytes(const WeightMatrix& w);
  // Repacks `w` into `out`: packed_bytes(w) zeroed bytes, 64-byte aligned (the kernels load
  // whole vectors aligned), e.g. from a HugePageArena. Point w.packed at `out` to use it.
  static void repack_into(const WeightMatrix& w, uint8_t* out);
  // The inverse for the first `num_rows` rows of one K-quant tile (`tile` of a matrix of
  // `cols` columns): row r in the file's layout at out + r * row_bytes (the tests check with it
  // that repacking loses nothing).
  static void unpack_k_tile(DType type, const uint8_t* tile, int64_t cols, int num_rows,
                            uint8_t* out, int64_t row_bytes);
};

}  // namespace tachyon::kernels
