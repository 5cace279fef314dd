// Element-wise steps of a transformer layer, compiled for AVX-512, AVX2 and plain x86-64 (the
// best chosen at load time); kernels/reference/elementwise.h holds their oracles.
#pragma once

#include <cstdint>

namespace tachyon::kernels {

// out = x / sqrt(mean(x²) + eps) * weight. x, weight, out: f32 [size]; out may be x.
void rms_norm(const float* x, const float* weight, int size, float eps, float* out);

// x += y, then out = rms_norm(x, weight): a residual add and the next norm in one pass over
// the row (the same bits as add_in_place then rms_norm). x, y, weight, out: f32 [size].
void add_rms_norm(float* x, const float* y, const float* weight, int size, float eps,
                  float* out);

// out = silu(gate) * up (SwiGLU). gate, up, out: f32 [size]; out may be gate.
void swiglu(const float* gate, const float* up, int64_t size, float* out);

// out = gelu_tanh(gate) * up (GeGLU, Gemma's feed-forward; gelu with the tanh approximation,
// PyTorch's gelu(approximate="tanh")). gate, up, out: f32 [size]; out may be gate.
void geglu(const float* gate, const float* up, int64_t size, float* out);

// x += y. x, y: f32 [size]
void add_in_place(float* x, const float* y, int64_t size);

// x = softmax(x · scale) in place: e^(x·scale - max·scale) / sum. x: f32 [size], its largest
// value finite; scale > 0. The sum adds in 16 lanes fixed by index, so a row's bits depend only
// on its own values (the same at every level). Rows of attention scores (MLA's decompressed
// path).
void scaled_softmax(float* x, int64_t size, float scale);

// The index of the first largest value of x (f32 [size]): NaN is never largest, and if no
// value exceeds -inf the answer is 0 (as a scan keeping the first strictly greater value from
// -inf). Vectorized: greedy decoding takes it over the whole vocabulary every token.
int64_t argmax(const float* x, int64_t size);

// logits[i] = -inf where bit i of `bits` (i32 words, bit i%32 of word i/32: a grammar's
// token mask) is clear; other logits unchanged. logits: f32 [size]. Words that allow
// everything are skipped and words that allow nothing filled, a vector at a time: a 262K-token
// vocabulary's row is 1 MB.
void apply_token_mask(const uint32_t* bits, float* logits, int64_t size);

}  // namespace tachyon::kernels
