#include "chat/conversation_fit.h"

#include <string_view>

#include <fmt/format.h>

namespace tachyon {
namespace {

std::string_view role_of(const boost::json::value& message) {
  const boost::json::object* object = message.if_object();
  const boost::json::value* role = object != nullptr ? object->if_contains("role") : nullptr;
  return role != nullptr && role->is_string() ? std::string_view(role->get_string())
                                              : std::string_view();
}

}  // namespace

Result<FittedConversation> fit_conversation(const boost::json::array& messages,
                                            int64_t max_prompt_tokens, RenderTokens render_tokens) {
  FittedConversation fitted;
  TACHYON_ASSIGN_OR_RETURN(fitted.prompt, render_tokens(messages));
  const int64_t full_tokens = static_cast<int64_t>(fitted.prompt.size());
  if (full_tokens <= max_prompt_tokens) return fitted;

  // cuts[k]: the first message kept after the system messages when k turns are dropped.
  const size_t count = messages.size();
  size_t lead = 0;
  while (lead < count && role_of(messages[lead]) == "system") ++lead;
  size_t last_user = count;
  for (size_t i = count; i > lead; --i) {
    if (role_of(messages[i - 1]) == "user") {
      last_user = i - 1;
      break;
    }
  }
  std::vector<size_t> cuts = {lead};
  for (size_t i = lead + 1; last_user < count && i <= last_user; ++i) {
    if (role_of(messages[i]) == "user") cuts.push_back(i);
  }
  auto kept_tokens = [&](size_t k) -> Result<std::vector<int32_t>> {
    boost::json::array kept;
    for (size_t i = 0; i < lead; ++i) kept.push_back(messages[i]);
    for (size_t i = cuts[k]; i < count; ++i) kept.push_back(messages[i]);
    return render_tokens(kept);
  };
  auto too_long = [&](int64_t tokens) {
    return out_of_range(fmt::format(
        "the system messages and the last user turn alone take {} tokens; at most {} fit", tokens,
        max_prompt_tokens));
  };
  const size_t most = cuts.size() - 1;
  if (most == 0) return too_long(full_tokens);
  TACHYON_ASSIGN_OR_RETURN(std::vector<int32_t> shortest, kept_tokens(most));
  if (static_cast<int64_t>(shortest.size()) > max_prompt_tokens) {
    return too_long(static_cast<int64_t>(shortest.size()));
  }
  // The fewest turns to drop: fewer turns, more tokens (binary search). `shortest` always holds
  // the tokens of dropping `high` turns.
  size_t low = 1;
  size_t high = most;
  while (low < high) {
    const size_t middle = low + (high - low) / 2;
    TACHYON_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, kept_tokens(middle));
    if (static_cast<int64_t>(tokens.size()) <= max_prompt_tokens) {
      high = middle;
      shortest = std::move(tokens);
    } else {
      low = middle + 1;
    }
  }
  fitted.dropped_messages = static_cast<int>(cuts[high] - lead);
  fitted.dropped_tokens = full_tokens - static_cast<int64_t>(shortest.size());
  fitted.prompt = std::move(shortest);
  return fitted;
}

}  // namespace tachyon
