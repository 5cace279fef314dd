#include "model_files/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace tachyon {
namespace {

namespace fs = std::filesystem;

// A small JSON file of the folder (config, index) as an object.
Result<boost::json::object> read_json_object(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot read {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  boost::json::error_code error;
  boost::json::value value = boost::json::parse(text.str(), error);
  if (error) return corrupt_data(fmt::format("{} is not valid JSON: {}", path.string(), error.message()));
  if (!value.is_object()) return corrupt_data(fmt::format("{} is not a JSON object", path.string()));
  return std::move(value.get_object());
}

// A shard name from the index must name a file in the folder itself.
bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace

bool HfCheckpoint::is_checkpoint_dir(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error) && fs::is_regular_file(fs::path(path) / kConfigName, error);
}

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::open(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return not_found(fmt::format("{} is not a directory", dir));
  std::unique_ptr<HfCheckpoint> checkpoint(new HfCheckpoint());
  checkpoint->dir_ = dir;
  const fs::path config_path = fs::path(dir) / kConfigName;
  if (!fs::is_regular_file(config_path, error)) {
    return not_found(fmt::format("{}: no {} (not a Hugging Face model folder)", dir, kConfigName));
  }
  auto config = read_json_object(config_path);
  if (!config.ok()) return config.status();
  checkpoint->config_ = std::move(*config);
  TACHYON_RETURN_IF_ERROR(checkpoint->open_shards());
  return checkpoint;
}

Status HfCheckpoint::open_shards() {
  const fs::path folder(dir_);
  std::error_code error;
  // Shard name -> the tensors the index puts there (empty for a single file).
  std::map<std::string, std::vector<std::string>> listed;
  const fs::path index_path = folder / kIndexName;
  if (fs::is_regular_file(index_path, error)) {
    auto index = read_json_object(index_path);
    if (!index.ok()) return index.status();
    const boost::json::value* weight_map = index->if_contains("weight_map");
    if (weight_map == nullptr || !weight_map->is_object()) {
      return corrupt_data(fmt::format("{}: no \"weight_map\" object", index_path.string()));
    }
    for (const auto& [tensor, shard] : weight_map->get_object()) {
      if (!shard.is_string() || !is_plain_file_name(std::string_view(shard.get_string()))) {
        return corrupt_data(fmt::format("{}: tensor '{}' is mapped to {}, not a file name in the "
                                        "folder",
                                        index_path.string(), std::string(tensor),
                                        boost::json::serialize(shard)));
      }
      listed[std::string(shard.get_string())].emplace_back(tensor);
    }
    if (listed.empty()) {
      return corrupt_data(fmt::format("{}: the weight_map lists no tensors", index_path.string()));
    }
  } else if (fs::is_regular_file(folder / kSingleFileName, error)) {
    listed[std::string(kSingleFileName)];
  } else {
    return not_found(fmt::format("{}: neither {} nor {} (no weights in the folder)", dir_,
                                 kSingleFileName, kIndexName));
  }
  for (const auto& [shard, names] : listed) {
    const fs::path shard_path = folder / shard;
    if (!fs::is_regular_file(shard_path, error)) {
      return not_found(fmt::format("{}: shard {} is missing (the index puts {} tensors there, "
                                   "e.g. '{}')",
                                   dir_, shard, names.size(), names.empty() ? "" : names.front()));
    }
    auto file = SafetensorsFile::open(shard_path.string());
    if (!file.ok()) return file.status();
    for (const std::string& name : names) {
      if ((*file)->find_tensor(name) == nullptr) {
        return corrupt_data(fmt::format("{}: the index puts tensor '{}' in {}, which does not "
                                        "hold it",
                                        dir_, name, shard));
      }
    }
    const size_t shard_number = shards_.size();
    for (const SafetensorsTensor& tensor : (*file)->tensors()) {
      auto [at, added] = shard_index_of_tensor_.emplace(tensor.name, shard_number);
      if (!added) {
        return corrupt_data(fmt::format("{}: tensor '{}' is in two shards, {} and {}", dir_,
                                        tensor.name, shards_[at->second].first, shard));
      }
      tensors_.emplace(tensor.name, &tensor);
    }
    shards_.emplace_back(shard, std::move(*file));
  }
  return Status();
}

std::vector<std::string> HfCheckpoint::shard_names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : shards_) names.push_back(name);
  return names;
}

const SafetensorsTensor* HfCheckpoint::find_tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::string HfCheckpoint::shard_of(std::string_view name) const {
  auto it = shard_index_of_tensor_.find(name);
  return it == shard_index_of_tensor_.end() ? std::string() : shards_[it->second].first;
}

}  // namespace tachyon
