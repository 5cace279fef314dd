#include "gateway/redis_limits.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tachyon::gateway {
namespace {

// Bucket levels decay towards full at capacity / 60 per second, as TokenBucket's do. Every
// script reads the time from Redis, so replicas' clocks do not matter.
constexpr const char* kBucketLevel = R"lua(
local function level(key, capacity, now)
  local state = redis.call('HMGET', key, 'level', 'time')
  if not state[1] then return capacity end
  local value = tonumber(state[1]) + (now - tonumber(state[2])) * capacity / 60
  if value > capacity then value = capacity end
  return value
end
local function store(key, capacity, value, now)
  redis.call('HSET', key, 'level', string.format('%.17g', value), 'time', string.format('%.17g', now))
  -- Gone once full again (a debt takes longer to repay).
  redis.call('EXPIRE', key, math.ceil(60 * (capacity - value) / capacity) + 2)
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6
)lua";

// KEYS: rpm bucket, tpm bucket, in flight, day tokens, month tokens.
// ARGV: rpm, tpm, concurrency, charge, daily quota, monthly quota, in-flight ttl.
// Returns {kind, used, wait in ms}.
constexpr const char* kAdmitScript = R"lua(
local rpm, tpm, concurrency = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local charge, daily, monthly = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if daily > 0 then
  local spent = redis.call('GET', KEYS[4])
  if not spent then return {'seed', 0, 0} end
  if tonumber(spent) >= daily then return {'daily', tonumber(spent), 0} end
end
if monthly > 0 then
  local spent = redis.call('GET', KEYS[5])
  if not spent then return {'seed', 0, 0} end
  if tonumber(spent) >= monthly then return {'monthly', tonumber(spent), 0} end
end
local in_flight = tonumber(redis.call('GET', KEYS[3]) or '0')
if concurrency > 0 and in_flight >= concurrency then return {'concurrency', in_flight, 1000} end
local requests, tokens = 0, 0
if rpm > 0 then
  requests = level(KEYS[1], rpm, now)
  if requests < 1 then
    return {'requests', math.ceil(rpm - requests - 1e-6), math.ceil((1 - requests) * 60000 / rpm)}
  end
end
if tpm > 0 then
  tokens = level(KEYS[2], tpm, now)
  if tokens < charge then
    return {'tokens', math.ceil(tpm - tokens - 1e-6), math.ceil((charge - tokens) * 60000 / tpm)}
  end
end
if rpm > 0 then store(KEYS[1], rpm, requests - 1, now) end
if tpm > 0 then store(KEYS[2], tpm, tokens - charge, now) end
redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[7]))
return {'ok', 0, 0}
)lua";

// KEYS: tpm bucket, in flight, day tokens, month tokens. ARGV: tpm, charged, used, counted.
constexpr const char* kFinishScript = R"lua(
if tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then redis.call('DECR', KEYS[2]) end
local tpm, charged, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if tpm > 0 and charged ~= used then
  local value = level(KEYS[1], tpm, now) + charged - used
  if value > tpm then value = tpm end
  store(KEYS[1], tpm, value, now)
end
if ARGV[4] == '1' and used > 0 then
  -- Counters not seeded yet will be read from the ledger, which holds this request already.
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('INCRBY', KEYS[3], used) end
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('INCRBY', KEYS[4], used) end
end
return {'ok'}
)lua";

// KEYS: rpm bucket, tpm bucket. ARGV: rpm, tpm. Returns the levels in thousandths.
constexpr const char* kLevelsScript = R"lua(
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local requests, tokens = 0, 0
if rpm > 0 then requests = level(KEYS[1], rpm, now) end
if tpm > 0 then tokens = level(KEYS[2], tpm, now) end
return {tostring(math.floor(requests * 1000)), tostring(math.floor(tokens * 1000))}
)lua";

// KEYS: day tokens, month tokens. ARGV: day value, day ttl, month value, month ttl.
constexpr const char* kSeedScript = R"lua(
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'NX', 'EX', ARGV[4])
return {'ok'}
)lua";

constexpr int kAdmit = 0, kFinish = 1, kLevels = 2, kSeed = 3;

// One command, its arguments binary-safe; null when the connection failed.
redisReply* command_argv(redisContext* context, const std::vector<std::string>& argv) {
  std::vector<const char*> pointers;
  std::vector<size_t> lengths;
  for (const std::string& arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  return static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(argv.size()), pointers.data(), lengths.data()));
}

std::string script_text(int index) {
  switch (index) {
    case kAdmit:
      return std::string(kBucketLevel) + kAdmitScript;
    case kFinish:
      return std::string(kBucketLevel) + kFinishScript;
    case kLevels:
      return std::string(kBucketLevel) + kLevelsScript;
    default:
      return kSeedScript;
  }
}

// Keys of one API key share a hash tag, so a Redis Cluster keeps them on one node.
std::string key_name(int64_t key_id, std::string_view what) {
  return fmt::format("tachyon:{{k{}}}:{}", key_id, what);
}

constexpr int64_t kDayTtlSeconds = 2 * 86'400;
constexpr int64_t kMonthTtlSeconds = 32 * 86'400;
constexpr std::chrono::milliseconds kReconnectPause{250};

}  // namespace

Result<RedisAddress> parse_redis_url(std::string_view url) {
  RedisAddress address;
  std::string_view rest = url;
  if (!rest.starts_with("redis://")) {
    return invalid_argument(fmt::format("--redis {}: expected redis://[:password@]host[:port][/db]",
                                        url));
  }
  rest.remove_prefix(8);
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view credentials = rest.substr(0, at);
    const size_t colon = credentials.find(':');
    address.password = std::string(colon == std::string_view::npos ? credentials
                                                                   : credentials.substr(colon + 1));
    rest.remove_prefix(at + 1);
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto [end, error] = std::from_chars(db.data(), db.data() + db.size(), address.database);
      if (error != std::errc() || end != db.data() + db.size() || address.database < 0) {
        return invalid_argument(fmt::format("--redis {}: the database must be a number", url));
      }
    }
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    std::string_view port = rest.substr(colon + 1);
    auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), address.port);
    if (error != std::errc() || end != port.data() + port.size() || address.port < 1 ||
        address.port > 65535) {
      return invalid_argument(fmt::format("--redis {}: bad port", url));
    }
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) address.host = std::string(rest);
  return address;
}

RedisLimits::RedisLimits(RedisAddress address, std::string url, bool fail_open,
                         std::chrono::milliseconds timeout)
    : address_(std::move(address)), url_(std::move(url)), fail_open_(fail_open), timeout_(timeout) {}

RedisLimits::~RedisLimits() {
  if (context_ != nullptr) redisFree(context_);
}

Result<std::unique_ptr<RedisLimits>> RedisLimits::connect(const std::string& url, bool fail_open,
                                                          std::chrono::milliseconds timeout) {
  TACHYON_ASSIGN_OR_RETURN(RedisAddress address, parse_redis_url(url));
  std::unique_ptr<RedisLimits> limits(new RedisLimits(std::move(address), url, fail_open, timeout));
  std::lock_guard lock(limits->mutex_);
  // At start a missing Redis is a configuration error, not an outage: say so at once.
  TACHYON_RETURN_IF_ERROR(limits->ensure_connected());
  return limits;
}

void RedisLimits::drop_connection(const std::string& why) {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  next_attempt_ = std::chrono::steady_clock::now() + kReconnectPause;
  if (!reported_down_) {
    reported_down_ = true;
    spdlog::error("Redis at {} unreachable ({}): {}", url_, why,
                  fail_open_ ? "limits are this process's own until it is back (--redis-fail-open)"
                             : "requests with API keys get 503 until it is back");
  }
}

Status RedisLimits::ensure_connected() {
  if (context_ != nullptr) return Status();
  if (std::chrono::steady_clock::now() < next_attempt_) {
    return unavailable(fmt::format("Redis at {} is unreachable", url_));
  }
  timeval timeout{};
  timeout.tv_sec = timeout_.count() / 1000;
  timeout.tv_usec = (timeout_.count() % 1000) * 1000;
  context_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, timeout);
  if (context_ == nullptr || context_->err) {
    const std::string why = context_ ? context_->errstr : "out of memory";
    drop_connection(why);
    return unavailable(fmt::format("Redis at {} is unreachable: {}", url_, why));
  }
  redisSetTimeout(context_, timeout);
  auto command = [&](const std::vector<std::string>& argv) -> Result<std::string> {
    redisReply* reply = command_argv(context_, argv);
    if (reply == nullptr) return unavailable(context_->errstr);
    std::string text(reply->str != nullptr ? reply->str : "", reply->len);
    const bool error = reply->type == REDIS_REPLY_ERROR;
    freeReplyObject(reply);
    if (error) return invalid_argument(text);
    return text;
  };
  Status status;
  if (!address_.password.empty()) {
    if (Result<std::string> auth = command({"AUTH", address_.password}); !auth.ok()) {
      status = auth.status();
    }
  }
  if (status.ok() && address_.database != 0) {
    if (Result<std::string> select = command({"SELECT", std::to_string(address_.database)});
        !select.ok()) {
      status = select.status();
    }
  }
  for (int i = 0; status.ok() && i < 4; ++i) {
    Result<std::string> sha = command({"SCRIPT", "LOAD", script_text(i)});
    if (sha.ok()) {
      script_sha_[i] = *sha;
    } else {
      status = sha.status();
    }
  }
  if (!status.ok()) {
    drop_connection(status.message());
    return unavailable(fmt::format("Redis at {}: {}", url_, status.message()));
  }
  if (reported_down_) {
    reported_down_ = false;
    spdlog::info("Redis at {} is reachable again: limits are shared again", url_);
  }
  return Status();
}

Result<std::vector<std::string>> RedisLimits::run_script(int index,
                                                         const std::vector<std::string>& keys,
                                                         const std::vector<std::string>& args) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    TACHYON_RETURN_IF_ERROR(ensure_connected());
    std::vector<std::string> argv = {"EVALSHA", script_sha_[index], std::to_string(keys.size())};
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    redisReply* reply = command_argv(context_, argv);
    if (reply == nullptr) {
      const std::string why = context_->errstr;
      drop_connection(why);
      if (attempt == 0) {
        next_attempt_ = {};  // one immediate reconnect: the server may have restarted
        continue;
      }
      return unavailable(fmt::format("Redis at {}: {}", url_, why));
    }
    std::vector<std::string> values;
    std::string error;
    if (reply->type == REDIS_REPLY_ERROR) {
      error.assign(reply->str, reply->len);
    } else if (reply->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < reply->elements; ++i) {
        const redisReply* element = reply->element[i];
        if (element->type == REDIS_REPLY_INTEGER) {
          values.push_back(std::to_string(element->integer));
        } else {
          values.emplace_back(element->str != nullptr ? element->str : "", element->len);
        }
      }
    }
    freeReplyObject(reply);
    if (error.empty()) return values;
    if (error.starts_with("NOSCRIPT") && attempt == 0) {  // SCRIPT FLUSH: load them again
      drop_connection(error);
      next_attempt_ = {};
      continue;
    }
    return io_error(fmt::format("Redis at {}: {}", url_, error));
  }
  return unavailable(fmt::format("Redis at {} is unreachable", url_));
}

Result<SharedDecision> RedisLimits::admit(const SharedLimitsCheck& check) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      std::vector<std::string> reply,
      run_script(kAdmit,
                 {key_name(check.key_id, "rpm"), key_name(check.key_id, "tpm"),
                  key_name(check.key_id, "in_flight"),
                  key_name(check.key_id, fmt::format("day:{}", check.day)),
                  key_name(check.key_id, fmt::format("month:{}", check.month))},
                 {std::to_string(check.requests_per_minute), std::to_string(check.tokens_per_minute),
                  std::to_string(check.max_concurrent), std::to_string(check.charge),
                  std::to_string(check.daily_tokens), std::to_string(check.monthly_tokens),
                  std::to_string(check.in_flight_ttl_seconds)}));
  if (reply.size() != 3) return io_error("Redis: unexpected reply to the admission script");
  SharedDecision decision;
  const std::string& kind = reply[0];
  if (kind == "seed") return not_found("quota counters not in Redis yet");
  if (kind == "daily") decision.kind = SharedDecision::Kind::kDailyQuota;
  if (kind == "monthly") decision.kind = SharedDecision::Kind::kMonthlyQuota;
  if (kind == "concurrency") decision.kind = SharedDecision::Kind::kConcurrency;
  if (kind == "requests") decision.kind = SharedDecision::Kind::kRequests;
  if (kind == "tokens") decision.kind = SharedDecision::Kind::kTokens;
  decision.used = std::stoll(reply[1]);
  decision.wait_seconds = static_cast<double>(std::stoll(reply[2])) / 1000.0;
  return decision;
}

Status RedisLimits::seed_quota(int64_t key_id, int64_t day, int64_t month, int64_t day_tokens,
                               int64_t month_tokens) {
  std::lock_guard lock(mutex_);
  Result<std::vector<std::string>> reply =
      run_script(kSeed,
                 {key_name(key_id, fmt::format("day:{}", day)),
                  key_name(key_id, fmt::format("month:{}", month))},
                 {std::to_string(day_tokens), std::to_string(kDayTtlSeconds),
                  std::to_string(month_tokens), std::to_string(kMonthTtlSeconds)});
  return reply.ok() ? Status() : reply.status();
}

Status RedisLimits::finish(int64_t key_id, int64_t tokens_per_minute, int64_t charged, int64_t used,
                           bool counted, int64_t day, int64_t month) {
  std::lock_guard lock(mutex_);
  Result<std::vector<std::string>> reply =
      run_script(kFinish,
                 {key_name(key_id, "tpm"), key_name(key_id, "in_flight"),
                  key_name(key_id, fmt::format("day:{}", day)),
                  key_name(key_id, fmt::format("month:{}", month))},
                 {std::to_string(tokens_per_minute), std::to_string(charged), std::to_string(used),
                  counted ? "1" : "0"});
  return reply.ok() ? Status() : reply.status();
}

Result<RedisLimits::Levels> RedisLimits::levels(int64_t key_id, int64_t requests_per_minute,
                                                int64_t tokens_per_minute) {
  std::lock_guard lock(mutex_);
  TACHYON_ASSIGN_OR_RETURN(
      std::vector<std::string> reply,
      run_script(kLevels, {key_name(key_id, "rpm"), key_name(key_id, "tpm")},
                 {std::to_string(requests_per_minute), std::to_string(tokens_per_minute)}));
  if (reply.size() != 2) return io_error("Redis: unexpected reply to the levels script");
  return Levels{std::stod(reply[0]) / 1000.0, std::stod(reply[1]) / 1000.0};
}

}  // namespace tachyon::gateway
