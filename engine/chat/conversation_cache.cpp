#include "engine/chat/conversation_cache.h"

#include "engine/error.h"

namespace kvchat {

std::string default_cache_spec() { return "dynamic"; }

std::unique_ptr<Cache> make_conversation_cache(const Model& model, Backend& backend, const std::string& spec) {
    if (spec != "dynamic" && !spec.empty())
        throw Error("cache strategy '" + spec + "' is not available in this build (dynamic only)");
    return model.make_default_cache(backend);
}

std::string cache_spec_of(const Cache&, const std::string& spec_it_was_made_with) {
    return spec_it_was_made_with.empty() ? default_cache_spec() : spec_it_was_made_with;
}

bool cache_can_crop_to(const Cache&, int64_t) { return true; }

void checkpoint_cache(Cache&) {}

int64_t restore_cache_checkpoint(Cache&, int64_t) { return -1; }

int64_t cache_capacity(const Cache&) { return 0; }

void save_cache_snapshot(const Cache&, const Model&, const std::string& path) {
    throw Error("cannot write cache snapshot '" + path + "': snapshots are not available in this build");
}

std::unique_ptr<Cache> load_cache_snapshot(const std::string& path, const Model&, Backend&) {
    throw Error("cannot read cache snapshot '" + path + "': snapshots are not available in this build");
}

std::unique_ptr<Cache> convert_cache(const Cache&, const Model&, Backend&, const std::string& spec) {
    throw Error("cannot convert the cache to '" + spec + "': conversion is not available in this build");
}

}  // namespace kvchat
