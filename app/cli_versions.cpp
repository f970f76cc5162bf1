// kvchat-cli versions: the places of a conversation where regenerate or edit kept earlier
// versions, the versions of one place, and choosing the one shown (which the next turn answers).
// It needs no model: the chat session's rules apply without one.
#include "app/cli_chat.h"

#include "engine/chat/chat_session.h"
#include "engine/common/quoted.h"
#include "engine/error.h"
#include "engine/store/store.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

namespace kvchat::cli {

namespace {

using json = nlohmann::json;

// The start of a message on one line, for a listing.
std::string excerpt(const std::string& text) {
    constexpr size_t kMax = 60;
    std::string line = text.substr(0, text.find('\n'));
    if (line.size() > kMax) {
        size_t cut = kMax;
        while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // whole characters
        line = line.substr(0, cut) + "...";
    }
    return tsv_field(line);
}

std::string count_of(size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

int cmd_versions(const Options& o) {
    if (!o.has("--conversation")) throw Error("versions needs --conversation NAME");
    if (o.has("--select") && !o.has("--at")) throw Error("--select K needs --at N (the message whose version is chosen)");
    const bool select = o.has("--select");
    Store store(existing_db_path(o), select ? Store::Access::ReadWrite : Store::Access::ReadOnly);
    const std::string title = o.str("--conversation");
    const auto c = store.find_conversation(title);
    if (!c) throw Error("there is no conversation named " + in_quotes(title));
    ChatSession session(store, nullptr, nullptr);
    const std::vector<VersionSet> sets = session.versions(c->id);

    if (!o.has("--at")) {
        if (o.flag("--json")) {
            json a = json::array();
            for (const VersionSet& v : sets) a.push_back({{"at", v.ordinal}, {"shown", v.shown}, {"count", v.count}});
            std::printf("%s\n", a.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
            return 0;
        }
        if (sets.empty()) std::fprintf(stderr, "conversation %s has no earlier versions\n", in_quotes(c->title).c_str());
        const std::vector<MessageRecord> shown = session.messages(c->id);
        for (const VersionSet& v : sets) {
            const auto i = static_cast<size_t>(v.ordinal);
            std::printf("message %lld\tversion %lld of %lld\t%s\n", static_cast<long long>(v.ordinal),
                        static_cast<long long>(v.shown), static_cast<long long>(v.count),
                        i < shown.size() ? excerpt(shown[i].content).c_str() : "");
        }
        return 0;
    }

    const long long at = o.integer("--at", 0, 0, std::numeric_limits<long long>::max());
    const auto place = std::find_if(sets.begin(), sets.end(), [&](const VersionSet& v) { return v.ordinal == at; });
    if (place == sets.end())
        throw Error("message " + std::to_string(at) + " of conversation " + in_quotes(c->title) +
                    " has no earlier versions (kvchat-cli versions --conversation NAME lists the ones that have)");
    if (select) {
        const long long k = o.integer("--select", 0, 1, std::numeric_limits<long long>::max());
        if (k > place->count)
            throw Error("message " + std::to_string(at) + " has " + count_of(static_cast<size_t>(place->count), "version") +
                        "; --select " + std::to_string(k) + " asks for more");
        session.select_version(c->id, static_cast<size_t>(at), k);
        std::printf("conversation %s: message %lld shows version %lld of %lld\n", in_quotes(c->title).c_str(), at, k,
                    static_cast<long long>(place->count));
        return 0;
    }
    json a = json::array();
    for (int64_t k = 1; k <= place->count; ++k) {
        const std::vector<MessageRecord> ms = session.version(c->id, static_cast<size_t>(at), k);
        if (o.flag("--json")) {
            json messages = json::array();
            for (const MessageRecord& m : ms) messages.push_back({{"role", role_name(m.role)}, {"content", m.content}});
            a.push_back({{"version", k}, {"shown", k == place->shown}, {"messages", messages}});
            continue;
        }
        std::printf("%s%lld\t%s\t%s\n", k == place->shown ? "*" : " ", static_cast<long long>(k),
                    count_of(ms.size(), "message").c_str(), ms.empty() ? "" : excerpt(ms.front().content).c_str());
    }
    if (o.flag("--json")) std::printf("%s\n", a.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
}

}  // namespace kvchat::cli
