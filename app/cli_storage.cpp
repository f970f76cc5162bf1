#include "app/cli_storage.h"

#include "engine/chat/snapshot_storage.h"
#include "engine/common/quoted.h"
#include "engine/error.h"
#include "engine/store/store.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <limits>

namespace kvchat::cli {

namespace {

using json = nlohmann::json;

std::string existing_database(const Options& o) {
    const std::string path = o.str("--db", Store::default_path());
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error("database " + in_quotes(path) + " does not exist (nothing has been saved there yet; "
                    "kvchat-cli chat creates it)");
    return path;
}

const char* owner_name(StoredCache::Owner o) { return o == StoredCache::Owner::Conversation ? "conversation" : "prefix"; }

json row_json(const StoredCache& c) {
    return {{"kind", owner_name(c.owner)}, {"name", c.name},       {"tokens", c.tokens},
            {"cache", c.cache_spec},       {"saved", !c.snapshot.empty()}, {"bytes", c.bytes},
            {"checkpoints", c.checkpoints}, {"last_used_ms", c.last_used_ms}};
}

// BYTES for --budget and `storage budget`: a whole number, optionally with K, M, G (powers of 1000).
int64_t parse_bytes(const std::string& text, const std::string& what) {
    size_t end = 0;
    long long v = -1;
    try {
        v = std::stoll(text, &end);
    } catch (const std::exception&) {
        end = 0;
    }
    int64_t scale = 1;
    if (end > 0 && end + 1 == text.size()) {
        switch (text[end]) {
            case 'K': case 'k': scale = 1'000; break;
            case 'M': case 'm': scale = 1'000'000; break;
            case 'G': case 'g': scale = 1'000'000'000; break;
            default: scale = 0;
        }
        if (scale) ++end;
    }
    if (end == 0 || end != text.size() || v < 0 || v > std::numeric_limits<int64_t>::max() / scale)
        throw Error(what + " must be a number of bytes (e.g. 500000000 or 500M), got " + in_quotes(text));
    return v * scale;
}

int list(const Options& o) {
    const Store store(existing_database(o), Store::Access::ReadOnly);
    auto caches = stored_caches(store);
    const int64_t total = total_snapshot_bytes(caches), budget = snapshot_budget(store);
    const bool set = store.setting(kSnapshotBudgetSetting).has_value();
    std::reverse(caches.begin(), caches.end());  // most recently used first, as the other lists
    if (o.flag("--json")) {
        json a = json::array();
        for (const StoredCache& c : caches) a.push_back(row_json(c));
        json out = {{"caches", a}, {"total_bytes", total}, {"budget_bytes", budget}, {"budget_is_default", !set}};
        std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
        return 0;
    }
    for (const StoredCache& c : caches)
        std::printf("%s\t%s\t%lld tokens\t%s\t%s\t%lld checkpoints\n", owner_name(c.owner), tsv_field(c.name).c_str(),
                    static_cast<long long>(c.tokens), tsv_field(c.cache_spec).c_str(),
                    c.snapshot.empty() ? "no cache saved" : (std::to_string(c.bytes) + " bytes").c_str(),
                    static_cast<long long>(c.checkpoints));
    std::printf("total\t%lld bytes of %lld (budget%s)\n", static_cast<long long>(total), static_cast<long long>(budget),
                set ? "" : ", default");
    return 0;
}

}  // namespace

int cmd_storage(const Options& o) {
    const std::string action = o.positional.empty() ? "" : o.positional[0];
    if (action.empty()) {
        if (o.has("--budget")) throw Error("--budget goes with `storage prune` (see --help)");
        return list(o);
    }
    if (action == "prune") {
        if (o.positional.size() != 1) throw Error("unexpected argument '" + o.positional[1] + "' (see --help)");
        Store store(existing_database(o));
        const int64_t budget = o.has("--budget") ? parse_bytes(o.str("--budget"), "--budget") : snapshot_budget(store);
        const auto dropped = prune_snapshots(store, budget);
        const int64_t after = total_snapshot_bytes(stored_caches(store, false));
        if (o.flag("--json")) {
            json a = json::array();
            for (const StoredCache& c : dropped) a.push_back(row_json(c));
            std::printf("%s\n", json{{"removed", a}, {"total_bytes", after}, {"budget_bytes", budget}}
                                    .dump(-1, ' ', false, json::error_handler_t::replace)
                                    .c_str());
        } else {
            for (const StoredCache& c : dropped)
                std::printf("removed\t%s\t%s\t%lld bytes\n", owner_name(c.owner), tsv_field(c.name).c_str(),
                            static_cast<long long>(c.bytes));
            std::printf("total\t%lld bytes of %lld\n", static_cast<long long>(after), static_cast<long long>(budget));
        }
        if (after > budget)
            std::fprintf(stderr, "some caches are in use by another kvchat process and were kept; prune again later\n");
        return 0;
    }
    if (action == "budget") {
        if (o.positional.size() != 2) throw Error("storage budget takes one value: BYTES or default (see --help)");
        Store store(existing_database(o));
        if (o.positional[1] == "default")
            store.remove_setting(kSnapshotBudgetSetting);
        else
            set_snapshot_budget(store, parse_bytes(o.positional[1], "the budget"));
        std::printf("budget\t%lld bytes%s\n", static_cast<long long>(snapshot_budget(store)),
                    o.positional[1] == "default" ? " (default)" : "");
        return 0;
    }
    if (action == "drop") {
        if (o.positional.size() != 1) throw Error("unexpected argument '" + o.positional[1] + "' (see --help)");
        Store store(existing_database(o));
        std::optional<CacheRef> which;
        std::string name;
        if (o.has("--conversation") == o.has("--prefix"))
            throw Error("storage drop needs --conversation NAME or --prefix NAME");
        if (o.has("--conversation")) {
            name = o.str("--conversation");
            const auto c = store.find_conversation(name);
            if (!c) throw Error("there is no conversation named " + in_quotes(name));
            which = CacheRef{StoredCache::Owner::Conversation, c->id};
        } else {
            name = o.str("--prefix");
            const auto p = store.find_prefix(name);
            if (!p) throw Error("there is no prefix named " + in_quotes(name));
            which = CacheRef{StoredCache::Owner::Prefix, p->id};
        }
        std::printf(drop_snapshot(store, *which) ? "removed the saved cache of %s\n" : "%s has no saved cache\n",
                    in_quotes(name).c_str());
        return 0;
    }
    throw Error("unknown storage action '" + action + "' (prune, budget or drop; see --help)");
}

}  // namespace kvchat::cli
