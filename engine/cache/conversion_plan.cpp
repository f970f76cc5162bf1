#include "engine/cache/conversion_plan.h"

#include "engine/cache/cache_factory.h"
#include "engine/cache/cache_spec.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace kvchat {

std::string_view conversion_kind_name(ConversionPlan::Kind kind) {
    switch (kind) {
        case ConversionPlan::Kind::Unchanged: return "unchanged";
        case ConversionPlan::Kind::Lossless: return "lossless";
        case ConversionPlan::Kind::Lossy: return "lossy";
        case ConversionPlan::Kind::Rebuild: return "rebuild";
    }
    return "unknown";
}

std::pair<int64_t, int64_t> messages_spanning(const std::vector<int64_t>& starts, int64_t first, int64_t last) {
    if (starts.empty() || first < 0 || last < first) return {-1, -1};
    // The last message starting at or before a position holds it.
    auto holder = [&](int64_t pos) {
        const auto it = std::upper_bound(starts.begin(), starts.end(), pos);
        return it == starts.begin() ? int64_t{0} : static_cast<int64_t>(it - starts.begin()) - 1;
    };
    return {holder(first), holder(last)};
}

std::string_view layer_conversion_mode_name(LayerConversion::Mode mode) {
    switch (mode) {
        case LayerConversion::Mode::Verbatim: return "verbatim";
        case LayerConversion::Mode::Imported: return "imported";
        case LayerConversion::Mode::Rebuilt: return "rebuilt";
    }
    return "unknown";
}

namespace {

int64_t held_bytes(const LayerTelemetry& t) { return t.bytes_fast + t.bytes_slow; }

// [first, last] grown to hold `pos` (-1: empty).
void widen(int64_t& first, int64_t& last, int64_t pos) {
    first = first < 0 ? pos : std::min(first, pos);
    last = std::max(last, pos);
}

// Walks the positions a layer holds before and after (both sorted) and counts what changed.


void count_changes(const TokenRows& before, const TokenRows& after, LayerConversion& lc) {
    const bool coarser = after.nbits > 0 && before.nbits > 0 && (after.nbits < before.nbits || after.group > before.group);
    size_t i = 0, j = 0;
    while (i < before.pos.size() || j < after.pos.size()) {
        if (j >= after.pos.size() || (i < before.pos.size() && before.pos[i] < after.pos[j])) {
            ++lc.tokens_evicted;
            widen(lc.evicted_first, lc.evicted_last, before.pos[i]);
            ++i;
        } else if (i >= before.pos.size() || after.pos[j] < before.pos[i]) {
            ++lc.tokens_restored;
            ++j;
        } else {
            if (!after.exact[j]) {
                if (before.exact[i]) {
                    ++lc.tokens_quantized;
                    widen(lc.quantized_first, lc.quantized_last, before.pos[i]);
                } else if (coarser)
                    ++lc.tokens_requantized;
            }
            ++i;
            ++j;
        }
    }
}

void take_after(const CacheLayer& layer, LayerConversion& lc) {
    const LayerTelemetry t = layer.telemetry();
    lc.tokens_after = t.tokens_held;
    lc.quantized_after = t.quantized_tokens;
    lc.evicted_after = t.evicted;
    lc.bytes_after = held_bytes(t);
}

// Every position 0..length-1 in full precision: what re-prefilling the history gives a layer.
// The values only need to be finite and varied (quantizing them must be well defined); the
// layer's bookkeeping, and so its telemetry, depends on positions alone.
void fill_history(TokenRows& rows, int64_t kv_dim, int64_t length) {
    rows = TokenRows{};
    rows.kv_dim = kv_dim;
    rows.pos.resize(static_cast<size_t>(length));
    rows.exact.assign(static_cast<size_t>(length), 1);
    rows.k.resize(static_cast<size_t>(length * kv_dim));
    rows.v.resize(static_cast<size_t>(length * kv_dim));
    for (int64_t p = 0; p < length; ++p) rows.pos[static_cast<size_t>(p)] = static_cast<int32_t>(p);
    for (size_t i = 0; i < rows.k.size(); ++i) {
        rows.k[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i % 9973)));
        rows.v[i] = static_cast<float>(std::cos(0.23 * static_cast<double>(i % 7919)));
    }
}

std::string mib(int64_t bytes) {
    char buf[48];
    if (bytes < 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
    else
        std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string count(int64_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

std::string summarize(const ConversionPlan& p) {
    const std::string memory = "KV memory " + mib(p.bytes_before) + " -> " + mib(p.bytes_after) + ".";
    switch (p.kind) {
        case ConversionPlan::Kind::Unchanged:
            return "The cache already uses " + p.to_spec + "; nothing changes.";
        case ConversionPlan::Kind::Lossless:
            return "Lossless: all " + count(p.tokens, "token") + " carried over exactly; " + memory;
        case ConversionPlan::Kind::Lossy: {
            std::string s = "Lossy: ";
            std::string parts;
            auto add = [&](int64_t n, const std::string& text) {
                if (n == 0) return;
                if (!parts.empty()) parts += ", ";
                parts += text;
            };
            add(p.tokens_quantized, count(p.tokens_quantized, "token") + " quantized");
            add(p.tokens_requantized, count(p.tokens_requantized, "token") + " quantized again more coarsely");
            add(p.tokens_evicted, count(p.tokens_evicted, "token") + " evicted");
            return s + parts + " (on the layer that loses most); " + memory;
        }
        case ConversionPlan::Kind::Rebuild: {
            std::string s = "Rebuild: " + count(p.tokens_rebuilt, "token") + " re-prefilled through the model";
            if (p.rebuild_ms_estimate > 0) {
                char buf[64];
                if (p.rebuild_ms_estimate < 1000)
                    std::snprintf(buf, sizeof buf, " (about %.0f ms)", p.rebuild_ms_estimate);
                else
                    std::snprintf(buf, sizeof buf, " (about %.1f s)", p.rebuild_ms_estimate / 1000.0);
                s += buf;
            }
            return s + "; " + memory;
        }
    }
    return memory;
}

// The slow-tier directory must take a spill file: say so now rather than at Apply.
void check_offload_dir(const CacheSpec& spec) {
    if (!spec.offloaded) return;
    std::string dir = spec.offload_dir;
    if (dir.empty()) {
        const char* t = std::getenv("TMPDIR");
        dir = t && *t ? t : "/tmp";
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        const int err = errno;
        throw Error("offloaded: cannot create a spill file in '" + dir + "' (dir): " + std::strerror(err));
    }
}

}  // namespace

ConversionPlan plan_conversion(const Cache& cache, const std::string& target, double prefill_tok_s) {
    return plan_conversion(cache, parse_cache_spec(target), prefill_tok_s);
}

ConversionPlan plan_conversion(const Cache& cache, const CacheSpec& spec, double prefill_tok_s) {
    ConversionPlan plan;
    plan.from_spec = cache.spec_text();
    plan.to_spec = to_string(spec);
    plan.tokens = cache.seq_length();
    plan.bytes_before = cache.bytes();
    if (plan.to_spec == plan.from_spec) {
        plan.kind = ConversionPlan::Kind::Unchanged;
        plan.bytes_after = plan.bytes_before;
        plan.summary = summarize(plan);
        return plan;
    }
    if (!cache.backend()) throw Error("this cache was not made by make_cache and cannot be converted");
    check_offload_dir(spec);
    // The placement changes where bytes live, not how many: a resident scratch cache holds what the
    // target will, without a spill file or disk reserved for a preview. It is made on the cache's
    // own backend (which outlives both), so its imports quantize as convert()'s will.
    CacheSpec resident = spec;
    resident.offloaded = false;
    resident.offload_dir.clear();
    ThreadPool& pool = *cache.pool();
    std::unique_ptr<Cache> scratch = make_cache(cache.layer_specs(), resident, *cache.backend());
    const int64_t length = cache.seq_length();
    scratch->check_room(length);

    const size_t n = cache.n_layers();
    plan.layers.resize(n);
    std::vector<char> ok(n, 1);
    // Layers are independent; an offloaded source shares one spill file, so it goes one at a time
    // (as convert() does).
    auto for_each_layer = [&](const std::function<void(size_t)>& fn) {
        if (!cache.spill_path().empty()) {
            for (size_t i = 0; i < n; ++i) fn(i);
            return;
        }
        std::atomic<size_t> next{0};
        pool.run([&](int, int) {
            for (size_t k; (k = next.fetch_add(1)) < n;) fn(k);
        });
    };

    // The decisions of convert(): the same layout moves verbatim, otherwise the target imports
    // what the old layer holds when that covers what it needs.
    for_each_layer([&](size_t i) {
        const CacheLayer& from = cache.layer(i);
        CacheLayer& to = scratch->layer(i);
        LayerConversion& lc = plan.layers[i];
        const LayerTelemetry t = from.telemetry();
        lc.tokens_before = t.tokens_held;
        lc.bytes_before = held_bytes(t);
        if (from.layout() == to.layout()) {
            lc.mode = LayerConversion::Mode::Verbatim;
            lc.tokens_after = t.tokens_held;
            lc.quantized_after = t.quantized_tokens;
            lc.evicted_after = t.evicted;
            lc.bytes_after = lc.bytes_before;
            return;
        }
        lc.mode = LayerConversion::Mode::Imported;
        TokenRows rows, after;
        from.export_tokens(rows);
        ok[i] = to.can_import(rows, length);
        if (!ok[i]) return;
        to.import_tokens(rows, length);
        take_after(to, lc);
        to.export_tokens(after);
        count_changes(rows, after, lc);
    });

    const bool rebuild = std::find(ok.begin(), ok.end(), 0) != ok.end();
    if (rebuild) {
        // convert() then re-prefills the whole history into a fresh cache, every layer alike.
        for_each_layer([&](size_t i) {
            LayerConversion& lc = plan.layers[i];
            const LayerTelemetry t = cache.layer(i).telemetry();
            lc = LayerConversion{};
            lc.mode = LayerConversion::Mode::Rebuilt;
            lc.tokens_before = t.tokens_held;
            lc.bytes_before = held_bytes(t);
            CacheLayer& to = scratch->layer(i);
            to.reset();
            const AttentionShape& shape = cache.layer_specs()[i].shape;
            TokenRows rows, before, after;
            fill_history(rows, static_cast<int64_t>(shape.n_head_kv) * shape.head_dim, length);
            to.import_tokens(rows, length);
            rows = TokenRows{};
            take_after(to, lc);
            cache.layer(i).export_tokens(before);
            to.export_tokens(after);
            count_changes(before, after, lc);
        });
        plan.kind = ConversionPlan::Kind::Rebuild;
        plan.tokens_rebuilt = length;
        if (prefill_tok_s > 0) plan.rebuild_ms_estimate = 1000.0 * static_cast<double>(length) / prefill_tok_s;
    }

    plan.bytes_after = 0;
    for (const LayerConversion& lc : plan.layers) {
        plan.bytes_after += lc.bytes_after;
        plan.tokens_quantized = std::max(plan.tokens_quantized, lc.tokens_quantized);
        plan.tokens_requantized = std::max(plan.tokens_requantized, lc.tokens_requantized);
        plan.tokens_evicted = std::max(plan.tokens_evicted, lc.tokens_evicted);
        plan.tokens_restored = std::max(plan.tokens_restored, lc.tokens_restored);
        if (lc.evicted_first >= 0) {
            widen(plan.evicted_first, plan.evicted_last, lc.evicted_first);
            widen(plan.evicted_first, plan.evicted_last, lc.evicted_last);
        }
        if (lc.quantized_first >= 0) {
            widen(plan.quantized_first, plan.quantized_last, lc.quantized_first);
            widen(plan.quantized_first, plan.quantized_last, lc.quantized_last);
        }
    }
    if (!rebuild)
        plan.kind = plan.tokens_quantized > 0 || plan.tokens_requantized > 0 || plan.tokens_evicted > 0
                        ? ConversionPlan::Kind::Lossy
                        : ConversionPlan::Kind::Lossless;
    plan.summary = summarize(plan);
    return plan;
}

}  // namespace kvchat
