#pragma once
// Loading a model with progress and cancel, for the window: the file is mapped and checked
// (Model::load), then every tensor's bytes are read in, so the first answer does not wait on
// the disk and a slow disk shows as progress. Cancelled between pieces of at most a few MiB.
#include "engine/common/progress.h"
#include "engine/model/model.h"

#include <memory>
#include <string>

namespace kvchat {

// Reports "Loading model" in bytes read of all tensors. Throws kvchat::Error as Model::load does,
// kvchat::Cancelled when progress.cancel is set (nothing is kept).
std::unique_ptr<Model> load_model(const std::string& path, const Progress& progress);

}  // namespace kvchat
