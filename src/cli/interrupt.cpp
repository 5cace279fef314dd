#include "cli/interrupt.h"

#include <signal.h>

namespace tachyon::cli {
namespace {

std::atomic<bool> interrupted_flag{false};
struct sigaction previous_action;

void on_interrupt(int) { interrupted_flag.store(true); }

}  // namespace

InterruptGuard::InterruptGuard() {
  interrupted_flag.store(false);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking read returns so the prompt can react
  sigaction(SIGINT, &action, &previous_action);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &previous_action, nullptr); }

const std::atomic<bool>& InterruptGuard::flag() const { return interrupted_flag; }

void InterruptGuard::clear() { interrupted_flag.store(false); }

}  // namespace tachyon::cli
