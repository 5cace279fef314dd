#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <unistd.h>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/matmul_input.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/thread_balance.h"
#include "kernels/reference/dequantize.h"
#include "kernels/reference/dot_products.h"
#include "kernels/reference/dot_products_k.h"
#include "kernels/reference/matmul_reference.h"
#include "kernels/reference/quantize_activations.h"
#include "kernels/reference/quantize_activations_k.h"

namespace tachyon::kernels {
namespace {

template <typename T>
T* grown(std::vector<T>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

// Everything a worker needs for one product, reached through one pointer.
struct MatmulJob {
  KernelLevel level;
  const WeightMatrix* w;
  const float* x;
  int64_t num_tokens;
  float* y;
  bool k_path;  // K-quant weights: reads k_acts (256-value blocks), else acts
  const reference::Q8Activations* acts;
  const reference::Q8KActivations* k_acts;
};

void matmul_range(const MatmulJob& job, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end) return;
  thread_local std::vector<float> scratch_buffer;
  float* scratch = grown(scratch_buffer, matmul_scratch_floats(job.w->cols, job.num_tokens));
  if (job.k_path) {
    if (job.level >= KernelLevel::kAvx512) {
      avx512::matmul_rows_k(*job.w, *job.k_acts, job.y, row_begin, row_end, scratch);
    } else {
      avx2::matmul_rows_k(*job.w, *job.k_acts, job.y, row_begin, row_end, scratch);
    }
    return;
  }
  if (job.level == KernelLevel::kAmx) {
    amx::matmul_rows(*job.w, *job.acts, job.x, job.num_tokens, job.y, row_begin, row_end, scratch);
  } else if (job.level == KernelLevel::kAvx512) {
    avx512::matmul_rows(*job.w, *job.acts, job.x, job.num_tokens, job.y, row_begin, row_end,
                        scratch);
  } else {
    avx2::matmul_rows(*job.w, *job.acts, job.x, job.num_tokens, job.y, row_begin, row_end, scratch);
  }
}

// The thread balance for calls like this one. Each kind of call (the first matrix's type and
// shape, how many products, one token or more) keeps its own: the threads' relative speed
// differs between them (measured on a small model's decode step: the worker ~8% slower on the
// Q8_0 output matrix, within ~2% on the Q4_1 layer matrices, in both directions).
ThreadBalance& balance_for(std::span<const MatmulProduct> products, int64_t num_tokens,
                           int num_threads) {
  struct Kind {
    DType type;
    int64_t rows;
    int64_t cols;
    size_t num_products;
    bool one_token;
    ThreadBalance balance;
  };
  constexpr size_t kMaxKinds = 32;  // a model has a handful; past this, start over
  thread_local std::vector<Kind> kinds;
  kinds.reserve(kMaxKinds);  // references handed out stay valid until the next clear()
  const WeightMatrix& w = *products[0].w;
  const bool one_token = num_tokens == 1;
  for (Kind& kind : kinds) {
    if (kind.type == w.type && kind.rows == w.rows && kind.cols == w.cols &&
        kind.num_products == products.size() && kind.one_token == one_token &&
        kind.balance.num_threads() == num_threads) {
      return kind.balance;
    }
  }
  if (kinds.size() == kMaxKinds) kinds.clear();
  kinds.push_back({w.type, w.rows, w.cols, products.size(), one_token, ThreadBalance(num_threads)});
  return kinds.back().balance;
}

}  // namespace

size_t WeightMatrix::row_bytes() const {
  const DTypeInfo& info = dtype_info(type);
  return static_cast<size_t>(cols / info.block_elements * info.block_bytes);
}

bool matmul_supports(DType type) {
  const std::optional<DTypeInfo> info = dtype_info(static_cast<uint32_t>(type));
  return info.has_value() && info->can_dequantize;
}

int64_t decode_prefetch_bytes(int64_t working_set_bytes) {
  static const int64_t requested = [] {
    const char* text = std::getenv("TACHYON_DECODE_PREFETCH");
    if (text != nullptr && *text != '\0') {
      char* end = nullptr;
      const long long value = std::strtoll(text, &end, 10);
      if (*end == '\0' && value >= 0 && value <= (int64_t{1} << 20)) return int64_t{value};
      std::fprintf(stderr, "tachyon: ignoring TACHYON_DECODE_PREFETCH=%s (want 0..1048576)\n",
                   text);
    }
    return int64_t{-1};
  }();
  if (requested >= 0) return requested;
  if (!CpuFeatures::get().intel) {
    // AMD: the AVX-512 kernels keep up with the hardware prefetchers alone (Zen 4), the AVX2
    // ones do not: on Zen 4 forced to AVX2, the default model's tg128 took 12 KiB over 0 in 8
    // of 10 alternating rounds (medians ~219 vs ~191 tokens/s); not yet measured on a Zen 1-3.
    return active_kernel_level() == KernelLevel::kAvx2 ? kDecodePrefetchBytes : 0;
  }
  static const int64_t l3_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3_bytes > 0 && working_set_bytes > l3_bytes / 2 ? kDecodePrefetchFromMemoryBytes
                                                          : kDecodePrefetchBytes;
}

void dequantize_for_fallback(DType type, const uint8_t* src, float* dst, int64_t num_elements) {
  const Status status = reference::dequantize(type, src, dst, num_elements);
  TACHYON_CHECK(status.ok());
}

void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool) {
  matmul_at_level(active_kernel_level(), w, x, num_tokens, y, pool);
}

void matmul_many(std::span<const MatmulProduct> products, const float* x, int64_t num_tokens,
                 ThreadPool& pool, const RowEpilogue* epilogue) {
  matmul_many_at_level(active_kernel_level(), products, x, num_tokens, pool, epilogue);
}

void matmul_at_level(KernelLevel level, const WeightMatrix& w, const float* x, int64_t num_tokens,
                     float* y, ThreadPool& pool) {
  const MatmulProduct product{&w, y};
  matmul_many_at_level(level, std::span<const MatmulProduct>(&product, 1), x, num_tokens, pool);
}

void matmul_many_at_level(KernelLevel level, std::span<const MatmulProduct> products,
                          const float* x, int64_t num_tokens, ThreadPool& pool,
                          const RowEpilogue* epilogue) {
  // The caller's thread owns the quantized activations; workers only read them.
  thread_local MatmulInput input;
  input.prepare(level, products, x, num_tokens);
  input.quantize_all(pool);
  matmul_many(products, input, pool, epilogue);
}

namespace {

// products[j] reads inputs[j] (all prepared at one level): one pass over the pool for all.
void run_products(std::span<const MatmulProduct> products,
                  std::span<const MatmulInput* const> inputs, ThreadPool& pool,
                  const RowEpilogue* epilogue) {
  TACHYON_CHECK(inputs.size() == products.size());
  if (products.empty()) return;
  const KernelLevel level = inputs[0]->level();
  for (size_t j = 0; j < products.size(); ++j) {
    const WeightMatrix& w = *products[j].w;
    TACHYON_CHECK(matmul_supports(w.type));
    TACHYON_CHECK(w.rows >= 0 && w.cols >= 0);
    TACHYON_CHECK(inputs[j]->serves(w));
    TACHYON_CHECK(inputs[j]->level() == level);
    TACHYON_CHECK(epilogue == nullptr || w.rows == products[0].w->rows);
    TACHYON_CHECK(w.cols % dtype_info(w.type).block_elements == 0);
  }
  note_family_level(KernelFamily::kMatmul, level);
  if (level == KernelLevel::kReference) {
    // The oracle, single-threaded: for tests and for TACHYON_CPU_LEVEL=portable debugging.
    for (size_t j = 0; j < products.size(); ++j) {
      const WeightMatrix& w = *products[j].w;
      if (w.rows == 0 || inputs[j]->num_tokens() == 0) continue;
      const Status status = reference::matmul(w.type, w.data, w.rows, w.cols, inputs[j]->x(),
                                              inputs[j]->num_tokens(), products[j].y);
      TACHYON_CHECK(status.ok());
    }
    if (epilogue != nullptr && products[0].w->rows > 0) (*epilogue)(0, products[0].w->rows);
    return;
  }

  // The jobs live on the stack (hot in cache; a thread-local vector's lines are cold after the
  // weights stream through) unless there are more than a layer's few products.
  constexpr size_t kStackJobs = 4;
  MatmulJob stack_jobs[kStackJobs];
  thread_local std::vector<MatmulJob> many_jobs;
  if (products.size() > kStackJobs) many_jobs.resize(products.size());
  MatmulJob* const jobs = products.size() > kStackJobs ? many_jobs.data() : stack_jobs;
  size_t num_jobs = 0;
  for (size_t j = 0; j < products.size(); ++j) {
    const WeightMatrix& w = *products[j].w;
    const MatmulInput& input = *inputs[j];
    if (input.num_tokens() == 0) continue;
    jobs[num_jobs++] = MatmulJob{level,
                                 &w,
                                 input.x(),
                                 input.num_tokens(),
                                 products[j].y,
                                 MatmulInput::format_of(w) == MatmulInput::Format::kQ8K,
                                 &input.q8(),
                                 &input.q8_k()};
  }
  if (num_jobs == 0) return;
  // One pass over the pool for all of them: each thread takes its share of every matrix, the
  // shares following the threads' recent speeds (ThreadBalance). Which thread computes a row
  // does not change its result.
  ThreadBalance& balance = balance_for(products, inputs[0]->num_tokens(), pool.num_threads());
  const MatmulJob* job_list = jobs;
  ThreadBalance* shares = &balance;
  // Each thread's time counts from the run's start, so a worker's wake-up delay is part of what
  // the balance evens out (it matters for the small products of a small model's decode step).
  const auto start = std::chrono::steady_clock::now();
  pool.run([job_list, num_jobs, shares, start, epilogue](int index, int) {
    double bytes = 0;
    int64_t begin = 0;
    int64_t end = 0;
    for (size_t j = 0; j < num_jobs; ++j) {
      shares->split(job_list[j].w->rows, kPanelRows, index, &begin, &end);
      matmul_range(job_list[j], begin, end);
      bytes += static_cast<double>(end - begin) * static_cast<double>(job_list[j].w->row_bytes());
    }
    // Every product has the same rows here, so [begin, end) is this thread's part of each.
    if (epilogue != nullptr && begin < end) (*epilogue)(begin, end);
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    shares->record(index, bytes, seconds.count());
  });
  balance.update();
}

}  // namespace

void matmul_many(std::span<const MatmulProduct> products, const MatmulInput& input,
                 ThreadPool& pool, const RowEpilogue* epilogue) {
  if (products.empty() || input.num_tokens() == 0) {
    for (const MatmulProduct& product : products) TACHYON_CHECK(input.serves(*product.w));
    return;
  }
  constexpr size_t kStackInputs = 8;
  const MatmulInput* stack_inputs[kStackInputs];
  thread_local std::vector<const MatmulInput*> many_inputs;
  if (products.size() > kStackInputs) many_inputs.resize(products.size());
  const MatmulInput** inputs = products.size() > kStackInputs ? many_inputs.data() : stack_inputs;
  for (size_t j = 0; j < products.size(); ++j) inputs[j] = &input;
  run_products(products, std::span<const MatmulInput* const>(inputs, products.size()), pool,
               epilogue);
}

void matmul_each(std::span<const MatmulProduct> products,
                 std::span<const MatmulInput* const> inputs, ThreadPool& pool,
                 const RowEpilogue* epilogue) {
  run_products(products, inputs, pool, epilogue);
}

}  // namespace tachyon::kernels
