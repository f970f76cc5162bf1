#include "engine/cache/convert.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/cache_factory.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>

namespace kvchat {

namespace {

// Every layer the same in another place (offloaded or not): each layer's state moves verbatim, so
// quantized blocks are not dequantized and quantized again. The states go through host memory and
// the old layers are freed before the new ones fill, so the backend's memory holds one copy of the
// cache, not two: a GPU too full for the cache to grow can still move it to `offloaded`. When
// filling fails, the old cache is built again from the states and the error goes on.
void move_states(Cache& cache, std::unique_ptr<Cache> fresh) {
    const size_t n = cache.n_layers();
    std::vector<std::string> states(n);
    auto save = [&](size_t i) { cache.layer(i).save_state(states[i]); };
    if (!cache.spill_path().empty()) {
        for (size_t i = 0; i < n; ++i) save(i);
    } else {
        std::atomic<size_t> next{0};
        cache.pool()->run([&](int, int) {
            for (size_t i; (i = next.fetch_add(1)) < n;) save(i);
        });
    }
    const CacheSpec old_spec = cache.spec();
    const std::vector<int32_t> tokens = cache.tokens();
    Backend& backend = *cache.backend();
    auto fill = [&](Cache& c) {
        for (size_t i = 0; i < n; ++i) {
            ByteReader r(states[i], "conversion");
            c.layer(i).load_state(r);
        }
        c.append_tokens(tokens.data(), static_cast<int64_t>(tokens.size()));
    };
    cache.replace_with(*fresh);  // the old layers' memory goes back here
    fresh.reset();
    try {
        fill(cache);
    } catch (...) {
        const std::exception_ptr error = std::current_exception();
        const CacheSpec target = cache.spec();
        const std::vector<LayerSpec> specs = cache.layer_specs();
        // The new layers' memory goes back before the old ones are built again (the old cache
        // fitted without them): a cache of no layers holds it meanwhile.
        Cache hollow(target, {});
        hollow.set_origin(specs, backend);
        cache.replace_with(hollow);
        try {
            auto back = make_cache(specs, old_spec, backend);
            fill(*back);
            cache.replace_with(*back);
        } catch (...) {
            // Empty and consistent: the next turn computes the tokens again.
            try {
                cache.replace_with(*make_cache(specs, target, backend));
            } catch (...) {
                cache.replace_with(*make_cache(specs, old_spec, backend));
            }
        }
        std::rethrow_exception(error);
    }
}

}  // namespace

ConvertResult convert(Cache& cache, const std::string& target, const ConvertOptions& opt) {
    return convert(cache, parse_cache_spec(target), opt);
}

ConvertResult convert(Cache& cache, const CacheSpec& spec, const ConvertOptions& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!cache.backend()) throw Error("this cache was not made by make_cache and cannot be converted");
    ThreadPool& pool = *cache.pool();
    std::unique_ptr<Cache> fresh = make_cache(cache.layer_specs(), spec, *cache.backend());
    const int64_t length = cache.seq_length();
    fresh->check_room(length);
    ConvertResult result;
    const size_t n = cache.n_layers();
    bool same = true;
    for (size_t i = 0; i < n; ++i) same = same && cache.layer(i).layout() == fresh->layer(i).layout();
    if (same) {
        move_states(cache, std::move(fresh));
        result.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return result;
    }

    // Carry tokens over layer by layer when every layer can be rebuilt from what the old one
    // holds. Layers are independent, so they convert in parallel unless a spill file is shared.
    std::vector<char> ok(n, 1);
    const bool serial = !cache.spill_path().empty() || !fresh->spill_path().empty();
    // One TokenRows per thread, kept from layer to layer: largest layers come first, so later
    // ones fit in memory already faulted in rather than zero-filling fresh megabytes each time.
    std::vector<TokenRows> rows_of(static_cast<size_t>(pool.size()));
    auto check = [&](int64_t b, int64_t e, TokenRows& rows) {
        std::string state;
        for (int64_t i = b; i < e; ++i) {
            CacheLayer& from = cache.layer(static_cast<size_t>(i));
            CacheLayer& to = fresh->layer(static_cast<size_t>(i));
            if (from.layout() == to.layout()) {
                state.clear();
                from.save_state(state);
                ByteReader r(state, "conversion");
                to.load_state(r);
                continue;
            }
            // Exact rows as the old layer keeps them: a target of the same dtype takes them as
            // they are (the same bytes a round trip through f32 would give, without the trip).
            from.export_tokens(rows, TokenRows::Form::Kept);
            ok[static_cast<size_t>(i)] = to.can_import(rows, length);
            if (ok[static_cast<size_t>(i)]) to.import_tokens(rows, length);
        }
    };
    if (serial) {
        check(0, static_cast<int64_t>(n), rows_of[0]);
    } else {
        // Largest layers first, taken one at a time, so threads finish together.
        std::vector<int64_t> order(n);
        for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return cache.layer(static_cast<size_t>(a)).tokens_held() > cache.layer(static_cast<size_t>(b)).tokens_held();
        });
        std::atomic<size_t> next{0};
        pool.run([&](int thread, int) {
            for (size_t k; (k = next.fetch_add(1)) < n;) check(order[k], order[k] + 1, rows_of[static_cast<size_t>(thread)]);
        });
    }
    bool all = true;
    for (char c : ok) all = all && c;

    if (all) {
        fresh->append_tokens(cache.tokens().data(), length);
    } else {
        if (!opt.reprefill)
            throw Error("converting the " + cache.spec_text() + " cache to " + fresh->spec_text() +
                        " needs tokens it no longer holds; it must be rebuilt through the model");
        fresh->reset();
        const std::vector<int32_t>& tokens = cache.tokens();
        const int64_t chunk = opt.chunk > 0 ? opt.chunk : 256;
        for (int64_t at = 0; at < length; at += chunk) {
            if (opt.cancel && opt.cancel->load()) throw Error("conversion to " + fresh->spec_text() + " cancelled; the cache is unchanged");
            const int64_t m = std::min(chunk, length - at);
            opt.reprefill(*fresh, std::vector<int32_t>(tokens.begin() + at, tokens.begin() + at + m));
            if (fresh->seq_length() != at + m)
                throw Error("conversion: the re-prefill did not add the tokens it was given");
            if (opt.progress) opt.progress(at + m, length);
        }
        result.rebuilt = true;
        result.reprefilled_tokens = length;
    }
    cache.replace_with(*fresh);
    result.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

}  // namespace kvchat
