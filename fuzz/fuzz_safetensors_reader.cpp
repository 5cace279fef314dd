// Any byte string given to the safetensors reader yields a file or a Status, never a crash, a
// hang or an unbounded allocation; whatever parses has tensors whose bytes lie in the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "model_files/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tachyon::SafetensorsFile::parse(data, size);
  if (!file.ok()) return 0;
  for (const tachyon::SafetensorsTensor& tensor : (*file)->tensors()) {
    const uint64_t bytes = tensor.end - tensor.begin;
    if (tensor.data < data || tensor.data + bytes > data + size ||
        (*file)->find_tensor(tensor.name) != &tensor ||
        bytes != tensor.num_elements * tachyon::safetensors_dtype_bytes(tensor.dtype)) {
      std::abort();  // the reader promised these
    }
  }
  return 0;
}
