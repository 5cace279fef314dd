// A Hugging Face model folder: config.json and the weights as one model.safetensors or as
// shards listed by model.safetensors.index.json (its weight_map names each tensor's shard). Every
// shard is memory-mapped and validated (SafetensorsFile); the index is checked against the
// shards: a missing shard, a tensor the index puts in a shard that lacks it, a tensor in two
// shards, or a shard name that leaves the folder is a Status naming the file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "core/status.h"
#include "model_files/safetensors_file.h"

namespace tachyon {

class HfCheckpoint {
 public:
  static constexpr std::string_view kConfigName = "config.json";
  static constexpr std::string_view kSingleFileName = "model.safetensors";
  static constexpr std::string_view kIndexName = "model.safetensors.index.json";

  // True when `path` is a directory holding a config.json (what `-m DIR` takes).
  static bool is_checkpoint_dir(const std::string& path);
  static Result<std::unique_ptr<HfCheckpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const boost::json::object& config() const { return config_; }
  // The shards' file names, in the order they were opened (one for a single file).
  std::vector<std::string> shard_names() const;
  // Every tensor, sorted by name.
  const std::map<std::string, const SafetensorsTensor*, std::less<>>& tensors() const {
    return tensors_;
  }
  const SafetensorsTensor* find_tensor(std::string_view name) const;
  // The shard a tensor is in (its file name), or empty when there is no such tensor.
  std::string shard_of(std::string_view name) const;

 private:
  HfCheckpoint() = default;
  Status open_shards();

  std::string dir_;
  boost::json::object config_;
  std::vector<std::pair<std::string, std::unique_ptr<SafetensorsFile>>> shards_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> tensors_;
  std::map<std::string, size_t, std::less<>> shard_index_of_tensor_;
};

}  // namespace tachyon
