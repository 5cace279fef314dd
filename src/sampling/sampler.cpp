#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/elementwise.h"

namespace tachyon {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();
// Up to this k, top-k keeps a heap in one pass; beyond it nth_element is cheaper.
constexpr size_t kHeapTopKLimit = 2048;

// e^x for the relative logits the sampler works with (x <= 0 after the shift): Cephes-style
// range reduction and polynomial, about 2 ulp. Unlike libm's expf it inlines and is the same
// arithmetic on every platform (each step is its own statement so no FMA contraction changes
// it). x below -87 (including -inf) gives exactly 0.
inline float exp_weight(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const bool underflow = !(x >= -87.0f);
  const float clamped = underflow ? -87.0f : (x > 0.0f ? 0.0f : x);
  const float scaled = clamped * kLog2e;
  const float shifted_scaled = scaled + kRoundMagic;
  const float n = shifted_scaled - kRoundMagic;  // nearest integer to x·log2(e), in [-126, 0]
  const float high = n * 0.693359375f;
  const float low = n * -2.12194440e-4f;
  float r = clamped - high;
  r = r - low;
  float p = 1.9875691500e-4f;
  p = p * r;
  p = p + 1.3981999507e-3f;
  p = p * r;
  p = p + 8.3334519073e-3f;
  p = p * r;
  p = p + 4.1665795894e-2f;
  p = p * r;
  p = p + 1.6666665459e-1f;
  p = p * r;
  p = p + 5.0000001201e-1f;
  const float r2 = r * r;
  p = p * r2;
  p = p + r;
  p = p + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
  const float result = p * scale;
  return underflow ? 0.0f : result;
}

uint64_t pick_seed(const SamplingParams& params) {
  if (params.seed) return *params.seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// Lowest id among the largest logits; NaN never wins; 0 when all are -inf or NaN.
TokenId argmax(std::span<const float> logits) {
  return static_cast<TokenId>(kernels::argmax(logits.data(), static_cast<int64_t>(logits.size())));
}

float max_logit(std::span<const float> logits) {
  float result = kNegInf;
  for (float value : logits) result = value > result ? value : result;  // skips NaN
  return result;
}

// logit - max with the degenerate cases made explicit: NaN is -inf, and when the max is +inf the
// +inf tokens share all the mass.
float shifted(float logit, float max) {
  if (std::isnan(logit)) return kNegInf;
  if (max == kPosInf) return logit == kPosInf ? 0.0f : kNegInf;
  return logit - max;
}

}  // namespace

Sampler::Sampler(SamplingParams params, int32_t vocab_size)
    : params_(std::move(params)), vocab_size_(vocab_size), seed_(pick_seed(params_)), rng_(seed_) {
  TACHYON_CHECK(vocab_size_ > 0);
  TACHYON_CHECK(params_.validate(vocab_size_).ok());
  bias_.assign(params_.logit_bias.begin(), params_.logit_bias.end());
  logprobs_.top.reserve(static_cast<size_t>(params_.top_logprobs));
}

Result<Sampler> Sampler::create(SamplingParams params, int32_t vocab_size) {
  if (vocab_size <= 0) return invalid_argument("vocabulary size must be > 0");
  TACHYON_RETURN_IF_ERROR(params.validate(vocab_size));
  return Sampler(std::move(params), vocab_size);
}

double Sampler::uniform() {
  // Top 53 bits of one mt19937_64 output: exact in a double, in [0, 1), the same everywhere.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_bias_and_penalties(std::span<float> logits, std::span<const TokenId> context,
                                       size_t num_prompt_tokens) {
  TACHYON_CHECK(logits.size() == static_cast<size_t>(vocab_size_));
  TACHYON_CHECK(num_prompt_tokens <= context.size());
  for (const auto& [id, bias] : bias_) logits[static_cast<size_t>(id)] += bias;
  apply_penalties(logits, context, num_prompt_tokens);
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const TokenId> context,
                              size_t num_prompt_tokens) {
  const bool repetition = params_.repetition_penalty != 1.0f && params_.penalty_last_n != 0;
  const bool openai = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  const auto in_vocab = [this](TokenId id) { return id >= 0 && id < vocab_size_; };

  // Dense per-token flags and counts beat hashing at these sizes; only the touched entries are
  // reset, so a call costs O(context), not O(vocab).
  if (repetition) {
    if (in_window_.empty()) in_window_.assign(static_cast<size_t>(vocab_size_), 0);
    const size_t window =
        params_.penalty_last_n < 0
            ? context.size()
            : std::min(context.size(), static_cast<size_t>(params_.penalty_last_n));
    touched_.clear();
    for (TokenId id : context.last(window)) {
      if (in_vocab(id) && !in_window_[static_cast<size_t>(id)]) {
        in_window_[static_cast<size_t>(id)] = 1;
        touched_.push_back(id);
      }
    }
    const float penalty = params_.repetition_penalty;
    for (TokenId id : touched_) {
      float& logit = logits[static_cast<size_t>(id)];
      logit = logit > 0.0f ? logit / penalty : logit * penalty;
      in_window_[static_cast<size_t>(id)] = 0;
    }
  }

  if (openai) {
    if (output_counts_.empty()) output_counts_.assign(static_cast<size_t>(vocab_size_), 0);
    touched_.clear();
    for (TokenId id : context.subspan(num_prompt_tokens)) {
      if (in_vocab(id) && output_counts_[static_cast<size_t>(id)]++ == 0) touched_.push_back(id);
    }
    for (TokenId id : touched_) {
      int32_t& count = output_counts_[static_cast<size_t>(id)];
      logits[static_cast<size_t>(id)] -=
          params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
      count = 0;
    }
  }
}

void Sampler::compute_logprobs(std::span<const float> logits) {
  logprob_max_ = max_logit(logits);
  log_normalizer_ = 0.0;  // log Σ exp(logit - max); stays 0 when nothing is finite
  if (logprob_max_ > kNegInf) {
    double total = 0.0;
    for (float logit : logits) total += std::exp(shifted(logit, logprob_max_));
    log_normalizer_ = std::log(total);
  }

  // Top-N by insertion into a short sorted list: most entries fail the first comparison.
  std::vector<TokenLogprob>& top = logprobs_.top;
  top.clear();
  const size_t num_top = std::min(static_cast<size_t>(params_.top_logprobs), logits.size());
  if (num_top > 0) {
    for (size_t i = 0; i < logits.size(); ++i) {
      const float value = std::isnan(logits[i]) ? kNegInf : logits[i];
      if (top.size() == num_top) {
        if (!(value > top.back().logprob)) continue;  // ids ascend: an equal value loses
        top.pop_back();
      }
      size_t position = top.size();
      while (position > 0 && value > top[position - 1].logprob) --position;
      top.insert(top.begin() + static_cast<std::ptrdiff_t>(position),
                 TokenLogprob{static_cast<TokenId>(i), value});
    }
    for (TokenLogprob& entry : top) entry.logprob = logprob_of(entry.logprob);
  }
}

float Sampler::logprob_of(float logit) const {
  return static_cast<float>(static_cast<double>(shifted(logit, logprob_max_)) - log_normalizer_);
}

void Sampler::set_chosen_logprob(std::span<const float> logits, TokenId chosen) {
  logprobs_.chosen = TokenLogprob{chosen, logprob_of(logits[static_cast<size_t>(chosen)])};
}

bool Sampler::better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

size_t Sampler::select_top_k(std::span<const float> logits, size_t k) {
  const size_t vocab = logits.size();
  if (k <= kHeapTopKLimit) {
    // One pass keeping the k best in a heap whose front is the worst of them; for typical
    // logits almost every token fails the single comparison with the front.
    candidates_.resize(k);
    for (size_t i = 0; i < k; ++i) candidates_[i] = Candidate{logits[i], static_cast<TokenId>(i)};
    std::make_heap(candidates_.begin(), candidates_.end(), better);
    for (size_t i = k; i < vocab; ++i) {
      if (logits[i] > candidates_.front().logit) {  // ids ascend: an equal logit is not better
        std::pop_heap(candidates_.begin(), candidates_.end(), better);
        candidates_.back() = Candidate{logits[i], static_cast<TokenId>(i)};
        std::push_heap(candidates_.begin(), candidates_.end(), better);
      }
    }
    std::sort_heap(candidates_.begin(), candidates_.end(), better);
    return k;
  }
  candidates_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) candidates_[i] = Candidate{logits[i], static_cast<TokenId>(i)};
  const auto begin = candidates_.begin();
  const auto kth = begin + static_cast<std::ptrdiff_t>(k);
  std::nth_element(begin, kth, candidates_.end(), better);
  std::sort(begin, kth, better);
  return k;
}

size_t Sampler::collect_nucleus(std::span<const float> logits, double target) {
  // The tokens above a logit threshold are a prefix of the sorted vocabulary; once their mass
  // reaches the target the nucleus lies within them, so only they get sorted. Logits are
  // relative to the best (0), so the first threshold keeps tokens within e^-8 of it.
  for (float threshold : {-8.0f, -16.0f, -32.0f, std::numeric_limits<float>::lowest()}) {
    candidates_.clear();  // keeps its capacity
    double mass = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] >= threshold) {
        candidates_.push_back(Candidate{logits[i], static_cast<TokenId>(i)});
        mass += exp_weight(logits[i]);
      }
    }
    if (mass >= target) break;
  }
  std::sort(candidates_.begin(), candidates_.end(), better);
  return candidates_.size();
}

TokenId Sampler::sample(std::span<float> logits, std::span<const TokenId> context,
                        size_t num_prompt_tokens, TokenConstraint* constraint) {
  apply_bias_and_penalties(logits, context, num_prompt_tokens);
  constraint_failed_ = false;
  if (constraint == nullptr) return pick(logits);

  // The mask goes first when more than the chosen token depends on it: logprobs describe the
  // constrained distribution, and truncation (top-k, top-p, min-p) keeps allowed tokens only.
  // Otherwise the token picked without it is checked, and the mask is built only when the
  // constraint rejects it: for greedy the same token; for sampling the same distribution (a
  // rejected draw is redrawn from the masked one, so each allowed token keeps probability
  // p / allowed mass), at the cost of a second uniform when it happens.
  const bool truncates = params_.top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f;
  const bool mask_first = params_.logprobs || (!params_.is_greedy() && truncates);
  if (mask_first) constraint->mask(logits);
  TokenId token = pick(logits);
  if (constraint->accept(token)) return token;
  if (!mask_first) {
    constraint->mask(logits);
    token = pick_again(logits);
    if (constraint->accept(token)) return token;
  }
  constraint_failed_ = true;  // the constraint allows nothing here
  return token;
}

TokenId Sampler::pick_again(std::span<float> logits) {
  if (params_.is_greedy()) return argmax(logits);
  // The logits are already divided by the temperature; shifted again so the best allowed one
  // is 0 (the one drawn before may have been the only one near 0).
  const float max = max_logit(logits);
  if (!(max > kNegInf)) return argmax(logits);
  for (float& logit : logits) logit = shifted(logit, max);
  return draw_whole_vocabulary(logits, uniform());
}

TokenId Sampler::draw_whole_vocabulary(std::span<const float> logits, double u) const {
  double total = 0.0;
  for (float logit : logits) total += exp_weight(logit);
  const double target = u * total;
  double cumulative = 0.0;
  TokenId token = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float weight = exp_weight(logits[i]);
    if (weight <= 0.0f) continue;
    cumulative += weight;
    token = static_cast<TokenId>(i);
    if (target < cumulative) break;  // otherwise rounding: the last possible token
  }
  return token;
}

TokenId Sampler::pick(std::span<float> logits) {
  if (params_.is_greedy()) {
    const TokenId token = argmax(logits);
    if (params_.logprobs) {
      compute_logprobs(logits);
      set_chosen_logprob(logits, token);
    }
    return token;
  }

  // Drawn up front so every sampled token consumes exactly one output, whatever survives.
  const double u = uniform();

  // Temperature, shifted so the best logit is exactly 0: no overflow for tiny temperatures,
  // and min-p becomes a fixed threshold. NaN becomes -inf.
  const float max = max_logit(logits);
  if (!(max > kNegInf)) {
    const TokenId token = argmax(logits);  // nothing is possible; see the header
    if (params_.logprobs) {
      compute_logprobs(logits);
      set_chosen_logprob(logits, token);
    }
    return token;
  }
  const float temperature = params_.temperature;
  for (float& logit : logits) {
    const float delta = shifted(logit, max);
    logit = max == kPosInf ? delta : delta / temperature;
  }

  const size_t vocab = logits.size();
  const bool use_top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  // Probability >= min_p · p_max  ⇔  logit >= log(min_p), since the best logit is now 0.
  const float min_p_threshold = use_min_p ? std::log(params_.min_p) : kNegInf;

  // The chosen token's logit is never touched below, so its logprob can be read at the end.
  if (params_.logprobs) compute_logprobs(logits);

  TokenId token = -1;
  if (!use_top_k && !use_top_p) {
    // Whole vocabulary in id order; min-p masks in place. No sorting, no scratch.
    if (use_min_p) {
      for (float& logit : logits) logit = logit >= min_p_threshold ? logit : kNegInf;
    }
    token = draw_whole_vocabulary(logits, u);
  } else {
    // Survivors are candidates_[0, size), sorted best first (strict total order, so the same
    // with any standard library); scratch keeps its capacity, so no allocation after warm-up.
    size_t size = 0;
    double total = 0.0;  // the mass top-p is relative to: top-k survivors, else everything
    if (use_top_k) {
      size = select_top_k(logits, static_cast<size_t>(params_.top_k));
      for (size_t i = 0; i < size; ++i) total += exp_weight(candidates_[i].logit);
    } else {
      for (float logit : logits) total += exp_weight(logit);
      size = collect_nucleus(logits, static_cast<double>(params_.top_p) * total);
    }
    if (use_top_p) {
      const double target = static_cast<double>(params_.top_p) * total;
      double cumulative = 0.0;
      size_t kept = 0;
      while (kept < size) {
        cumulative += exp_weight(candidates_[kept].logit);
        ++kept;
        if (cumulative >= target) break;  // smallest prefix with mass >= top_p
      }
      size = kept;
    }
    // Survivors [0, size) are sorted best first here, and the best has logit 0.
    if (use_min_p) {
      size_t kept = 1;
      while (kept < size && candidates_[kept].logit >= min_p_threshold) ++kept;
      size = kept;
    }
    double survivor_mass = 0.0;
    for (size_t i = 0; i < size; ++i) survivor_mass += exp_weight(candidates_[i].logit);
    const double target = u * survivor_mass;
    double cumulative = 0.0;
    for (size_t i = 0; i < size; ++i) {
      const float weight = exp_weight(candidates_[i].logit);
      if (weight <= 0.0f && i > 0) break;  // sorted: the rest have no mass either
      cumulative += weight;
      token = candidates_[i].id;
      if (target < cumulative) break;
    }
  }
  TACHYON_CHECK(token >= 0);
  if (params_.logprobs) set_chosen_logprob(logits, token);
  return token;
}

}  // namespace tachyon
