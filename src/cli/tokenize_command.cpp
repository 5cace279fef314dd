// `tachyon tokenize` and `tachyon detokenize`: text <-> token ids with a model's tokenizer.
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_path) {
  TACHYON_ASSIGN_OR_RETURN(const ModelFiles files, open_model(model_path));
  return files.load_tokenizer();
}

std::string ids_to_json(const std::vector<TokenId>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

// Calls `handle(line_number, parsed_value)` for each non-empty line of a JSON Lines file.
Status for_each_json_line(const std::string& path,
                          const std::function<Status(size_t, const boost::json::value&)>& handle) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open {}", path));
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line == "\r") continue;
    boost::system::error_code error;
    const boost::json::value value = boost::json::parse(line, error);
    if (error) {
      return invalid_argument(fmt::format("{}:{}: not valid JSON: {}", path, line_number,
                                          error.message()));
    }
    TACHYON_RETURN_IF_ERROR(handle(line_number, value));
  }
  return Status();
}

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string jsonl;
  bool no_special = false;
  bool add_special = false;
  bool show_pieces = false;
};

void run_tokenize(const TokenizeOptions& options) {
  Result<std::unique_ptr<Tokenizer>> tokenizer = load_tokenizer(options.model);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  const EncodeOptions encode_options{.parse_special = !options.no_special,
                                     .add_special = options.add_special};
  if (!options.jsonl.empty()) {
    std::string out;
    Status status = for_each_json_line(
        options.jsonl, [&](size_t line_number, const boost::json::value& value) -> Status {
          if (!value.is_string()) {
            return invalid_argument(fmt::format("{}:{}: expected a JSON string, got {}",
                                                options.jsonl, line_number,
                                                boost::json::serialize(value).substr(0, 40)));
          }
          const boost::json::string& text = value.get_string();
          out += ids_to_json((*tokenizer)->encode(std::string_view(text.data(), text.size()),
                                                  encode_options));
          out += '\n';
          return Status();
        });
    if (!status.ok()) return fail(status.message());
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  const std::vector<TokenId> ids = (*tokenizer)->encode(options.prompt, encode_options);
  if (!options.show_pieces) {
    std::printf("%s\n", ids_to_json(ids).c_str());
    return;
  }
  for (TokenId id : ids) {
    std::printf("%6d  %s\n", id,
                boost::json::serialize(boost::json::string((*tokenizer)->vocabulary().tokens[id]))
                    .c_str());
  }
}

struct DetokenizeOptions {
  std::string model;
  std::string jsonl;
  std::vector<int64_t> ids;
  bool skip_special = false;
};

Result<std::string> detokenize(const Tokenizer& tokenizer, const boost::json::array& ids,
                               bool skip_special, const std::string& where) {
  StreamingDetokenizer detokenizer(tokenizer, skip_special);
  std::string text;
  for (const boost::json::value& id : ids) {
    if (!id.is_int64() && !id.is_uint64()) {
      return invalid_argument(fmt::format("{}: token ids must be integers, got {}", where,
                                          boost::json::serialize(id)));
    }
    const int64_t value = id.is_int64() ? id.get_int64() : -1;
    if (value < 0 || value >= tokenizer.vocabulary_size()) {
      return invalid_argument(fmt::format("{}: token id {} is outside the vocabulary (0..{})",
                                          where, boost::json::serialize(id),
                                          tokenizer.vocabulary_size() - 1));
    }
    TACHYON_ASSIGN_OR_RETURN(std::string piece, detokenizer.push(static_cast<TokenId>(value)));
    text += piece;
  }
  text += detokenizer.finish();
  return text;
}

void run_detokenize(const DetokenizeOptions& options) {
  Result<std::unique_ptr<Tokenizer>> tokenizer = load_tokenizer(options.model);
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  if (options.jsonl.empty()) {
    boost::json::array ids;
    for (int64_t id : options.ids) ids.push_back(id);
    Result<std::string> text = detokenize(**tokenizer, ids, options.skip_special, "--ids");
    if (!text.ok()) return fail(text.status().message());
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  std::string out;
  Status status = for_each_json_line(
      options.jsonl, [&](size_t line_number, const boost::json::value& value) -> Status {
        const std::string where = fmt::format("{}:{}", options.jsonl, line_number);
        if (!value.is_array()) {
          return invalid_argument(where + ": expected a JSON array of token ids");
        }
        TACHYON_ASSIGN_OR_RETURN(
            std::string text, detokenize(**tokenizer, value.get_array(), options.skip_special, where));
        out += boost::json::serialize(boost::json::string(text));
        out += '\n';
        return Status();
      });
  if (!status.ok()) return fail(status.message());
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = app.add_subcommand("tokenize", "Turn text into token ids");
  add_model_option(*command, options->model);
  CLI::Option* prompt = command->add_option("-p,--prompt", options->prompt, "Text to tokenize");
  CLI::Option* jsonl = command->add_option(
      "--jsonl", options->jsonl, "File with one JSON string per line; prints one id array each");
  prompt->excludes(jsonl);
  command->add_flag("--no-special", options->no_special,
                    "Tokenize special-token text as plain text");
  command->add_flag("--add-special", options->add_special, "Add BOS/EOS as the model asks");
  command->add_flag("--pieces", options->show_pieces, "With -p: one line per token, with its text");
  command->callback([options, prompt, jsonl] {
    if (prompt->count() == 0 && jsonl->count() == 0) {
      return fail("tokenize needs -p TEXT or --jsonl FILE");
    }
    run_tokenize(*options);
  });
}

void add_detokenize_command(CLI::App& app) {
  auto options = std::make_shared<DetokenizeOptions>();
  CLI::App* command = app.add_subcommand("detokenize", "Turn token ids into text");
  add_model_option(*command, options->model);
  CLI::Option* ids = command->add_option("--ids", options->ids, "Token ids");
  CLI::Option* jsonl = command->add_option(
      "--jsonl", options->jsonl, "File with one JSON array of ids per line; prints JSON strings");
  ids->excludes(jsonl);
  command->add_flag("--skip-special", options->skip_special, "Leave control tokens out");
  command->callback([options, ids, jsonl] {
    if (ids->count() == 0 && jsonl->count() == 0) {
      return fail("detokenize needs --ids ID... or --jsonl FILE");
    }
    run_detokenize(*options);
  });
}

}  // namespace tachyon::cli
