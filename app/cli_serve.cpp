// kvchat-cli serve: the local OpenAI-compatible API server (engine/api) over the chat session of
// a database, until Ctrl-C, SIGTERM or SIGHUP.
#include "app/cli_chat.h"

#include "engine/api/api_server.h"
#include "engine/api/session_host.h"
#include "engine/cache/cache_spec.h"
#include "engine/chat/chat_settings.h"
#include "engine/error.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace kvchat::cli {

int cmd_serve(const Options& o) {
    api::ServerOptions s;
    s.host = o.str("--host", "127.0.0.1");
    s.port = static_cast<int>(o.integer("--port", 8080, 0, 65535));
    s.api_key = o.str("--api-key");
    if (o.has("--api-key") && s.api_key.empty()) throw Error("--api-key needs a non-empty key");
    s.cors_origin = o.str("--cors");
    s.max_queue = static_cast<int>(o.integer("--max-queue", 4, 0, 1000));
    s.max_body_bytes = static_cast<size_t>(o.integer("--max-body", 4 << 20, 1024, 1LL << 30));
    s.log_text = o.flag("--log-text");
    s.models_dir = data_dir() + "/models";
    if (o.has("--cache")) {
        try {
            s.default_cache_spec = to_string(parse_cache_spec(o.str("--cache")));
        } catch (const Error& e) {
            throw Error(std::string("--cache: ") + e.what());
        }
    }
    // Refused before the model loads: a non-loopback address without a key.
    if (!api::is_loopback_host(s.host) && s.api_key.empty())
        throw Error("serving on " + s.host + " (not this machine's loopback address) needs --api-key KEY");

    Store store(o.str("--db", Store::default_path()));
    ChatSettings settings = ChatSettings::load(store);
    for (const std::string& n : settings.notices) std::fprintf(stderr, "kvchat-cli: note: %s\n", n.c_str());
    // The chat model, as the desktop app chats with, unless --model or $KVCHAT_MODEL says otherwise.
    Options with_settings = o;
    with_settings.values["--model"] = find_chat_model(o.str("--model"));
    if (!o.has("--threads") && settings.threads > 0) with_settings.values["--threads"] = std::to_string(settings.threads);
    if (!o.has("--device")) with_settings.values["--device"] = settings.device;
    Loaded l = load_model(with_settings);
    api::LocalSessionHost host(store, settings, std::move(l.backend), std::move(l.model));
    api::ApiServer server(host, s);
    const int port = server.bind();
    std::fprintf(stderr, "kvchat-cli: serving %s at http://%s:%d/v1 (database %s; Ctrl-C stops)\n",
                 api::model_id(host.loaded_model()).c_str(), s.host.c_str(), port, store.path().c_str());
    std::fflush(stderr);

    const std::atomic<bool>& stop = stop_on_interrupt();
    std::atomic<bool> ended{false};
    std::thread watcher([&] {
        while (!stop.load() && !ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        server.stop();
    });
    server.listen();
    ended.store(true);
    watcher.join();
    return stop_signal() ? stopped_exit_status() : 0;
}

}  // namespace kvchat::cli
