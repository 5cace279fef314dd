#include "runtime/snap_kv.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace tachyon {

SnapKvScorer::SnapKvScorer(const DecoderModel& model, int length, SnapKvOptions options)
    : shape_(model.attention_shape()),
      num_layers_(model.config().num_layers),
      length_(length),
      options_(options),
      scored_(std::max(0, length - options.window)) {
  TACHYON_CHECK(!model.config().mla.enabled() && options.window > 0 &&
                options.budget >= options.window);
  scores_.assign(static_cast<size_t>(num_layers_) * shape_.num_kv_heads * scored_, 0.0);
}

void SnapKvScorer::observe(const KvCache& cache, int start_position, int layer,
                           const float* queries, int num_tokens) {
  const int first = std::max(0, length_ - options_.window - start_position);
  if (first >= num_tokens || scored_ == 0) return;  // no window token in this chunk
  const int head_size = shape_.head_size;
  const int group = shape_.num_heads / shape_.num_kv_heads;
  const int64_t q_size = static_cast<int64_t>(shape_.num_heads) * head_size;
  const int visible = start_position + num_tokens;  // keys [0, visible) are in the cache
  std::vector<float> keys(static_cast<size_t>(visible) * head_size), values(keys.size());
  std::vector<double> probabilities(visible);
  for (int kv_head = 0; kv_head < shape_.num_kv_heads; ++kv_head) {
    cache.load_head(layer, kv_head, head_size, visible, keys.data(), values.data());
    double* scores =
        scores_.data() + (static_cast<size_t>(layer) * shape_.num_kv_heads + kv_head) * scored_;
    for (int t = first; t < num_tokens; ++t) {
      const int position = start_position + t;  // sees keys [0, position]
      for (int g = 0; g < group; ++g) {
        const float* query = queries + t * q_size + (kv_head * group + g) * head_size;
        double max_logit = -INFINITY;
        for (int j = 0; j <= position; ++j) {
          const float* key = keys.data() + static_cast<size_t>(j) * head_size;
          double dot = 0;
          for (int d = 0; d < head_size; ++d) dot += static_cast<double>(query[d]) * key[d];
          probabilities[j] = dot * shape_.scale;
          max_logit = std::max(max_logit, probabilities[j]);
        }
        double sum = 0;
        for (int j = 0; j <= position; ++j) {
          probabilities[j] = std::exp(probabilities[j] - max_logit);
          sum += probabilities[j];
        }
        for (int j = 0; j < std::min(position + 1, scored_); ++j) scores[j] += probabilities[j] / sum;
      }
    }
  }
}

KeptPositions SnapKvScorer::kept_positions() const {
  const int budget = std::min(options_.budget, length_);
  const int from_scored = std::max(0, budget - (length_ - scored_));
  const int half = options_.pool_kernel / 2;
  KeptPositions kept(num_layers_, std::vector<std::vector<int>>(shape_.num_kv_heads));
  std::vector<double> pooled(scored_);
  std::vector<int> order(scored_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int kv_head = 0; kv_head < shape_.num_kv_heads; ++kv_head) {
      const double* scores =
          scores_.data() + (static_cast<size_t>(layer) * shape_.num_kv_heads + kv_head) * scored_;
      // Averaged over a few neighbours: a kept token keeps some of its context.
      for (int j = 0; j < scored_; ++j) {
        const int lo = std::max(0, j - half), hi = std::min(scored_ - 1, j + half);
        double sum = 0;
        for (int i = lo; i <= hi; ++i) sum += scores[i];
        pooled[j] = sum / (hi - lo + 1);
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + from_scored, order.end(),
                        [&](int a, int b) {
                          return pooled[a] != pooled[b] ? pooled[a] > pooled[b] : a < b;
                        });
      std::vector<int>& positions = kept[layer][kv_head];
      positions.assign(order.begin(), order.begin() + from_scored);
      for (int p = scored_; p < length_ && static_cast<int>(positions.size()) < budget; ++p) {
        positions.push_back(p);  // the window (or, for a short prompt, everything)
      }
      std::sort(positions.begin(), positions.end());
    }
  }
  return kept;
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
