#pragma once
// kvchat-cli's conversation commands: chat, branch, conversations, prefix, chat-bench, serve.
#include "app/cli_options.h"

#include <atomic>
#include <string_view>

namespace kvchat::cli {

// Ctrl-C, SIGTERM and SIGHUP (closing the terminal, systemd, `timeout`) from now on set the
// returned flag instead of killing the process: the engine sees it between layers of a prefill
// and between decode steps, and the command ends cleanly, keeping what was answered.
const std::atomic<bool>& stop_on_interrupt();
// The signal that stopped the command (SIGINT, SIGTERM, SIGHUP), or 0.
int stop_signal();
// Exit status of a command stopped by a signal: the shell's 128 + its number (130 for Ctrl-C).
int stopped_exit_status();
// Exit status of a command stopped by Ctrl-C (the shell's 128 + SIGINT).
constexpr int kInterruptedExit = 130;

// Writes a piece of an answer to standard output at once. When that fails (a closed pipe, a full
// disk: SIGPIPE is ignored, so the failure comes back as EPIPE) the answer is stopped as by Ctrl-C
// and output_error() says why.
void write_answer_piece(std::string_view piece);
// errno of the first failed write of an answer, or 0.
int output_error();

// --db, or the default database.
std::string db_path(const Options& o);
// The same for a command that only reads or changes what is saved: refused when it does not exist.
std::string existing_db_path(const Options& o);

int cmd_chat(const Options& o);
// cli_versions.cpp: the versions of a conversation's answers, and choosing the one shown.
int cmd_versions(const Options& o);
int cmd_branch(const Options& o);
int cmd_conversations(const Options& o);
int cmd_prefix(const Options& o);
int cmd_chat_bench(const Options& o);
// The local OpenAI-compatible API server (cli_serve.cpp).
int cmd_serve(const Options& o);

}  // namespace kvchat::cli
