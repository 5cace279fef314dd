#include "server/hangup_watch.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace tachyon::server {
namespace {

// Past this many buffered bytes of a next request, stop reading (the client is pipelining a
// lot; it will notice our answer's end anyway).
constexpr size_t kMaxBufferedBytes = 1 << 20;
constexpr size_t kReadChunkBytes = 4096;

}  // namespace

struct HangupWatch::State {
  explicit State(const asio::any_io_executor& executor) : stopped_waiter(executor) {}
  std::function<void()> on_hangup;
  bool pending = false;  // a read is outstanding
  bool stopping = false;
  bool gone = false;
  asio::steady_timer stopped_waiter;  // stop() sleeps on it until the read's handler ran
};

HangupWatch::HangupWatch(Connection& connection, std::function<void()> on_hangup)
    : connection_(connection),
      state_(std::make_shared<State>(connection.stream().get_executor())) {
  state_->on_hangup = std::move(on_hangup);
}

HangupWatch::~HangupWatch() {
  // Only if stop() was skipped (an exception): the handler sees `stopping` and does nothing.
  state_->stopping = true;
  state_->on_hangup = nullptr;
}

bool HangupWatch::client_gone() const { return state_->gone; }

void HangupWatch::start() {
  state_->stopping = false;
  read_more();
}

void HangupWatch::read_more() {
  State& state = *state_;
  if (state.pending || state.stopping || state.gone) return;
  beast::flat_buffer& buffer = connection_.buffer();
  if (buffer.size() >= kMaxBufferedBytes) return;
  state.pending = true;
  connection_.stream().async_read_some(
      buffer.prepare(kReadChunkBytes),
      // `this` is used only while not stopping (the destructor sets stopping first).
      [this, state = state_, connection = connection_.shared_from_this()](
          beast::error_code error, size_t bytes) {
        state->pending = false;
        if (!error) connection->buffer().commit(bytes);
        if (state->stopping) {
          state->stopped_waiter.cancel();
          return;
        }
        if (!error) {
          read_more();
        } else if (error != asio::error::operation_aborted) {
          state->gone = true;  // EOF or reset: nobody will read the answer
          if (state->on_hangup) state->on_hangup();
        }
      });
}

asio::awaitable<void> HangupWatch::stop() {
  std::shared_ptr<State> state = state_;
  state->stopping = true;
  if (!state->pending) co_return;
  beast::error_code ignored;
  connection_.stream().socket().cancel(ignored);
  while (state->pending) {
    state->stopped_waiter.expires_after(std::chrono::seconds(1));
    auto [error] = co_await state->stopped_waiter.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)error;
  }
}

}  // namespace tachyon::server
