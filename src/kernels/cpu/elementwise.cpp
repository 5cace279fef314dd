#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::kernels {

namespace {

// rms_norm, with y added to x first (kAdd) in the same pass that sums the squares.
template <bool kAdd>
__attribute__((always_inline)) inline void rms_norm_after(float* x, const float* y,
                                                          const float* weight, int size, float eps,
                                                          float* out) {
  // The sum of squares in double, as llama.cpp does: long rows lose nothing to rounding. In 16
  // independent lanes (two vectors of doubles), so that it runs at the adder's throughput
  // instead of one add's latency per value (a decode step normalizes every layer's input on
  // one thread while the others wait).
  constexpr int kLanes = 16;
  double lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    if constexpr (kAdd) {
      for (int k = 0; k < kLanes; ++k) x[i + k] += y[i + k];
    }
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (int k = 0; i < size; ++i, ++k) {
    if constexpr (kAdd) x[i] += y[i];
    lanes[k] += static_cast<double>(x[i]) * x[i];
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  const double sum_squares = lanes[0];
  const float inverse_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / size) + eps);
  for (int i = 0; i < size; ++i) out[i] = x[i] * inverse_rms * weight[i];
}

__attribute__((always_inline)) inline void rms_norm_body(const float* x, const float* weight,
                                                         int size, float eps, float* out) {
  // x is only read when nothing is added.
  rms_norm_after<false>(const_cast<float*>(x), nullptr, weight, size, eps, out);
}

__attribute__((always_inline)) inline void add_rms_norm_body(float* x, const float* y,
                                                             const float* weight, int size,
                                                             float eps, float* out) {
  rms_norm_after<true>(x, y, weight, size, eps, out);
}

__attribute__((always_inline)) inline void swiglu_body(const float* gate, const float* up,
                                                       int64_t size, float* out) {
  for (int64_t i = 0; i < size; ++i) {
    // sigmoid(g) from e = exp(-|g|) <= 1, so that the branch-free exp vectorizes in every
    // clone: 1 / (1 + e) for g >= 0, e / (1 + e) below.
    const float g = gate[i];
    const float e = exp_nonpositive(g >= 0.0f ? -g : g);
    const float sigmoid = (g >= 0.0f ? 1.0f : e) / (1.0f + e);
    out[i] = g * sigmoid * up[i];
  }
}

// gelu_tanh(g) = g * (1 + tanh(u)) / 2 = g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g³):
// the same branch-free sigmoid as SwiGLU's, on 2u.
__attribute__((always_inline)) inline void geglu_body(const float* gate, const float* up,
                                                      int64_t size, float* out) {
  constexpr float kTwiceSqrtTwoOverPi = 1.5957691216057308f;
  for (int64_t i = 0; i < size; ++i) {
    const float g = gate[i];
    const float u = kTwiceSqrtTwoOverPi * (g + 0.044715f * g * g * g);
    const float e = exp_nonpositive(u >= 0.0f ? -u : u);
    const float sigmoid = (u >= 0.0f ? 1.0f : e) / (1.0f + e);
    out[i] = g * sigmoid * up[i];
  }
}

__attribute__((always_inline)) inline void add_in_place_body(float* x, const float* y,
                                                             int64_t size) {
  for (int64_t i = 0; i < size; ++i) x[i] += y[i];
}

// The largest of x (f32 [size]; -inf when none is larger), 16 lanes at a time (GCC vectors:
// each clone gets its widest compare and blend; NaN never compares greater).
__attribute__((always_inline)) inline float largest_value(const float* x, int64_t size) {
  typedef float Lanes __attribute__((vector_size(64)));
  constexpr int kLanes = 16;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  Lanes lanes = Lanes{} + neg_inf;
  int64_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof(v));
    lanes = v > lanes ? v : lanes;
  }
  float best = neg_inf;
  for (int k = 0; k < kLanes; ++k) best = lanes[k] > best ? lanes[k] : best;
  for (; i < size; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

__attribute__((always_inline)) inline void scaled_softmax_body(float* x, int64_t size,
                                                                float scale) {
  constexpr int kLanes = 16;
  const float largest = largest_value(x, size);
  int64_t i = 0;
  // x·scale - largest·scale <= 0 (rounding is monotonic): the branch-free exp's domain.
  const float shift = largest * scale;
  float lanes[kLanes] = {};
  for (i = 0; i + kLanes <= size; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float e = exp_nonpositive(x[i + k] * scale - shift);
      x[i + k] = e;
      lanes[k] += e;
    }
  }
  for (int k = 0; i < size; ++i, ++k) {
    const float e = exp_nonpositive(x[i] * scale - shift);
    x[i] = e;
    lanes[k] += e;
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  const float inverse = 1.0f / lanes[0];
  for (i = 0; i < size; ++i) x[i] *= inverse;
}

__attribute__((always_inline)) inline int64_t argmax_body(const float* x, int64_t size) {
  // The largest value first, then the first position holding it.
  typedef float Lanes __attribute__((vector_size(64)));
  constexpr int kLanes = 16;
  const float best = largest_value(x, size);
  if (!(best > -std::numeric_limits<float>::infinity())) return 0;
  int64_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof(v));
    const auto equal = v == (Lanes{} + best);
    bool found = false;
    for (int k = 0; k < kLanes; ++k) found |= equal[k] != 0;
    if (found) break;
  }
  for (; i < size; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // not reached: best is one of the values
}

__attribute__((always_inline)) inline void apply_token_mask_body(const uint32_t* bits,
                                                                 float* logits, int64_t size) {
  typedef float Lanes __attribute__((vector_size(64)));
  typedef int32_t Masks __attribute__((vector_size(64)));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const Lanes refused = Lanes{} + kNegInf;
  // Lane k of a 16-token half word tests bit k.
  const Masks lane_bit = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                          32768};
  const int64_t full_words = size / 32;
  for (int64_t word = 0; word < full_words; ++word) {
    const uint32_t allowed = bits[word];
    if (allowed == 0xFFFFFFFFu) continue;
    float* row = logits + word * 32;
    for (int half = 0; half < 2; ++half) {
      Lanes values;
      std::memcpy(&values, row + 16 * half, sizeof(values));
      const Masks set = ((Masks{} + static_cast<int32_t>((allowed >> (16 * half)) & 0xFFFFu)) &
                         lane_bit) != 0;
      values = set ? values : refused;
      std::memcpy(row + 16 * half, &values, sizeof(values));
    }
  }
  for (int64_t i = full_words * 32; i < size; ++i) {
    if (!((bits[i / 32] >> (i % 32)) & 1u)) logits[i] = kNegInf;
  }
}

}  // namespace

// One copy of each body per level (kernel_level.h), chosen by the active level.
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, rms_norm,
                          (const float* x, const float* weight, int size, float eps, float* out),
                          (x, weight, size, eps, out))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, add_rms_norm,
                          (float* x, const float* y, const float* weight, int size, float eps,
                           float* out),
                          (x, y, weight, size, eps, out))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, swiglu,
                          (const float* gate, const float* up, int64_t size, float* out),
                          (gate, up, size, out))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, geglu,
                          (const float* gate, const float* up, int64_t size, float* out),
                          (gate, up, size, out))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, add_in_place,
                          (float* x, const float* y, int64_t size), (x, y, size))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, scaled_softmax,
                          (float* x, int64_t size, float scale), (x, size, scale))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, int64_t, argmax,
                          (const float* x, int64_t size), (x, size))
TACHYON_DISPATCH_BY_LEVEL(KernelFamily::kElementwise, void, apply_token_mask,
                          (const uint32_t* bits, float* logits, int64_t size),
                          (bits, logits, size))

}  // namespace tachyon::kernels
