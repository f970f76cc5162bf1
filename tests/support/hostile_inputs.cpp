#include "support/hostile_inputs.h"

#include "engine/cache/cache_spec.h"
#include "engine/cache/snapshot.h"
#include "engine/chat/chat_template.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/store/store.h"
#include "support/tiny_model.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

namespace kvchat::test {

namespace {

namespace fs = std::filesystem;

void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "hostile input broke an invariant: %s\n", what);
    std::abort();
}

// A folder of this process's own for the files the inputs become (tmpfs when there is one: the
// store syncs every commit).
const fs::path& scratch() {
    static const fs::path dir = [] {
        const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        fs::path d = base / ("kvchat-hostile-" + std::to_string(::getpid()));
        fs::create_directories(d);
        std::atexit([] { std::error_code ec; fs::remove_all(scratch(), ec); });
        return d;
    }();
    return dir;
}

void write_bytes(const fs::path& p, std::string_view bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    require(bool(f), "cannot write a scratch file");
}

std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The backend loaded snapshots compute with; it outlives them all.
Backend& backend() {
    static const std::unique_ptr<Backend> b = make_cpu_backend(1);
    return *b;
}

template <class F>
bool accepted(F&& f) {
    try {
        f();
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace

const Model& hostile_input_model() {
    static const std::unique_ptr<Model> model = [] {
        TinyModelSpec s;
        s.arch = "gemma3";
        s.n_layer = 2;  // the pattern makes layer 0 sliding (window 4) and layer 1 global
        s.n_embd = 64;
        s.n_head = 2;
        s.n_head_kv = 1;
        s.head_dim = 32;
        s.n_ff = 64;
        const fs::path file = scratch() / "model.gguf";
        write_tiny_gguf(s, file.string());
        auto m = Model::load(file.string());
        fs::remove(file);
        return m;
    }();
    return *model;
}

bool feed_snapshot(std::string_view bytes) {
    const Model& m = hostile_input_model();
    const fs::path file = scratch() / "input.kvcache";
    write_bytes(file, bytes);
    LoadedSnapshot loaded;
    if (!accepted([&] { loaded = load_snapshot(file.string(), m.layer_specs(), m.fingerprint(), backend()); }))
        return false;
    Cache& cache = *loaded.cache;
    require(cache.n_layers() == m.layer_specs().size(), "a loaded cache has the model's layers");
    const CacheTelemetry t = cache.telemetry();
    require(t.tokens == cache.seq_length() && t.total_bytes >= 0, "telemetry of a loaded cache");
    // A loaded snapshot saves to the same bytes when saved again and reloaded (round trips are exact).
    const fs::path again = scratch() / "again.kvcache";
    save_snapshot(again.string(), cache, m.fingerprint(), loaded.checkpoints);
    const std::string first = read_bytes(again);
    LoadedSnapshot reloaded = load_snapshot(again.string(), m.layer_specs(), m.fingerprint(), backend());
    save_snapshot(again.string(), *reloaded.cache, m.fingerprint(), reloaded.checkpoints);
    require(read_bytes(again) == first, "a snapshot saved, loaded and saved again is unchanged");
    for (const CacheCheckpoint& cp : loaded.checkpoints) {
        if (cp.intact()) accepted([&] { cache.restore(cp); });
    }
    if (cache.seq_length() > 0 && cache.can_crop_to(cache.seq_length() - 1)) cache.crop(cache.seq_length() - 1);
    return true;
}

bool feed_snapshot_with_fixed_crcs(std::string_view bytes) {
    // Layout (engine/cache/snapshot.h): 8-byte magic, u32 version, then sections of u32 tag,
    // u64 length, payload, u32 CRC-32C of the payload.
    std::string fixed(bytes);
    size_t at = 12;
    while (at + 12 <= fixed.size()) {
        uint64_t length = 0;
        std::memcpy(&length, fixed.data() + at + 4, sizeof length);
        if (length > fixed.size() - at - 12 || fixed.size() - at - 12 - length < 4) break;
        const uint32_t crc = crc32c(fixed.data() + at + 12, length);
        std::memcpy(fixed.data() + at + 12 + length, &crc, sizeof crc);
        at += 12 + length + 4;
    }
    return feed_snapshot(fixed);
}

bool feed_cache_spec(std::string_view bytes) {
    const std::string text(bytes);
    accepted([&] { split_spec_list(text); });
    CacheSpec spec;
    if (!accepted([&] { spec = parse_cache_spec(text); })) return false;
    const std::string canonical = to_string(spec);
    CacheSpec again;
    require(accepted([&] { again = parse_cache_spec(canonical); }), "the canonical text of a spec parses");
    require(again == spec, "the canonical text of a spec parses to the same spec");
    require(to_string(again) == canonical, "the canonical text is a fixed point");
    return true;
}

bool feed_chat_template(std::string_view bytes) {
    accepted([&] { recognise_chat_template(bytes); });
    if (bytes.size() < 2) return false;
    const Model& m = hostile_input_model();
    const auto format = static_cast<ChatFormat>(static_cast<uint8_t>(bytes[0]) % 6);
    const bool prompt = (static_cast<uint8_t>(bytes[1]) & 1) != 0;
    std::vector<ChatMessage> messages;
    std::string_view rest = bytes.substr(2);
    while (!rest.empty()) {
        const size_t end = std::min(rest.find('\x1e'), rest.size());
        const std::string_view part = rest.substr(0, end);
        rest = rest.substr(std::min(end + 1, rest.size()));
        if (part.empty()) continue;
        messages.push_back({static_cast<Role>(static_cast<uint8_t>(part[0]) % 3), std::string(part.substr(1))});
        if (messages.size() == 16) break;
    }
    const ChatTemplate t(format, m.tokenizer());
    RenderedChat all;
    if (!accepted([&] { all = t.render(messages, prompt); })) return false;
    const auto n = static_cast<int64_t>(all.tokens.size());
    require(all.message_starts.size() == messages.size(), "one start per message");
    for (size_t i = 0; i < all.message_starts.size(); ++i) {
        require(all.message_starts[i] >= 0 && all.message_starts[i] <= n, "message starts lie inside the render");
        if (i > 0) require(all.message_starts[i] >= all.message_starts[i - 1], "message starts are in order");
    }
    require(all.system_end >= 0 && all.system_end <= n && all.prompt_start >= 0 && all.prompt_start <= n,
            "system end and prompt start lie inside the render");
    for (int32_t id : all.tokens) require(id >= 0 && id < m.tokenizer().vocab_size(), "ids are in the vocabulary");
    // Prefix stability: the messages before k render to the first message_starts[k] tokens.
    for (size_t k = 0; k < messages.size(); ++k) {
        const RenderedChat part = t.render({messages.begin(), messages.begin() + static_cast<ptrdiff_t>(k)}, false);
        require(static_cast<int64_t>(part.tokens.size()) <= n &&
                    std::equal(part.tokens.begin(), part.tokens.end(), all.tokens.begin()),
                "a conversation's first messages render to a prefix of the whole");
    }
    return true;
}

bool feed_store_database(std::string_view bytes) {
    const fs::path dir = scratch() / "store";
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    const fs::path db = dir / "kvchat.db";
    write_bytes(db, bytes);
    return accepted([&] {
        Store store(db.string());
        for (const ConversationOverview& o : store.list_conversation_overviews()) {
            for (const MessageRecord& msg : store.list_messages(o.conversation.id))
                require(msg.conversation_id == o.conversation.id, "messages belong to their conversation");
        }
        store.search_conversations("a \"b\" c*");
        for (const PrefixRecord& p : store.list_prefixes()) store.find_prefix_by_id(p.id);
        for (const std::string& name : store.snapshot_names()) accepted([&] { store.snapshot_path(name); });
        store.setting("model");
        const ConversationRecord c = store.create_conversation("fuzz", "fingerprint", "dynamic");
        store.append_message(c.id, Role::User, "hello");
        require(store.list_messages(c.id).size() == 1, "a new conversation holds its message");
        store.delete_conversation(c.id);
    });
}

}  // namespace kvchat::test
