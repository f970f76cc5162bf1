#pragma once
// The model's batch prefill speed on this machine: what a turn prices the tokens it reused at
// ("prefill saved ~N ms"). A prefill of a few tokens costs nearly what a batch costs (every
// weight is read once either way), so only a batch of at least kBatchTokens is a measurement.
// Measured once per model and machine (a short prefill into a scratch cache, or the first large
// prefill of a turn, whichever comes first; a larger prefill later replaces it) and kept in the
// database's settings table under prefill_speed_key(), so later sessions start with it.
#include <cstdint>
#include <optional>
#include <string>

namespace kvchat {

class Backend;
class Model;
class Store;

struct PrefillSpeed {
    static constexpr int64_t kBatchTokens = 64;
    int64_t tokens = 0;  // the prefill measured
    double ms = 0.0;     // its time
    double ms_per_token() const { return ms / static_cast<double>(tokens); }
    // A measurement worth keeping: a batch, with a finite positive time.
    bool usable() const;
};

// "prefill_speed|<model fingerprint>|<backend name>|<CPU brand, family, model, stepping, kvchat version>".
std::string prefill_speed_key(const Model& model, const Backend& backend);
// The kept speed under `key`; nullopt when none is kept or the value does not parse.
std::optional<PrefillSpeed> load_prefill_speed(const Store& store, const std::string& key);
void save_prefill_speed(Store& store, const std::string& key, const PrefillSpeed& speed);
// Times a prefill of 128 tokens (fewer when the model's context is smaller) into a scratch
// dynamic cache, after a short warm-up prefill that pages the weights in.
PrefillSpeed measure_prefill_speed(const Model& model, Backend& backend);

}  // namespace kvchat
