#pragma once
// Paths the suites share: committed golden data and the built terminal tool.
#include <string>

namespace kvchat::test {
inline std::string data_path(const std::string& name) { return std::string(KVCHAT_TEST_DATA_DIR) + "/" + name; }
inline const char* cli_path() { return KVCHAT_CLI_PATH; }
}  // namespace kvchat::test
