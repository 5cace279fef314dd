// Byte layouts of the GGUF/ggml quantized blocks, as plain structs.
//
// Every struct is exactly its on-disk size (checked below) and holds only byte-order-free
// fields or little-endian scalars, so a block is read with one memcpy from any (unaligned)
// address. Scales stored as f16 are kept as raw uint16_t bits; decode them with f16_to_f32.
//
// Naming: a "super-block" (K-quants) holds kQkK = 256 values split into sub-blocks of 16 or
// 32 values that each have their own scale (and sometimes min).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace tachyon::reference {

static_assert(std::endian::native == std::endian::little,
              "GGUF blocks are little-endian; a big-endian host needs byte swaps here");

inline constexpr int kQk = 32;    // values per block of the legacy quants (Q4_0 ... Q8_0)
inline constexpr int kQkK = 256;  // values per super-block of the K-quants

// Q4_0: x = d * (q - 8), q in [0, 15].
struct BlockQ4_0 {
  uint16_t d;           // f16 scale
  uint8_t qs[kQk / 2];  // value j in the low nibble of qs[j], value j + 16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = d * q + m, q in [0, 15].
struct BlockQ4_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset (the block minimum)
  uint8_t qs[kQk / 2];  // nibbles as in BlockQ4_0
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16), q in [0, 31].
struct BlockQ5_0 {
  uint16_t d;           // f16 scale
  uint8_t qh[4];        // little-endian uint32: bit j is bit 4 of value j (bytes, so no padding)
  uint8_t qs[kQk / 2];  // low 4 bits, nibbles as in BlockQ4_0
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m, q in [0, 31].
struct BlockQ5_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset
  uint8_t qh[4];        // bit 4 of each value, as in BlockQ5_0
  uint8_t qs[kQk / 2];  // low 4 bits, as in BlockQ5_0
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q8_0: x = d * q, q in [-128, 127].
struct BlockQ8_0 {
  uint16_t d;      // f16 scale
  int8_t qs[kQk];  // one signed byte per value
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q2_K: 16 sub-blocks of 16 values; x = (d * scale) * q - (dmin * min), q in [0, 3].
struct BlockQ2_K {
  uint8_t scales[kQkK / 16];  // per sub-block: scale in the low nibble, min in the high nibble
  uint8_t qs[kQkK / 4];       // 2-bit values: value 128*h + 32*s + l is bits 2s..2s+1 of
                              // qs[32*h + l] (h in [0, 1], s in [0, 3], l in [0, 31])
  uint16_t d;                 // f16 super-block scale for the scales
  uint16_t dmin;              // f16 super-block scale for the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16 values; x = (d * (scale - 32)) * q, q in [-4, 3].
struct BlockQ3_K {
  uint8_t hmask[kQkK / 8];  // bit 2 of each value: value 32*s + l is bit s of hmask[l];
                            // a CLEAR bit subtracts 4 (q = low2 - (bit ? 0 : 4))
  uint8_t qs[kQkK / 4];     // low 2 bits, packed as in BlockQ2_K
  uint8_t scales[12];       // 16 six-bit scales: low 4 bits of scale i are nibble i / 8 of
                            // byte i % 8; high 2 bits are bits 2*(i/4), 2*(i/4)+1 of byte 8 + i % 4
  uint16_t d;               // f16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K: 8 sub-blocks of 32 values; x = (d * scale) * q - (dmin * min), q in [0, 15].
struct BlockQ4_K {
  uint16_t d;            // f16 super-block scale for the scales
  uint16_t dmin;         // f16 super-block scale for the mins
  uint8_t scales[12];    // 8 six-bit scales and 8 six-bit mins, see q4_k_scale_min
  uint8_t qs[kQkK / 2];  // 4-bit values: value 64*c + 32*s + l is nibble s of qs[32*c + l]
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K with a fifth bit; q in [0, 31].
struct BlockQ5_K {
  uint16_t d;            // f16 super-block scale for the scales
  uint16_t dmin;         // f16 super-block scale for the mins
  uint8_t scales[12];    // packed as in BlockQ4_K
  uint8_t qh[kQkK / 8];  // bit 4 of each value: value 32*s + l is bit s of qh[l]
  uint8_t qs[kQkK / 2];  // low 4 bits, packed as in BlockQ4_K
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 values; x = (d * scale) * (q - 32), q in [0, 63].
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];      // low 4 bits: value 128*h + 64*s + l is nibble s of
                             // ql[64*h + l] (h, s in [0, 1], l in [0, 63])
  uint8_t qh[kQkK / 4];      // high 2 bits: value 128*h + 32*s + l is bits 2s..2s+1 of
                             // qh[32*h + l] (s in [0, 3], l in [0, 31])
  int8_t scales[kQkK / 16];  // signed 8-bit scale per sub-block
  uint16_t d;                // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q8_K: the activation format of the K-quant dot products; x = d * q.
struct BlockQ8_K {
  float d;                   // f32 scale (not f16, unlike every other block)
  int8_t qs[kQkK];           // one signed byte per value
  int16_t bsums[kQkK / 16];  // sum of each 16 qs, a cache for dot products; unused here
};
static_assert(sizeof(BlockQ8_K) == 292);

// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, 6 bits each. The 12 bytes hold:
// bytes 0-3: low 6 bits of scales 0-3, top 2 bits = bits 4-5 of scales 4-7;
// bytes 4-7: low 6 bits of mins 0-3, top 2 bits = bits 4-5 of mins 4-7;
// bytes 8-11: low nibble = bits 0-3 of scales 4-7, high nibble = bits 0-3 of mins 4-7.
struct ScaleMin {
  uint8_t scale;
  uint8_t min;
};
inline ScaleMin q4_k_scale_min(const uint8_t (&scales)[12], int j) {
  if (j < 4) {
    return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
  }
  return {static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

// Signed scale of sub-block i (0..15) of a Q3_K block, in [-32, 31].
inline int q3_k_scale(const uint8_t (&scales)[12], int i) {
  const int low = (scales[i % 8] >> (4 * (i / 8))) & 0x0f;
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 0x03;
  return (low | (high << 4)) - 32;
}

// Copies one block out of possibly unaligned bytes (a plain cast would be UB).
template <typename Block>
inline Block load_block(const uint8_t* bytes) {
  Block block;
  std::memcpy(&block, bytes, sizeof(Block));
  return block;
}

}  // namespace tachyon::reference
