#pragma once
// kvchat-cli storage: what the saved caches take on disk, and the budget that bounds them.
#include "app/cli_options.h"

namespace kvchat::cli {

int cmd_storage(const Options& o);

}  // namespace kvchat::cli
