#include "engine/api/api_server.h"

#include "engine/api/api_error.h"
#include "engine/api/api_request.h"
#include "engine/api/completion_slot.h"
#include "engine/api/request_queue.h"
#include "engine/common/utf8.h"
#include "engine/error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

namespace kvchat::api {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What a request did, for its log line (each request is handled on one thread, start to end).
struct RequestLog {
    Clock::time_point start = Clock::now();
    int64_t prompt_tokens = -1;
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
    std::string text;  // with log_text: the last message and the answer
};
thread_local RequestLog t_log;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(dump(e.body()), "application/json");
}

std::string random_id(const char* prefix) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
    return std::string(prefix) + buf;
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string finish_reason(StopReason r) {
    return r == StopReason::MaxNewTokens || r == StopReason::ContextFull ? "length" : "stop";
}

// llama-server's `timings`: the prefill (prompt_*), the decode (predicted_*) and the tokens the
// cache already held (cache_n).
json timings_json(int64_t prompt_n, double prompt_ms, int64_t predicted_n, double predicted_ms, int64_t cache_n) {
    return {{"prompt_n", prompt_n},
            {"prompt_ms", prompt_ms},
            {"prompt_per_token_ms", prompt_n > 0 ? prompt_ms / static_cast<double>(prompt_n) : 0.0},
            {"prompt_per_second", prompt_ms > 0 ? prompt_n * 1000.0 / prompt_ms : 0.0},
            {"predicted_n", predicted_n},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", predicted_n > 0 ? predicted_ms / static_cast<double>(predicted_n) : 0.0},
            {"predicted_per_second", predicted_ms > 0 ? predicted_n * 1000.0 / predicted_ms : 0.0},
            {"cache_n", cache_n}};
}

json usage_json(int64_t prompt, int64_t cached, int64_t completion) {
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// A turn's decode time: its tokens after the first at the measured decode speed.
double decode_ms(const TurnResult& t) {
    const int64_t n = t.figures.generated_tokens;
    const double tok_s = t.figures.tokens_per_second.value_or(0.0);
    return n > 1 && tok_s > 0 ? static_cast<double>(n - 1) * 1000.0 / tok_s : 0.0;
}

// How a turn's answer ended (a turn that answered always says).
StopReason stop_reason_of(const TurnResult& t) { return t.figures.stop_reason.value_or(StopReason::MaxNewTokens); }

json turn_usage_json(const TurnResult& t) {
    return usage_json(t.figures.prompt_tokens, t.figures.cached_tokens, t.figures.generated_tokens);
}

json turn_timings_json(const TurnResult& t) {
    return timings_json(t.figures.computed_tokens, t.prefill_ms, t.figures.generated_tokens, decode_ms(t),
                        t.figures.cached_tokens);
}

std::string one_line(std::string_view text) {
    std::string out;
    for (char c : text) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
    return out;
}

// Server-sent events: one `data:` line per chunk.
bool write_event(httplib::DataSink& sink, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event.data(), event.size());
}

// A streamed answer's events (chat or raw completion). A write that fails means the client went
// away: `cancel` is set, so the answer stops at its next token and nothing more is written.
struct EventStream {
    explicit EventStream(httplib::DataSink& s) : sink(s) {}
    httplib::DataSink& sink;
    std::atomic<bool> cancel{false};

    void send(const json& j) {
        if (!cancel.load() && !write_event(sink, dump(j))) cancel.store(true);
    }
    // The last chunk OpenAI sends when asked for usage: no choices, the usage figures.
    void send_usage(json chunk, json usage) {
        chunk["choices"] = json::array();
        chunk["usage"] = std::move(usage);
        send(chunk);
    }
    // false (the stream did not end with [DONE]): httplib closes the connection.
    bool finish() {
        if (cancel.load() || !write_event(sink, "[DONE]")) return false;
        sink.done();
        return true;
    }
};

}  // namespace

bool is_loopback_host(const std::string& host) {
    if (host == "localhost" || host == "::1" || host == "[::1]") return true;
    in_addr a{};
    if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
    return false;
}

struct ApiServer::State {
    SessionHost& host;
    ServerOptions& options;
    httplib::Server http;
    RequestQueue queue;
    CompletionSlot slot;  // only touched inside host.run (one job at a time)
    std::string slot_model;
    std::atomic<bool> stopping{false};

    State(SessionHost& h, ServerOptions& o) : host(h), options(o), queue(o.max_queue) {}

    void log_line(const std::string& line) const {
        if (options.log) options.log(line);
        else std::fprintf(stderr, "%s\n", line.c_str());
    }

    // The path of the model a request names ("": the loaded one); 404 when it is not installed.
    std::string resolve_model(const std::string& name) const {
        if (name.empty()) return {};
        const std::vector<ServedModel> models = served_models(options.models_dir, host.loaded_model());
        for (const ServedModel& m : models)
            if (m.id == name || m.path == name || m.id + ".gguf" == name) return m.path;
        std::string ids;
        for (const ServedModel& m : models) ids += (ids.empty() ? "" : ", ") + m.id;
        throw ApiError(404, "The model '" + name + "' does not exist or is not installed (installed: " +
                                (ids.empty() ? "none" : ids) + ")",
                       "invalid_request_error", "model", "model_not_found");
    }

    std::unique_ptr<RequestQueue::Place> enter_queue(httplib::Response& res) {
        auto place = queue.enter();
        if (!place) {
            // A rough wait: the requests ahead, a few seconds each on a small model.
            res.set_header("Retry-After", std::to_string(2 * (queue.max_waiting() + 1)));
            throw ApiError(503,
                           "the server is busy: one request is computing and " + std::to_string(queue.max_waiting()) +
                               " are waiting (--max-queue); retry later",
                           "server_error", {}, "server_busy");
        }
        return place;
    }

    // Runs `job` with the model `path`, turning engine errors into API errors.
    void run(const std::string& path, const std::function<void(HostedSession&)>& job) {
        try {
            host.run(path, [&](HostedSession& h) {
                if (h.model.path() != slot_model) {
                    slot.clear();
                    slot_model = h.model.path();
                }
                job(h);
            });
        } catch (const ApiError&) {
            throw;
        } catch (const Cancelled& e) {
            throw ApiError(499, std::string("the request was cancelled: ") + e.what(), "invalid_request_error");
        } catch (const Error& e) {
            throw ApiError(500, e.what(), "server_error");
        } catch (const std::bad_alloc&) {
            throw ApiError(500, "out of memory", "server_error");
        }
    }

    // The prompt must leave room for at least one new token in the model's context.
    static void check_context(int64_t prompt_tokens, const Model& model, const char* param) {
        const int64_t ctx = model.config().n_ctx_train;
        if (prompt_tokens >= ctx)
            throw ApiError(400,
                           "the prompt is " + std::to_string(prompt_tokens) + " tokens, over the model's context of " +
                               std::to_string(ctx) + " tokens (shorten it)",
                           "invalid_request_error", param, "context_length_exceeded");
    }

    TurnOptions turn_options(const HostedSession& h, const ChatCompletionRequest& r) const {
        const std::string spec = strategy_of(h, r);
        TurnOptions t = h.settings.turn_options(spec);
        t.generation = r.sampling.apply(t.generation);
        return t;
    }

    // The request as the session answers it: matched against every stored conversation and
    // prefix, stored as a conversation coming from the API.
    MessagesRequest messages_request(const HostedSession& h, const ChatCompletionRequest& r) const {
        MessagesRequest m;
        m.messages = r.messages;
        m.cache_spec = strategy_of(h, r);
        m.origin = "api";
        return m;
    }

    std::string strategy_of(const HostedSession& h, const ChatCompletionRequest& r) const {
        if (!r.cache_spec.empty()) return r.cache_spec;
        if (!options.default_cache_spec.empty()) return options.default_cache_spec;
        return h.settings.default_strategy;
    }

    // Checks what needs the model: the template accepts the messages and they fit the context.
    void check_chat(HostedSession& h, const ChatCompletionRequest& r) {
        const ChatTemplate& t = h.session.chat_template();
        if (const std::string refused = t.refusal(r.messages); !refused.empty())
            throw bad_field("messages", "the model's chat template refuses these messages: " + refused);
        if (is_blank_text(r.messages.back().content))
            throw bad_field("messages", "the last user message is empty (only white space)");
        check_context(static_cast<int64_t>(t.render(r.messages, true).tokens.size()), h.model, "messages");
    }

    json chat_response(const MessagesResult& a, const std::string& model_id) const {
        const TurnResult& t = a.turn;
        json j = {{"id", "chatcmpl-" + std::to_string(a.conversation_id) + "-" +
                             std::to_string(t.answer ? t.answer->id : 0)},
                  {"object", "chat.completion"},
                  {"created", unix_now()},
                  {"model", model_id},
                  {"choices",
                   json::array({{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", t.text}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish_reason(stop_reason_of(t))}}})},
                  {"usage", turn_usage_json(t)}};
        j["timings"] = turn_timings_json(t);
        j["kvchat"] = kvchat_json(a);
        return j;
    }

    static json kvchat_json(const MessagesResult& a) {
        return {{"conversation_id", a.conversation_id},
                {"reused_from", a.reused_from},
                {"reused_prefix", a.reused_prefix},
                {"cache", a.turn.cache_spec},
                {"stop_reason", stop_reason_name(stop_reason_of(a.turn))},
                {"notices", a.turn.notices}};
    }

    // `log` is the request's (its handler's thread's): a job may run on another thread (the app's
    // worker).
    void note_turn(RequestLog& log, const ChatCompletionRequest& r, const TurnResult& t) const {
        log.prompt_tokens = t.figures.prompt_tokens;
        log.cached_tokens = t.figures.cached_tokens;
        log.completion_tokens = t.figures.generated_tokens;
        if (options.log_text)
            log.text = " message=\"" + one_line(r.messages.back().content) + "\" answer=\"" + one_line(t.text) + "\"";
    }

    void chat_completions(const httplib::Request& req, httplib::Response& res) {
        ChatCompletionRequest r = parse_chat_completion(req.body);
        const std::string path = resolve_model(r.model);
        std::shared_ptr<RequestQueue::Place> place = enter_queue(res);
        place->wait();
        if (!r.stream) {
            RequestLog& log = t_log;
            json body;
            run(path, [&](HostedSession& h) {
                check_chat(h, r);
                const TurnOptions options = turn_options(h, r);
                TurnCallbacks cb;
                cb.progress.cancel = &stopping;  // the server going down stops the answer (it is kept)
                MessagesResult a = h.session.answer_messages(messages_request(h, r), options, cb);
                note_turn(log, r, a.turn);
                if (a.turn.ending == TurnResult::Ending::Failed || a.turn.ending == TurnResult::Ending::Cancelled)
                    throw ApiError(500, "the answer failed: " + a.turn.problem, "server_error");
                body = chat_response(a, model_id(h.model.path()));
            });
            res.set_content(dump(body), "application/json");
            return;
        }
        // Streamed: what needs the model is checked before the status line goes out, so a bad
        // request still gets its 400; the place in the queue is held until the stream ends.
        std::string model_name;
        run(path, [&](HostedSession& h) {
            check_chat(h, r);
            model_name = model_id(h.model.path());
        });
        auto request = std::make_shared<ChatCompletionRequest>(std::move(r));
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, place, request, path, model_name](size_t, httplib::DataSink& sink) {
                // false (the stream did not end with [DONE]): httplib closes the connection.
                return stream_chat(*request, path, model_name, sink);
            });
    }

    bool stream_chat(const ChatCompletionRequest& r, const std::string& path, const std::string& model_name,
                     httplib::DataSink& sink) {
        const std::string id = random_id("chatcmpl-");
        const int64_t created = unix_now();
        EventStream stream(sink);
        RequestLog& log = t_log;
        auto chunk = [&](json delta, json finish) {
            return json{{"id", id},
                        {"object", "chat.completion.chunk"},
                        {"created", created},
                        {"model", model_name},
                        {"choices", json::array({{{"index", 0},
                                                  {"delta", std::move(delta)},
                                                  {"logprobs", nullptr},
                                                  {"finish_reason", std::move(finish)}}})}};
        };
        stream.send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
        try {
            run(path, [&](HostedSession& h) {
                const TurnOptions options = turn_options(h, r);
                TurnCallbacks cb;
                cb.on_text = [&](std::string_view piece) {
                    if (stopping.load()) stream.cancel.store(true);  // the server is going down
                    stream.send(chunk({{"content", std::string(piece)}}, nullptr));
                };
                cb.progress.cancel = &stream.cancel;
                MessagesResult a = h.session.answer_messages(messages_request(h, r), options, cb);
                note_turn(log, r, a.turn);
                if (a.turn.ending == TurnResult::Ending::Failed || a.turn.ending == TurnResult::Ending::Cancelled)
                    throw ApiError(500, "the answer failed: " + a.turn.problem, "server_error");
                json last = chunk(json::object(), finish_reason(stop_reason_of(a.turn)));
                last["timings"] = turn_timings_json(a.turn);
                last["kvchat"] = kvchat_json(a);
                stream.send(last);
                if (r.include_usage)
                    stream.send_usage(chunk(json::object(), nullptr), turn_usage_json(a.turn));
            });
        } catch (const ApiError& e) {
            // The status line is out: the error travels as an event, as OpenAI's stream does.
            stream.send(e.body());
        }
        return stream.finish();
    }

    void completions(const httplib::Request& req, httplib::Response& res) {
        CompletionRequest r = parse_completion(req.body);
        const std::string path = resolve_model(r.model);
        std::shared_ptr<RequestQueue::Place> place = enter_queue(res);
        place->wait();
        std::string model_name;
        auto ids = std::make_shared<std::vector<int32_t>>();
        run(path, [&](HostedSession& h) {
            *ids = h.model.tokenizer().encode(r.prompt, true);
            check_context(static_cast<int64_t>(ids->size()), h.model, "prompt");
            model_name = model_id(h.model.path());
        });
        auto request = std::make_shared<CompletionRequest>(std::move(r));
        if (!request->stream) {
            json body;
            complete(*request, path, *ids, nullptr, &stopping, [&](const json& final) { body = final; });
            res.set_content(dump(body), "application/json");
            return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, place, request, path, ids, model_name](size_t, httplib::DataSink& sink) {
                EventStream stream(sink);
                const std::string id = random_id("cmpl-");
                auto chunk = [&](const std::string& text, json finish) {
                    return json{{"id", id},
                                {"object", "text_completion"},
                                {"created", unix_now()},
                                {"model", model_name},
                                {"choices", json::array({{{"index", 0},
                                                          {"text", text},
                                                          {"logprobs", nullptr},
                                                          {"finish_reason", std::move(finish)}}})}};
                };
                try {
                    complete(*request, path, *ids,
                             [&](std::string_view piece) {
                                 if (stopping.load()) stream.cancel.store(true);
                                 stream.send(chunk(std::string(piece), nullptr));
                             },
                             &stream.cancel, [&](const json& final) {
                                 json last = chunk("", final["choices"][0]["finish_reason"]);
                                 last["timings"] = final["timings"];
                                 stream.send(last);
                                 if (request->include_usage) stream.send_usage(chunk("", nullptr), final["usage"]);
                             });
                } catch (const ApiError& e) {
                    stream.send(e.body());
                }
                return stream.finish();
            });
    }

    // Runs a raw completion in the slot; `done` gets the whole response object.
    void complete(const CompletionRequest& r, const std::string& path, const std::vector<int32_t>& ids,
                  const std::function<void(std::string_view)>& on_text, const std::atomic<bool>* cancel,
                  const std::function<void(const json&)>& done) {
        RequestLog& log = t_log;
        run(path, [&](HostedSession& h) {
            GenerationConfig g;
            g.sampling = h.settings.sampling;
            if (h.settings.random_seed) g.sampling.seed = std::random_device{}() & 0x7fffffffu;
            g = r.sampling.apply(g);
            const std::string spec = options.default_cache_spec.empty() ? h.settings.default_strategy
                                                                       : options.default_cache_spec;
            const GenerationResult g_r = slot.complete(h.model, h.backend, ids, g, spec, on_text, cancel);
            log.prompt_tokens = static_cast<int64_t>(ids.size());
            log.cached_tokens = g_r.cached_tokens;
            log.completion_tokens = static_cast<int64_t>(g_r.tokens.size());
            if (options.log_text) log.text = " prompt=\"" + one_line(r.prompt) + "\" answer=\"" + one_line(g_r.text) + "\"";
            json j = {{"id", random_id("cmpl-")},
                      {"object", "text_completion"},
                      {"created", unix_now()},
                      {"model", model_id(h.model.path())},
                      {"choices", json::array({{{"index", 0},
                                                {"text", g_r.text},
                                                {"logprobs", nullptr},
                                                {"finish_reason", finish_reason(g_r.stop_reason)}}})},
                      {"usage", usage_json(static_cast<int64_t>(ids.size()), g_r.cached_tokens,
                                           static_cast<int64_t>(g_r.tokens.size()))}};
            const int64_t n = static_cast<int64_t>(g_r.tokens.size());
            j["timings"] = timings_json(g_r.prefill_tokens, g_r.prefill_ms, n, g_r.decode_ms, g_r.cached_tokens);
            done(j);
        });
    }

    void models(httplib::Response& res) const {
        json data = json::array();
        for (const ServedModel& m : served_models(options.models_dir, host.loaded_model()))
            data.push_back({{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "kvchat"}});
        res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
    }

    void health(httplib::Response& res) const {
        const std::string loaded = host.loaded_model();
        res.set_content(dump({{"status", "ok"},
                              {"model", loaded.empty() ? json(nullptr) : json(model_id(loaded))},
                              {"requests", queue.admitted()},
                              {"max_queue", queue.max_waiting()}}),
                        "application/json");
    }

    // Auth and origin, before anything is read or routed.
    httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res) {
        t_log = RequestLog{};
        if (req.has_header("Origin")) {
            const std::string origin = req.get_header_value("Origin");
            if (options.cors_origin.empty() || origin != options.cors_origin) {
                send_error(res, ApiError(403, "requests from web pages (origin '" + origin +
                                                  "') are refused; start the server with --cors ORIGIN to allow one",
                                         "invalid_request_error", {}, "origin_not_allowed"));
                return httplib::Server::HandlerResponse::Handled;
            }
            res.set_header("Access-Control-Allow-Origin", origin);
            res.set_header("Vary", "Origin");
            if (req.method == "OPTIONS") {
                res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
                res.set_header("Access-Control-Max-Age", "600");
                res.status = 204;
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        if (!options.api_key.empty() && req.path != "/health") {
            const std::string expected = "Bearer " + options.api_key;
            const std::string given = req.get_header_value("Authorization");
            // Compared in constant time: the time taken says nothing about the key.
            unsigned diff = given.size() != expected.size();
            for (size_t i = 0; i < expected.size(); ++i)
                diff |= static_cast<unsigned char>(expected[i]) ^
                        static_cast<unsigned char>(i < given.size() ? given[i] : 0);
            if (diff) {
                res.set_header("WWW-Authenticate", "Bearer");
                send_error(res, ApiError(401,
                                         given.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                       : "incorrect API key provided",
                                         "invalid_request_error", {}, "invalid_api_key"));
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    }

    // Any handler's failure, as an error object.
    template <class F>
    httplib::Server::Handler guarded(F f) {
        return [this, f](const httplib::Request& req, httplib::Response& res) {
            try {
                f(req, res);
            } catch (const ApiError& e) {
                send_error(res, e);
            } catch (const std::bad_alloc&) {
                send_error(res, ApiError(500, "out of memory", "server_error"));
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, e.what(), "server_error"));
            }
        };
    }
};

ApiServer::ApiServer(SessionHost& host, ServerOptions options)
    : options_(std::move(options)) {
    if (options_.max_queue < 0) options_.max_queue = 0;
    state_ = std::make_unique<State>(host, options_);
    State& s = *state_;
    httplib::Server& http = s.http;
    // Waiting requests hold a thread each: enough threads for the queue and a few more for
    // /health, /v1/models and the 503s.
    const size_t threads = static_cast<size_t>(options_.max_queue) + 5;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_payload_max_length(options_.max_body_bytes);
    http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) { return s.admit(req, res); });
    http.Get("/health", s.guarded([&s](const httplib::Request&, httplib::Response& res) { s.health(res); }));
    http.Get("/v1/models", s.guarded([&s](const httplib::Request&, httplib::Response& res) { s.models(res); }));
    http.Post("/v1/chat/completions", s.guarded([&s](const httplib::Request& req, httplib::Response& res) {
        s.chat_completions(req, res);
    }));
    http.Post("/v1/completions",
              s.guarded([&s](const httplib::Request& req, httplib::Response& res) { s.completions(req, res); }));
    // Statuses httplib sets itself (413 over the body limit, 404 no such path, 400 a bad request
    // line) get an error object too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        switch (res.status) {
            case 404: message = "unknown path " + req.method + " " + req.path; break;
            case 413: message = "the request body is over the server's limit"; break;
            default: message = "the request could not be read (HTTP " + std::to_string(res.status) + ")";
        }
        send_error(res, ApiError(res.status, message, "invalid_request_error"));
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_log.start).count();
        char line[512];
        std::snprintf(line, sizeof line, "%s %s %d", req.method.c_str(), req.path.substr(0, 200).c_str(), res.status);
        std::string out = line;
        if (t_log.prompt_tokens >= 0)
            out += " prompt_tokens=" + std::to_string(t_log.prompt_tokens) + " cached_tokens=" +
                   std::to_string(t_log.cached_tokens) + " completion_tokens=" + std::to_string(t_log.completion_tokens);
        std::snprintf(line, sizeof line, " %.1f ms", ms);
        out += line;
        out += t_log.text;
        s.log_line(out);
    });
}

ApiServer::~ApiServer() { stop(); }

int ApiServer::bind() {
    if (!is_loopback_host(options_.host) && options_.api_key.empty())
        throw Error("serving on " + options_.host +
                    " (not this machine's loopback address) needs --api-key KEY: anyone who can reach the address "
                    "could otherwise use the models and read the conversations");
    if (options_.port < 0 || options_.port > 65535) throw Error("--port must be between 0 and 65535");
    if (options_.port == 0) {
        port_ = state_->http.bind_to_any_port(options_.host);
        if (port_ <= 0) throw Error("cannot listen on " + options_.host + " (no free port, or not an address of this machine)");
    } else {
        if (!state_->http.bind_to_port(options_.host, options_.port))
            throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                        " (in use by another program, or not an address of this machine)");
        port_ = options_.port;
    }
    return port_;
}

void ApiServer::listen() { state_->http.listen_after_bind(); }

void ApiServer::stop() {
    state_->stopping.store(true);
    state_->http.stop();
}

}  // namespace kvchat::api
