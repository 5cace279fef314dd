#include "client/batch_job.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace tachyon::client {
namespace {

namespace json = boost::json;

}  // namespace

BatchLine parse_batch_line(const std::string& line, size_t number, const std::string& model) {
  BatchLine out;
  out.custom_id = fmt::format("line-{}", number);
  boost::system::error_code error;
  json::value value = json::parse(line, error);
  if (error || !value.is_object()) {
    out.error = fmt::format("line {} is not a JSON object", number);
    return out;
  }
  json::object& fields = value.get_object();
  json::object body;
  if (const json::value* inner = fields.if_contains("body")) {  // an OpenAI batch line
    if (const json::value* id = fields.if_contains("custom_id"); id && id->is_string()) {
      out.custom_id = std::string(id->get_string());
    }
    if (const json::value* url = fields.if_contains("url"); url && url->is_string()) {
      out.url = std::string(url->get_string());
    }
    if (!inner->is_object()) {
      out.error = fmt::format("line {}: \"body\" must be an object", number);
      return out;
    }
    body = inner->get_object();
  } else {
    body = fields;
  }
  if (out.url.empty()) out.url = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
  if (out.url != "/v1/chat/completions" && out.url != "/v1/completions") {
    out.error = fmt::format("line {}: url {} is not /v1/chat/completions or /v1/completions",
                            number, out.url);
    return out;
  }
  if (!body.contains("model") && !model.empty()) body["model"] = model;
  body["stream"] = false;  // one JSON answer per line
  out.body = json::serialize(body);
  return out;
}

Result<BatchJob> BatchJob::load(BatchOptions options) {
  BatchJob job(std::move(options));
  std::ifstream input(job.options_.input_path);
  if (!input) return not_found(fmt::format("cannot read {}", job.options_.input_path));
  std::vector<Item> items;
  std::string line;
  size_t number = 0;
  std::set<std::string> seen;
  while (std::getline(input, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    BatchLine parsed = parse_batch_line(line, number, job.options_.model);
    if (!seen.insert(parsed.custom_id).second) {
      return invalid_argument(fmt::format("{} line {}: custom_id '{}' is used twice",
                                          job.options_.input_path, number, parsed.custom_id));
    }
    items.push_back({parsed.custom_id, parsed.url, parsed.body, parsed.error});
  }

  // What an earlier run finished: the output's complete lines, except results of requests that
  // never reached the server (connection_error), which are tried again. A partial last line
  // (a run killed while writing it) and those are cut out of the file before this run appends.
  std::set<std::string> done;
  if (std::filesystem::exists(job.options_.output_path)) {
    std::ifstream previous(job.options_.output_path, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(previous)), {});
    previous.close();
    std::string kept;
    size_t start = 0;
    while (start < content.size()) {
      const size_t end = content.find('\n', start);
      if (end == std::string::npos) break;  // partial
      const std::string_view text = std::string_view(content).substr(start, end - start);
      start = end + 1;
      boost::system::error_code error;
      json::value result = json::parse(text, error);
      const json::object* fields = !error && result.is_object() ? &result.get_object() : nullptr;
      const json::value* id = fields ? fields->if_contains("custom_id") : nullptr;
      const json::value* failure = fields ? fields->if_contains("error") : nullptr;
      const bool unsent = failure && failure->is_object() && failure->get_object().contains("code") &&
                          failure->get_object().at("code") == "connection_error";
      if (unsent) continue;
      if (id && id->is_string()) done.insert(std::string(id->get_string()));
      kept.append(text).push_back('\n');
    }
    if (kept.size() != content.size()) {
      std::ofstream rewrite(job.options_.output_path, std::ios::binary | std::ios::trunc);
      rewrite << kept;
      if (!rewrite) return io_error(fmt::format("cannot rewrite {}", job.options_.output_path));
    }
  }
  for (Item& item : items) {
    ++job.progress_.total;
    if (done.count(item.custom_id)) {
      ++job.progress_.skipped;
    } else {
      job.items_.push_back(std::move(item));
    }
  }
  return job;
}

Status BatchJob::run(const ClientOptions& client,
                     const std::function<void(const BatchProgress&)>& progress) {
  std::ofstream output(options_.output_path, std::ios::app | std::ios::binary);
  if (!output) return io_error(fmt::format("cannot write {}", options_.output_path));
  std::mutex mutex;
  std::atomic<size_t> next{0};
  Status failure;
  auto write = [&](const Item& item, json::object result, bool ok) {
    std::lock_guard lock(mutex);
    result["custom_id"] = item.custom_id;
    output << json::serialize(result) << '\n';
    output.flush();
    (ok ? progress_.succeeded : progress_.failed) += 1;
    if (progress) progress(progress_);
  };
  auto worker = [&] {
    Result<std::unique_ptr<ApiClient>> api = ApiClient::create(client);
    if (!api.ok()) {
      std::lock_guard lock(mutex);
      failure = api.status();
      return;
    }
    for (size_t i = next++; i < items_.size(); i = next++) {
      const Item& item = items_[i];
      json::object result{{"id", fmt::format("batch_req_{}", i)}, {"response", nullptr}, {"error", nullptr}};
      if (!item.input_error.empty()) {
        result["error"] = json::object{{"code", "invalid_request"}, {"message", item.input_error}};
        write(item, std::move(result), false);
        continue;
      }
      Result<ApiResponse> response = (*api)->send(item.url, item.body);
      if (!response.ok()) {
        result["error"] = json::object{{"code", "connection_error"},
                                       {"message", response.status().message()}};
        write(item, std::move(result), false);
        continue;
      }
      boost::system::error_code error;
      json::value body = json::parse(response->body, error);
      if (error) body = json::string(response->body);
      result["response"] = json::object{{"status_code", response->status},
                                        {"request_id", response->header("x-request-id")},
                                        {"body", std::move(body)}};
      const bool ok = response->status == 200;
      if (!ok) {
        result["error"] = json::object{{"code", error_code(*response)},
                                       {"message", describe_error(*response)}};
      }
      write(item, std::move(result), ok);
    }
  };
  std::vector<std::thread> threads;
  const int count = std::max(1, std::min<int>(options_.concurrency, static_cast<int>(items_.size())));
  for (int i = 0; i < count; ++i) threads.emplace_back(worker);
  for (std::thread& thread : threads) thread.join();
  return failure;
}

}  // namespace tachyon::client
