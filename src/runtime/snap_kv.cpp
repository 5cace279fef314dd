#include "runtime/snap_kv.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/check.h"

namespace tachyon {

SnapKvScorer::SnapKvScorer(const DecoderModel& model, int length, SnapKvOptions options)
    : shape_(model.attention_shape()),
      num_layers_(model.config().num_layers),
      sliding_window_(model.config().sliding_window),
      length_(length),
      options_(options),
      scored_(std::max(0, length - options.window)) {
  TACHYON_CHECK(!model.config().mla.enabled() && options.window > 0 &&
                options.budget >= options.window);
  scores_.assign(static_cast<size_t>(num_layers_) * shape_.num_kv_heads * scored_, 0.0);
  for (int layer = 0; layer < num_layers_; ++layer) {
    local_.push_back(model.config().layer_is_local(layer));
  }
}

void SnapKvScorer::observe(const KvCache& cache, int start_position, int layer,
                           const float* queries, int num_tokens) {
  std::vector<float> values;
  observe(layer, start_position, queries, num_tokens,
          [&](int kv_head, int count, float* keys_by_dimension) {
            values.resize(static_cast<size_t>(count) * shape_.head_size);
            cache.load_span(layer, kv_head, shape_.head_size, 0, count, keys_by_dimension, count,
                            values.data());
          });
}

void SnapKvScorer::observe(int layer, int start_position, const float* queries, int num_tokens,
                           KeyReader read_keys) {
  const int first = std::max(0, length_ - options_.window - start_position);
  if (first >= num_tokens || scored_ == 0) return;  // no window token here
  if (local_[static_cast<size_t>(layer)]) return;    // keeps its recent positions
  const int head_size = shape_.head_size;
  const int group = shape_.num_heads / shape_.num_kv_heads;
  const int64_t q_size = static_cast<int64_t>(shape_.num_heads) * head_size;
  const int visible = start_position + num_tokens;  // keys [0, visible) are in the cache
  std::vector<float> keys(static_cast<size_t>(head_size) * visible);
  std::vector<float> logits(visible);
  for (int kv_head = 0; kv_head < shape_.num_kv_heads; ++kv_head) {
    read_keys(kv_head, visible, keys.data());
    double* scores =
        scores_.data() + (static_cast<size_t>(layer) * shape_.num_kv_heads + kv_head) * scored_;
    for (int t = first; t < num_tokens; ++t) {
      const int seen = start_position + t + 1;  // it sees keys [0, seen)
      for (int g = 0; g < group; ++g) {
        const float* query = queries + t * q_size + (kv_head * group + g) * head_size;
        // Dimension by dimension over contiguous keys: one vector loop per dimension.
        std::fill(logits.begin(), logits.begin() + seen, 0.0f);
        for (int d = 0; d < head_size; ++d) {
          const float q = query[d] * shape_.scale;
          const float* row = keys.data() + static_cast<size_t>(d) * visible;
          for (int j = 0; j < seen; ++j) logits[j] += q * row[j];
        }
        const float max_logit = *std::max_element(logits.begin(), logits.begin() + seen);
        double sum = 0;
        for (int j = 0; j < seen; ++j) sum += std::exp(static_cast<double>(logits[j] - max_logit));
        for (int j = 0; j < std::min(seen, scored_); ++j) {
          scores[j] += std::exp(static_cast<double>(logits[j] - max_logit)) / sum;
        }
      }
    }
  }
}

KeptPositions SnapKvScorer::kept_positions(int first_scored) const {
  const int budget = std::min(options_.budget, length_);
  first_scored = std::clamp(first_scored, 0, scored_);
  // From the scored span: what the budget leaves after the shared prefix and the window.
  const int from_scored = std::clamp(budget - first_scored - (length_ - scored_), 0,
                                     scored_ - first_scored);
  const int count = first_scored + from_scored + (length_ - scored_);
  const bool any_local = std::find(local_.begin(), local_.end(), true) != local_.end();
  if (any_local && count - first_scored < sliding_window_ - 1) {
    return recent_positions(num_layers_, shape_.num_kv_heads, length_, length_);  // all
  }
  std::vector<int> recent(count);  // the sliding-window layers' positions
  std::iota(recent.begin(), recent.begin() + first_scored, 0);
  std::iota(recent.begin() + first_scored, recent.end(), length_ - (count - first_scored));
  const int half = options_.pool_kernel / 2;
  KeptPositions kept(num_layers_, std::vector<std::vector<int>>(shape_.num_kv_heads));
  std::vector<double> pooled(scored_);
  std::vector<int> order;
  for (int layer = 0; layer < num_layers_; ++layer) {
    if (local_[static_cast<size_t>(layer)]) {
      kept[layer].assign(shape_.num_kv_heads, recent);
      continue;
    }
    for (int kv_head = 0; kv_head < shape_.num_kv_heads; ++kv_head) {
      const double* scores =
          scores_.data() + (static_cast<size_t>(layer) * shape_.num_kv_heads + kv_head) * scored_;
      // Averaged over a few neighbours: a kept token keeps some of its context.
      for (int j = first_scored; j < scored_; ++j) {
        const int lo = std::max(first_scored, j - half), hi = std::min(scored_ - 1, j + half);
        double sum = 0;
        for (int i = lo; i <= hi; ++i) sum += scores[i];
        pooled[j] = sum / (hi - lo + 1);
      }
      order.resize(scored_ - first_scored);
      std::iota(order.begin(), order.end(), first_scored);
      std::partial_sort(order.begin(), order.begin() + from_scored, order.end(),
                        [&](int a, int b) {
                          return pooled[a] != pooled[b] ? pooled[a] > pooled[b] : a < b;
                        });
      std::vector<int>& positions = kept[layer][kv_head];
      positions.resize(first_scored);
      std::iota(positions.begin(), positions.end(), 0);
      positions.insert(positions.end(), order.begin(), order.begin() + from_scored);
      for (int p = scored_; p < length_; ++p) positions.push_back(p);  // the window
      std::sort(positions.begin(), positions.end());
    }
  }
  return kept;
}

Status check_snapkv_budget(const ModelConfig& config, int budget) {
  if (config.mla.enabled()) {
    return invalid_argument("SnapKV is not built for MLA models (their cache is one latent per token)");
  }
  if (budget < 64) return invalid_argument(fmt::format("SnapKV budget {} is below 64 tokens", budget));
  if (config.has_local_layers() && budget < config.sliding_window) {
    return invalid_argument(fmt::format(
        "SnapKV budget {} is below the model's sliding window of {} tokens (its local layers "
        "keep a whole window of recent positions)",
        budget, config.sliding_window));
  }
  return Status();
}

KeptPositions recent_positions(int num_layers, int num_kv_heads, int length, int budget) {
  std::vector<int> recent(std::min(budget, length));
  std::iota(recent.begin(), recent.end(), length - static_cast<int>(recent.size()));
  return KeptPositions(num_layers, std::vector<std::vector<int>>(num_kv_heads, recent));
}

void compact_cache(KvCache& cache, const KeptPositions& kept) {
  for (int layer = 0; layer < static_cast<int>(kept.size()); ++layer) {
    cache.keep_positions(layer, kept[layer]);
  }
}

}  // namespace tachyon
