#include "kernels/cpu/repacked_weights.h"

#include <cstring>

#include "core/check.h"

namespace tachyon::kernels {

bool RepackedWeights::supports(const WeightMatrix& w) {
  return repacked_block_bytes(w.type) > 0 && w.cols % 32 == 0 && w.rows > 0;
}

int64_t RepackedWeights::packed_bytes(const WeightMatrix& w) {
  const int64_t tile_rows = repacked_tile_rows(w.type);
  const int64_t tiles = (w.rows + tile_rows - 1) / tile_rows;
  return tiles * (w.cols / 32) * repacked_block_bytes(w.type);
}

void RepackedWeights::repack_into(const WeightMatrix& w, uint8_t* out) {
  TACHYON_CHECK(supports(w));
  const int64_t blocks = w.cols / 32;
  const int tile_rows = repacked_tile_rows(w.type);
  const int64_t tiles = (w.rows + tile_rows - 1) / tile_rows;
  const int64_t block_bytes = repacked_block_bytes(w.type);
  if (w.type == DType::kF16 || w.type == DType::kBF16) {
    const size_t row_bytes = w.row_bytes();
    for (int64_t row = 0; row < w.rows; ++row) {
      uint8_t* tile = out + row / tile_rows * blocks * block_bytes;
      const int64_t r = row % tile_rows;
      const uint8_t* source = w.data + row * row_bytes;
      for (int64_t piece = 0; piece < 2 * blocks; ++piece) {
        std::memcpy(tile + piece * kRepackedPieceBytes + r * 32, source + piece * 32, 32);
      }
    }
    return;
  }
  const int64_t qs_bytes = w.type == DType::kQ8_0 ? 32 : 16;
  const bool has_m = w.type == DType::kQ4_1 || w.type == DType::kQ5_1;
  const bool has_qh = w.type == DType::kQ5_0 || w.type == DType::kQ5_1;
  // Source blocks: d, (m), (qh), qs.
  const int64_t source_block_bytes = (has_m ? 4 : 2) + (has_qh ? 4 : 0) + qs_bytes;
  const int64_t qs_offset = source_block_bytes - qs_bytes;
  const int64_t scales = repacked_scales_offset(w.type);
  const size_t row_bytes = w.row_bytes();

  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* block = out + (t * blocks + b) * block_bytes;
      for (int r = 0; r < tile_rows; ++r) {
        const int64_t row = t * tile_rows + r;
        if (row >= w.rows) break;  // padding stays zero
        const uint8_t* source = w.data + row * row_bytes + b * source_block_bytes;
        for (int p = 0; p < qs_bytes / 4; ++p) {
          std::memcpy(block + p * 64 + r * 4, source + qs_offset + 4 * p, 4);
        }
        if (has_qh) {
          std::memcpy(block + kRepackedHighBitsOffset + r * 4, source + qs_offset - 4, 4);
        }
        std::memcpy(block + scales + r * 2, source, 2);                    // d
        if (has_m) std::memcpy(block + scales + 32 + r * 2, source + 2, 2);  // m
      }
    }
  }
}

}  // namespace tachyon::kernels
