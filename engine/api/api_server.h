#pragma once
// The local OpenAI-compatible HTTP server (cpp-httplib) over the chat session:
//   GET  /health               the server is up, the loaded model, requests admitted
//   GET  /v1/models            the installed models (and the loaded one)
//   POST /v1/chat/completions  a conversation's next answer, whole or streamed as server-sent events
//   POST /v1/completions       a raw prompt continued (no template; nothing stored)
// Shapes and error objects follow OpenAI's API. One request computes at a time (RequestQueue);
// bodies, types and sizes are checked before anything runs (api_request.h).
//
// Security defaults: 127.0.0.1 only unless a key is given; with a key every request but /health
// needs `Authorization: Bearer KEY`; a request from a web page (an Origin header) is refused
// unless its origin was allowed (--cors), so a site the user visits cannot drive the server; the
// log never holds message text unless asked (log_text).
#include "engine/api/session_host.h"

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace kvchat::api {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                // 0: a free port (port() says which)
    std::string api_key;            // required for any host but a loopback one
    std::string cors_origin;        // the one web origin allowed (empty: none)
    int max_queue = 4;              // requests that may wait while one computes
    size_t max_body_bytes = 4u << 20;
    bool log_text = false;          // the log may hold the last message and the answer
    std::string default_cache_spec; // the strategy of new conversations (empty: the settings')
    std::string models_dir;         // where installed models are looked for
    // One line per request; default: standard error.
    std::function<void(const std::string&)> log;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

class ApiServer {
public:
    ApiServer(SessionHost& host, ServerOptions options);
    ~ApiServer();
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    // Checks the options (a non-loopback host needs a key) and binds; throws kvchat::Error naming
    // the problem. Returns the port bound.
    int bind();
    // Serves until stop(); bind() first.
    void listen();
    // Ends listen() (from any thread); a request computing is stopped at its next token.
    void stop();
    int port() const { return port_; }
    const ServerOptions& options() const { return options_; }

private:
    struct State;
    std::unique_ptr<State> state_;
    ServerOptions options_;
    int port_ = 0;
};

}  // namespace kvchat::api
