// A digest that tells model files apart without reading them whole (a model may be hundreds
// of GB): SHA-256 over each file's name, size, first 4 MiB (header, metadata and tensor table)
// and 64 KiB at 256 evenly spaced offsets. Two different models (or quantizations, or
// fine-tunes) differ there; it keys caches of what the model computed (the KV disk tier).
#pragma once

#include <string>

#include "core/sha256.h"
#include "core/status.h"

namespace tachyon {

// `path`: a file, or a folder whose regular files (not recursing, by name) are fingerprinted.
Result<Sha256Digest> fingerprint_model_files(const std::string& path);

}  // namespace tachyon
