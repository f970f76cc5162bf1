#pragma once
// Paths the suites share: committed golden data and the built terminal tool.
#include <csignal>
#include <string>

#include <sys/types.h>

namespace kvchat::test {
inline std::string data_path(const std::string& name) { return std::string(KVCHAT_TEST_DATA_DIR) + "/" + name; }
inline const char* cli_path() { return KVCHAT_CLI_PATH; }

// Sends sig to one child. A process that already ended has pid 0 in QProcess, and kill(0, sig)
// would signal the whole process group -- ctest and the CI script with it -- so only a real pid
// is signalled. Returns whether the signal was sent.
inline bool signal_child(long long pid, int sig) { return pid > 0 && ::kill(static_cast<pid_t>(pid), sig) == 0; }
}  // namespace kvchat::test
