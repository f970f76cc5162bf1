#include "engine/chat/prefill_speed.h"

#include "engine/chat/conversation_cache.h"
#include "engine/compute/backend.h"
#include "engine/compute/simd_choices.h"
#include "engine/model/model.h"
#include "engine/store/store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

namespace kvchat {

bool PrefillSpeed::usable() const { return tokens >= kBatchTokens && ms > 0.0 && std::isfinite(ms); }

std::string prefill_speed_key(const Model& model, const Backend& backend) {
    // (cpu_model_key's level field names the backend here: the speed is the backend's on this CPU.)
    return "prefill_speed|" + model.fingerprint() + "|" + cpu_model_key(backend.name().c_str());
}

std::optional<PrefillSpeed> load_prefill_speed(const Store& store, const std::string& key) {
    const auto text = store.setting(key);
    if (!text) return std::nullopt;
    long long tokens = 0;
    double ms = 0.0;
    char rest = 0;
    if (std::sscanf(text->c_str(), "%lld %lf %c", &tokens, &ms, &rest) != 2) return std::nullopt;
    const PrefillSpeed s{tokens, ms};
    if (!s.usable()) return std::nullopt;
    return s;
}

void save_prefill_speed(Store& store, const std::string& key, const PrefillSpeed& speed) {
    char text[64];
    std::snprintf(text, sizeof text, "%lld %.6f", static_cast<long long>(speed.tokens), speed.ms);
    store.set_setting(key, text);
}

PrefillSpeed measure_prefill_speed(const Model& model, Backend& backend) {
    constexpr int64_t kTokens = 128, kWarmUp = 16;
    const int64_t n = std::max<int64_t>(1, std::min<int64_t>(kTokens, model.config().n_ctx_train - 1));
    const int64_t vocab = std::max<int64_t>(1, model.config().n_vocab);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    // Ordinary ids spread over the vocabulary (their values do not change the work, only the count).
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((1 + i * 7919) % vocab);
    {
        auto warm = make_conversation_cache(model, backend, "dynamic");
        prefill_in_chunks(model, backend, *warm, ids.data(), std::min(n, kWarmUp), {}, "Measuring prefill speed");
    }
    auto cache = make_conversation_cache(model, backend, "dynamic");
    const auto t0 = std::chrono::steady_clock::now();
    prefill_in_chunks(model, backend, *cache, ids.data(), n, {}, "Measuring prefill speed");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {n, ms};
}

}  // namespace kvchat
