#pragma once
// kvchat-cli's conversation commands: chat, conversations, prefix, chat-bench.
#include "app/cli_options.h"

namespace kvchat::cli {

int cmd_chat(const Options& o);
int cmd_conversations(const Options& o);
int cmd_prefix(const Options& o);
int cmd_chat_bench(const Options& o);

}  // namespace kvchat::cli
