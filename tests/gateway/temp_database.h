// A fresh SQLite file path in its own temporary folder, removed with the object.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tachyon::gateway {

class TempDatabase {
 public:
  TempDatabase() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tachyon-gateway-XXXXXX").string();
    folder_ = mkdtemp(pattern.data());
  }
  ~TempDatabase() {
    std::error_code error;
    std::filesystem::remove_all(folder_, error);
  }
  std::string path() const { return (std::filesystem::path(folder_) / "tachyon.db").string(); }

 private:
  std::string folder_;
};

}  // namespace tachyon::gateway
