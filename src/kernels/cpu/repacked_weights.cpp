#include "kernels/cpu/repacked_weights.h"

#include <cstddef>
#include <cstring>

#include "core/check.h"
#include "kernels/reference/block_layouts.h"

namespace tachyon::kernels {

namespace {

bool is_k_quant(DType type) {
  return type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}

// Columns per repacked block.
int64_t block_columns(DType type) { return is_k_quant(type) ? 256 : 32; }

using reference::BlockQ4_K;
using reference::BlockQ5_K;
using reference::BlockQ6_K;
static_assert(sizeof(BlockQ4_K) * kRepackedQuantTileRows == repacked_block_bytes(DType::kQ4_K));
static_assert(sizeof(BlockQ5_K) * kRepackedQuantTileRows == repacked_block_bytes(DType::kQ5_K));
static_assert(offsetof(BlockQ4_K, scales) == offsetof(BlockQ5_K, scales) &&
              offsetof(BlockQ4_K, dmin) == offsetof(BlockQ5_K, dmin));

// Calls piece(tile_offset, row_offset, bytes) for each piece of row r of a K-quant
// super-block: where it lies in a repacked super-block and in the file's one.
template <typename Piece>
void for_each_k_piece(DType type, int r, const Piece& piece) {
  if (type == DType::kQ4_K || type == DType::kQ5_K) {
    for (int i = 0; i < 3; ++i) piece(i * 64 + r * 4, offsetof(BlockQ4_K, scales) + 4 * i, 4);
    piece(kRepackedKDOffset + r * 2, offsetof(BlockQ4_K, d), 2);
    piece(kRepackedKDminOffset + r * 2, offsetof(BlockQ4_K, dmin), 2);
    const int64_t qs = type == DType::kQ4_K ? offsetof(BlockQ4_K, qs) : offsetof(BlockQ5_K, qs);
    for (int p = 0; p < 32; ++p) piece(repacked_k_qs_offset(type, p) + r * 4, qs + 4 * p, 4);
    if (type == DType::kQ5_K) {
      for (int l = 0; l < 8; ++l) {
        piece(repacked_q5_k_qh_offset(l) + r * 4, offsetof(BlockQ5_K, qh) + 4 * l, 4);
      }
    }
    return;
  }
  for (int i = 0; i < 4; ++i) piece(i * 64 + r * 4, offsetof(BlockQ6_K, scales) + 4 * i, 4);
  piece(kRepackedQ6KDOffset + r * 2, offsetof(BlockQ6_K, d), 2);
  for (int h = 0; h < 2; ++h) {
    const int64_t half = kRepackedQ6KHalvesOffset + h * kRepackedQ6KHalfBytes + r * 4;
    for (int l = 0; l < 8; ++l) {
      const int64_t group = half + l * kRepackedQ6KGroupBytes;
      piece(group, offsetof(BlockQ6_K, qh) + 32 * h + 4 * l, 4);
      piece(group + 64, offsetof(BlockQ6_K, ql) + 64 * h + 4 * l, 4);
      piece(group + 128, offsetof(BlockQ6_K, ql) + 64 * h + 32 + 4 * l, 4);
    }
  }
}

}  // namespace

bool RepackedWeights::supports(const WeightMatrix& w) {
  return repacked_block_bytes(w.type) > 0 && w.cols % block_columns(w.type) == 0 && w.rows > 0;
}

int64_t RepackedWeights::packed_bytes(const WeightMatrix& w) {
  const int64_t tile_rows = repacked_tile_rows(w.type);
  const int64_t tiles = (w.rows + tile_rows - 1) / tile_rows;
  return tiles * (w.cols / block_columns(w.type)) * repacked_block_bytes(w.type);
}

void RepackedWeights::unpack_k_tile(DType type, const uint8_t* tile, int64_t cols, int num_rows,
                                    uint8_t* out, int64_t row_bytes) {
  TACHYON_CHECK(is_k_quant(type));
  const int64_t blocks = cols / 256;
  const int64_t source_bytes = dtype_info(type).block_bytes;
  for (int r = 0; r < num_rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* tile_block = tile + b * repacked_block_bytes(type);
      uint8_t* row_block = out + r * row_bytes + b * source_bytes;
      for_each_k_piece(type, r, [&](int64_t tile_offset, int64_t row_offset, size_t bytes) {
        std::memcpy(row_block + row_offset, tile_block + tile_offset, bytes);
      });
    }
  }
}

void RepackedWeights::repack_into(const WeightMatrix& w, uint8_t* out) {
  TACHYON_CHECK(supports(w));
  const int64_t blocks = w.cols / block_columns(w.type);
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
  if (is_k_quant(w.type)) {
    const size_t row_bytes = w.row_bytes();
    const int64_t source_bytes = dtype_info(w.type).block_bytes;
    for (int64_t row = 0; row < w.rows; ++row) {
      uint8_t* tile = out + row / tile_rows * blocks * block_bytes;
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* tile_block = tile + b * block_bytes;
        const uint8_t* row_block = w.data + row * row_bytes + b * source_bytes;
        auto copy = [&](int64_t tile_offset, int64_t row_offset, size_t bytes) {
          std::memcpy(tile_block + tile_offset, row_block + row_offset, bytes);
        };
        for_each_k_piece(w.type, static_cast<int>(row % tile_rows), copy);
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
