// Any byte string given to the GGUF reader yields a file or a Status, never a crash, a hang or
// an unbounded allocation; whatever parses also survives building a tokenizer and a model
// (config and weights: dense, MoE, MLA) from it.
#include <cstddef>
#include <cstdint>

#include "model_files/gguf_file.h"
#include "model_files/model_summary.h"
#include "models/decoder_model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tachyon::Result<std::unique_ptr<tachyon::GgufFile>> file = tachyon::GgufFile::parse(data, size);
  if (!file.ok()) return 0;
  (void)tachyon::summarize_model(**file);
  auto tokenizer = tachyon::Tokenizer::from_gguf(**file);
  if (tokenizer.ok()) {
    const auto ids = (*tokenizer)->encode("Hello <|im_start|> world 123 \xe2\x96\x81\xff");
    (void)(*tokenizer)->decode(ids);
  }
  (void)tachyon::DecoderModel::load(**file);
  return 0;
}
