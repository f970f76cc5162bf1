#pragma once
// kvchat-cli's conversation commands: chat, conversations, prefix, chat-bench.
#include "app/cli_options.h"

#include <atomic>

namespace kvchat::cli {

// Ctrl-C from now on sets the returned flag instead of killing the process: the engine sees it
// between layers of a prefill and between decode steps, and the command ends cleanly.
const std::atomic<bool>& stop_on_interrupt();
// Exit status of a command stopped by Ctrl-C (the shell's 128 + SIGINT).
constexpr int kInterruptedExit = 130;

int cmd_chat(const Options& o);
int cmd_conversations(const Options& o);
int cmd_prefix(const Options& o);
int cmd_chat_bench(const Options& o);

}  // namespace kvchat::cli
