// kvchat-cli serve driven over raw HTTP (cpp-httplib's client), as any OpenAI client would reach
// it: every kind of bad input gets its status and an OpenAI error object (and the server lives
// on), the key and origin checks, a full queue's 503, a client that goes away mid-stream, a server
// killed mid-request, and concurrent clients answered one after another. The chat model
// (SmolLM2), greedy, short answers.
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/test_paths.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <QDir>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <thread>

using namespace kvchat;
using nlohmann::json;

namespace {

// One `kvchat-cli serve` on a free port (--port 0; it prints the port it bound).
class Server {
public:
    ~Server() { stop(); }

    // Empty when it started; else what went wrong (with its stderr).
    QString start(const QStringList& extra) {
        p_ = std::make_unique<QProcess>();
        err_.clear();  // a restart must not read the last run's port
        port_ = 0;
        QStringList args = {"serve", "--port", "0", "--threads", "2", "--model",
                            QString::fromStdString(installed_model_path(kChatModelFile))};
        args += extra;
        p_->setReadChannel(QProcess::StandardError);
        p_->start(QString::fromUtf8(test::cli_path()), args);
        if (!p_->waitForStarted(10000)) return "kvchat-cli did not start";
        static const QRegularExpression bound("http://[^:]+:(\\d+)/v1");
        for (int i = 0; i < 1200; ++i) {  // up to 120 s on a busy machine
            p_->waitForReadyRead(100);
            err_ += QString::fromUtf8(p_->readAllStandardError());
            const auto m = bound.match(err_);
            if (m.hasMatch()) {
                port_ = m.captured(1).toInt();
                return {};
            }
            if (p_->state() == QProcess::NotRunning) break;
        }
        err_ += QString::fromUtf8(p_->readAllStandardError());
        return "the server did not report its port: " + err_;
    }
    void stop() {
        if (!p_) return;
        if (p_->state() != QProcess::NotRunning) {
            test::signal_child(p_->processId(), SIGTERM);
            if (!p_->waitForFinished(60000)) {
                p_->kill();
                p_->waitForFinished();
            }
        }
        err_ += QString::fromUtf8(p_->readAllStandardError());
        p_.reset();
    }
    void kill9() {
        if (!p_) return;
        test::signal_child(p_->processId(), SIGKILL);
        p_->waitForFinished();
        p_.reset();
    }
    // What it printed so far (the log line of a request is written when its response is).
    QString log() {
        if (p_) {
            do err_ += QString::fromUtf8(p_->readAllStandardError());
            while (p_->waitForReadyRead(300));
        }
        return err_;
    }
    int port() const { return port_; }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(600, 0);
        c.set_write_timeout(60, 0);
        return c;
    }

private:
    std::unique_ptr<QProcess> p_;
    QString err_;
    int port_ = 0;
};

json user_chat(const std::string& text, int max_tokens, bool stream = false) {
    return {{"messages", json::array({{{"role", "user"}, {"content", text}}})},
            {"temperature", 0},
            {"max_tokens", max_tokens},
            {"stream", stream}};
}

// Parses an error response and checks its shape: {"error": {"message", "type", "param", "code"}}.
bool is_error_object(const std::string& body, std::string* message = nullptr, std::string* code = nullptr,
                     std::string* param = nullptr) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("error") || !j["error"].is_object()) return false;
    const json& e = j["error"];
    for (const char* k : {"message", "type", "param", "code"})
        if (!e.contains(k)) return false;
    if (!e["message"].is_string() || e["message"].get<std::string>().empty() || !e["type"].is_string()) return false;
    if (message) *message = e["message"].get<std::string>();
    if (code) *code = e["code"].is_string() ? e["code"].get<std::string>() : "";
    if (param) *param = e["param"].is_string() ? e["param"].get<std::string>() : "";
    return true;
}

// A streamed chat completion read event by event; `on_content` sees each piece and may return
// false to hang up.
struct Streamed {
    int status = 0;
    std::string text;
    int pieces = 0;
    bool done = false;  // [DONE] arrived
    httplib::Error error = httplib::Error::Success;
};

Streamed stream_chat(const Server& s, const json& body, const std::function<bool(const std::string&)>& on_content = {}) {
    httplib::Client c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    Streamed out;
    std::string pending;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        pending.append(data, n);
        size_t end;
        while ((end = pending.find("\n\n")) != std::string::npos) {
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string data_text = event.substr(6);
            if (data_text == "[DONE]") {
                out.done = true;
                continue;
            }
            const json j = json::parse(data_text, nullptr, false);
            if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
            const json& delta = j["choices"][0]["delta"];
            if (!delta.contains("content") || delta["content"].get<std::string>().empty()) continue;
            const std::string piece = delta["content"].get<std::string>();
            out.text += piece;
            ++out.pieces;
            if (on_content && !on_content(piece)) return false;
        }
        return true;
    };
    httplib::Response res;
    c.send(req, res, out.error);
    out.status = res.status;
    return out;
}

// Joins a client thread when a check fails half-way (a joinable std::thread would abort), first
// telling it to hang up.
struct JoinOnExit {
    std::thread& t;
    std::atomic<bool>* hang_up = nullptr;
    ~JoinOnExit() {
        if (hang_up) hang_up->store(true);
        if (t.joinable()) t.join();
    }
};

// The status of a response; -1 when none came (the server is gone).
int status_of(const httplib::Result& r) { return r ? r->status : -1; }

// The requests admitted now (computing and waiting), from /health.
int admitted(const Server& s) {
    auto r = s.client().Get("/health");
    if (!r || r->status != 200) return -1;
    return json::parse(r->body)["requests"].get<int>();
}

bool wait_until(const std::function<bool()>& condition, int timeout_ms = 300000) {
    QElapsedTimer t;
    t.start();
    while (!condition()) {
        if (t.elapsed() > timeout_ms) return false;
        QThread::msleep(20);
    }
    return true;
}

std::vector<MessageRecord> all_messages(const QString& db) {
    Store store(db.toStdString(), Store::Access::ReadOnly);
    std::vector<MessageRecord> out;
    for (const ConversationOverview& c : store.list_conversation_overviews()) {
        auto m = store.list_messages(c.conversation.id);
        out.insert(out.end(), m.begin(), m.end());
    }
    std::sort(out.begin(), out.end(), [](const MessageRecord& a, const MessageRecord& b) { return a.id < b.id; });
    return out;
}

}  // namespace

class TestApiServer : public QObject {
    Q_OBJECT

    QTemporaryDir dir_;
    Server server_;  // the shared one: default options, --max-queue 1
    QString db() const { return dir_.filePath("api.sqlite"); }

private slots:
    void initTestCase() {
        if (!std::filesystem::exists(installed_model_path(kChatModelFile)))
            QSKIP("the chat model is not installed (packaging/kvchat.sh model)");
        QVERIFY(dir_.isValid());
        const QString problem = server_.start({"--db", db(), "--max-queue", "1"});
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
    }

    void badInput_data() {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QByteArray>("body");
        QTest::addColumn<int>("status");
        QTest::addColumn<QString>("param");   // the field the error names ("" for none)
        QTest::addColumn<QString>("words");   // words the message must hold
        const QByteArray chat = "/v1/chat/completions";
        QTest::newRow("malformed JSON") << QString(chat) << QByteArray("{\"messages\": [") << 400 << "" << "not valid JSON";
        QTest::newRow("not an object") << QString(chat) << QByteArray("[1,2]") << 400 << "" << "JSON object";
        QTest::newRow("deep nesting") << QString(chat) << QByteArray(100000, '[') << 400 << "" << "deeper";
        QTest::newRow("messages missing") << QString(chat) << QByteArray("{}") << 400 << "messages" << "missing";
        QTest::newRow("messages a string") << QString(chat) << QByteArray(R"({"messages":"hi"})") << 400 << "messages"
                                           << "must be an array";
        QTest::newRow("empty messages") << QString(chat) << QByteArray(R"({"messages":[]})") << 400 << "messages" << "empty";
        QTest::newRow("unknown role") << QString(chat)
                                      << QByteArray(R"({"messages":[{"role":"wizard","content":"hi"}]})") << 400
                                      << "messages[0].role" << "wizard";
        QTest::newRow("role a number") << QString(chat) << QByteArray(R"({"messages":[{"role":1,"content":"hi"}]})")
                                       << 400 << "messages[0].role" << "must be a string";
        QTest::newRow("content a number") << QString(chat) << QByteArray(R"({"messages":[{"role":"user","content":5}]})")
                                          << 400 << "messages[0].content" << "string";
        QTest::newRow("image part") << QString(chat)
                                    << QByteArray(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})")
                                    << 400 << "messages[0].content[0].type" << "only text";
        QTest::newRow("last message not the user's")
            << QString(chat) << QByteArray(R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})")
            << 400 << "messages" << "last message";
        QTest::newRow("blank message") << QString(chat) << QByteArray(R"({"messages":[{"role":"user","content":"  \n "}]})")
                                       << 400 << "messages" << "empty";
        const QByteArray hi = R"("messages":[{"role":"user","content":"hi"}])";
        QTest::newRow("temperature a string") << QString(chat) << "{" + hi + R"(,"temperature":"hot"})" << 400
                                              << "temperature" << "must be a number";
        QTest::newRow("temperature out of range") << QString(chat) << "{" + hi + R"(,"temperature":7})" << 400
                                                  << "temperature" << "between";
        QTest::newRow("stream not a boolean") << QString(chat) << "{" + hi + R"(,"stream":"yes"})" << 400 << "stream"
                                              << "boolean";
        QTest::newRow("max_tokens zero") << QString(chat) << "{" + hi + R"(,"max_tokens":0})" << 400 << "max_tokens"
                                         << "between";
        QTest::newRow("max_tokens fractional") << QString(chat) << "{" + hi + R"(,"max_tokens":1.5})" << 400
                                               << "max_tokens" << "integer";
        QTest::newRow("n = 2") << QString(chat) << "{" + hi + R"(,"n":2})" << 400 << "n" << "must be 1";
        QTest::newRow("presence penalty") << QString(chat) << "{" + hi + R"(,"presence_penalty":0.5})" << 400
                                          << "presence_penalty" << "repetition_penalty";
        // A client asking for JSON must not get free text it takes for JSON.
        QTest::newRow("json response format") << QString(chat) << "{" + hi + R"(,"response_format":{"type":"json_object"}})"
                                              << 400 << "response_format" << "json_object";
        QTest::newRow("json schema response format")
            << QString(chat) << "{" + hi + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}})"
            << 400 << "response_format" << "not constrained to JSON";
        QTest::newRow("response format without a type") << QString(chat) << "{" + hi + R"(,"response_format":{}})" << 400
                                                        << "response_format.type" << "must be a string";
        QTest::newRow("stop a number") << QString(chat) << "{" + hi + R"(,"stop":3})" << 400 << "stop" << "string";
        QTest::newRow("bad cache spec") << QString(chat) << "{" + hi + R"(,"cache":"wobbly"})" << 400 << "cache"
                                        << "cache strategy";
        QTest::newRow("unknown model") << QString(chat) << "{" + hi + R"(,"model":"gpt-17"})" << 404 << "model"
                                       << "gpt-17";
        QTest::newRow("completion without prompt") << "/v1/completions" << QByteArray(R"({"max_tokens":3})") << 400
                                                   << "prompt" << "missing";
        QTest::newRow("completion prompt of ids") << "/v1/completions" << QByteArray(R"({"prompt":[1,2,3]})") << 400
                                                  << "prompt" << "string";
        // SmolLM2's context is 8192 tokens: a prompt of ~20,000 tokens is over it.
        std::string longtext;
        for (int i = 0; i < 20000; ++i) longtext += "cat ";
        QTest::newRow("prompt over the context")
            << QString(chat) << QByteArray::fromStdString(user_chat(longtext, 4).dump()) << 400 << "messages" << "8192";
        QTest::newRow("completion over the context")
            << "/v1/completions" << QByteArray::fromStdString(json{{"prompt", longtext}}.dump()) << 400 << "prompt"
            << "8192";
        // The body limit is 4 MiB by default.
        QTest::newRow("body over the limit") << QString(chat) << QByteArray(5 << 20, ' ') << 413 << "" << "limit";
        QTest::newRow("unknown path") << "/v1/embeddings" << QByteArray("{}") << 404 << "" << "unknown path";
    }
    void badInput() {
        QFETCH(QString, path);
        QFETCH(QByteArray, body);
        QFETCH(int, status);
        QFETCH(QString, param);
        QFETCH(QString, words);
        auto r = server_.client().Post(path.toStdString(), body.toStdString(), "application/json");
        QVERIFY2(r, httplib::to_string(r.error()).c_str());
        std::string message, code, got_param;
        QVERIFY2(is_error_object(r->body, &message, &code, &got_param), r->body.substr(0, 300).c_str());
        QCOMPARE(status_of(r), status);
        QCOMPARE(QString::fromStdString(got_param), param);
        QVERIFY2(QString::fromStdString(message).contains(words), message.c_str());
        if (QString(QTest::currentDataTag()) == "unknown model") QCOMPARE(code, std::string("model_not_found"));
        if (QString(QTest::currentDataTag()).contains("over the context")) {
            // Both sizes: the prompt's and the context's.
            QVERIFY2(QRegularExpression("\\d{5} tokens").match(QString::fromStdString(message)).hasMatch(), message.c_str());
            QCOMPARE(code, std::string("context_length_exceeded"));
        }
        // Still serving.
        QCOMPARE(status_of(server_.client().Get("/health")), 200);
    }

    // The log names requests and token counts, never the text.
    void logHoldsNoText() {
        const std::string secret = "zebra-marmalade-quartz";
        auto r = server_.client().Post("/v1/chat/completions", user_chat("Repeat: " + secret, 3).dump(), "application/json");
        QVERIFY(r);
        QCOMPARE(status_of(r), 200);
        const QString log = server_.log();
        QVERIFY2(log.contains("POST /v1/chat/completions 200 prompt_tokens="), qPrintable(log));
        QVERIFY(!log.contains(QString::fromStdString(secret)));
    }

    void authAndOrigin() {
        Server keyed;
        const QString problem = keyed.start({"--db", dir_.filePath("keyed.sqlite"), "--api-key", "s3cret"});
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        auto c = keyed.client();
        auto none = c.Get("/v1/models");
        QVERIFY(none);
        QCOMPARE(status_of(none), 401);
        std::string code;
        QVERIFY(is_error_object(none->body, nullptr, &code));
        QCOMPARE(code, std::string("invalid_api_key"));
        auto wrong = c.Get("/v1/models", {{"Authorization", "Bearer s3cres"}});
        QCOMPARE(status_of(wrong), 401);
        auto longer = c.Get("/v1/models", {{"Authorization", "Bearer s3cret-and-more"}});
        QCOMPARE(status_of(longer), 401);
        auto chat = c.Post("/v1/chat/completions", user_chat("hi", 2).dump(), "application/json");
        QCOMPARE(status_of(chat), 401);
        auto right = c.Get("/v1/models", {{"Authorization", "Bearer s3cret"}});
        QCOMPARE(status_of(right), 200);
        QVERIFY(json::parse(right->body)["data"].size() >= 1);
        // A web page's request (it carries an Origin) is refused without --cors, key or not.
        auto page = c.Get("/v1/models", {{"Authorization", "Bearer s3cret"}, {"Origin", "http://example.com"}});
        QCOMPARE(status_of(page), 403);
        QVERIFY(!page->has_header("Access-Control-Allow-Origin"));
        QVERIFY(!right->has_header("Access-Control-Allow-Origin"));
        keyed.stop();

        // Any address but loopback needs a key: refused before anything starts.
        QProcess open;
        open.start(QString::fromUtf8(test::cli_path()),
                   {"serve", "--host", "0.0.0.0", "--port", "0", "--db", dir_.filePath("open.sqlite")});
        QVERIFY(open.waitForFinished(60000));
        QCOMPARE(open.exitCode(), 2);
        QVERIFY2(QString::fromUtf8(open.readAllStandardError()).contains("--api-key"), "no mention of --api-key");

        // --cors ORIGIN allows that origin alone.
        Server cors;
        QVERIFY(cors.start({"--db", dir_.filePath("cors.sqlite"), "--cors", "http://localhost:3000"}).isEmpty());
        auto allowed = cors.client().Get("/health", {{"Origin", "http://localhost:3000"}});
        QCOMPARE(status_of(allowed), 200);
        QCOMPARE(allowed->get_header_value("Access-Control-Allow-Origin"), std::string("http://localhost:3000"));
        auto other = cors.client().Get("/health", {{"Origin", "http://localhost:3001"}});
        QCOMPARE(status_of(other), 403);
    }

    // One computes, --max-queue (1) waits, the next is turned away with 503 and Retry-After.
    void fullQueue() {
        std::atomic<bool> first_streaming{false};
        std::atomic<bool> release{false};
        std::thread first([&] {
            stream_chat(server_, user_chat("Write a long story about a lighthouse keeper.", 200, true),
                        [&](const std::string&) {
                            first_streaming = true;
                            return !release.load();  // hang up when told: the test need not wait for 200 tokens
                        });
        });
        JoinOnExit join_first{first, &release};
        QVERIFY(wait_until([&] { return first_streaming.load(); }));
        int second_status = 0;
        std::thread second([&] {
            auto r = server_.client().Post("/v1/chat/completions", user_chat("Say yes.", 2).dump(), "application/json");
            second_status = r ? r->status : -1;
        });
        JoinOnExit join_second{second};
        QVERIFY(wait_until([&] { return admitted(server_) == 2; }));
        auto third = server_.client().Post("/v1/chat/completions", user_chat("Say no.", 2).dump(), "application/json");
        QVERIFY(third);
        QCOMPARE(status_of(third), 503);
        QVERIFY(third->has_header("Retry-After"));
        QVERIFY(third->get_header_value("Retry-After").find_first_not_of("0123456789") == std::string::npos);
        std::string code;
        QVERIFY(is_error_object(third->body, nullptr, &code));
        release = true;
        first.join();
        second.join();
        QCOMPARE(second_status, 200);  // the one that waited was answered
    }

    // A client that hangs up mid-stream: the answer stops and what was generated is stored.
    void disconnectStoresStoppedAnswer() {
        const std::string question = "Write a long story about a dragon who learns to bake bread.";
        // The whole answer is longer than 60 tokens (so a stored answer of a few tokens was stopped).
        auto full = server_.client().Post("/v1/chat/completions", user_chat(question, 60).dump(), "application/json");
        QVERIFY(full);
        QCOMPARE(status_of(full), 200);
        QCOMPARE(json::parse(full->body)["choices"][0]["finish_reason"].get<std::string>(), std::string("length"));

        Streamed s = stream_chat(server_, user_chat(question, 400, true),
                                 [n = 0](const std::string&) mutable { return ++n < 3; });
        QCOMPARE(s.pieces, 3);
        QVERIFY(!s.done);
        QVERIFY(wait_until([&] { return admitted(server_) == 0; }));
        const std::vector<MessageRecord> all = all_messages(db());
        QVERIFY(!all.empty());
        const MessageRecord& last = all.back();
        QCOMPARE(last.role, Role::Assistant);
        // What the client saw is the start of what was kept, and generation stopped right after
        // the write failed (socket buffers may take a few more pieces before the failure shows).
        QVERIFY2(last.content.rfind(s.text, 0) == 0, last.content.c_str());
        QVERIFY2(last.stats.generated_tokens >= 3 && last.stats.generated_tokens <= 3 + 8,
                 qPrintable(QString::number(last.stats.generated_tokens)));
        QVERIFY(server_.log().contains("POST /v1/chat/completions 200"));
    }

    // Three clients at once: each stream arrives whole, one after the other, never interleaved.
    void concurrentClientsInTurn() {
        std::mutex m;
        std::vector<int> order;  // the client of each piece, in arrival order
        std::vector<Streamed> results(3);
        std::vector<std::thread> clients;
        for (int i = 0; i < 3; ++i)
            clients.emplace_back([&, i] {
                const char* topics[] = {"the sea", "a mountain", "a city"};
                results[static_cast<size_t>(i)] =
                    stream_chat(server_, user_chat(std::string("Describe ") + topics[i] + " in two sentences.", 24, true),
                                [&, i](const std::string&) {
                                    std::lock_guard<std::mutex> lock(m);
                                    order.push_back(i);
                                    return true;
                                });
            });
        for (std::thread& t : clients) t.join();
        int served = 0;
        for (const Streamed& r : results) {
            if (r.status == 503) continue;  // --max-queue 1: one of three may be turned away
            QCOMPARE(r.status, 200);
            QVERIFY(r.done);
            ++served;
        }
        QVERIFY(served >= 2);
        // Contiguous runs: once a client's pieces stop, that client never appears again.
        std::vector<int> seen;
        for (size_t k = 0; k < order.size(); ++k)
            if (k == 0 || order[k] != order[k - 1]) {
                QVERIFY2(std::find(seen.begin(), seen.end(), order[k]) == seen.end(), "streams interleaved");
                seen.push_back(order[k]);
            }
        QCOMPARE(static_cast<int>(seen.size()), served);
    }

    // A request naming another installed model loads it in place of the loaded one; the next
    // naming the first brings it back (one model in memory at a time).
    void requestLoadsAnotherModel() {
        if (!std::filesystem::exists(installed_model_path(kDefaultModelFile)))
            QSKIP("the default model (Gemma 3) is not installed (packaging/kvchat.sh model)");
        const std::string gemma = "gemma-3-270m-q4_k_m", smol = "smollm2-135m-instruct-q4_1";
        auto listed = server_.client().Get("/v1/models");
        QCOMPARE(status_of(listed), 200);
        std::vector<std::string> ids;
        const json models = json::parse(listed->body);
        for (const json& m : models["data"]) ids.push_back(m["id"].get<std::string>());
        QVERIFY2(std::find(ids.begin(), ids.end(), gemma) != ids.end(), listed->body.c_str());
        QVERIFY(std::find(ids.begin(), ids.end(), smol) != ids.end());
        auto health = [&] { return json::parse(server_.client().Get("/health")->body)["model"].get<std::string>(); };
        QCOMPARE(health(), smol);
        auto raw = server_.client().Post(
            "/v1/completions", json{{"model", gemma}, {"prompt", "The capital of France is"}, {"max_tokens", 3}}.dump(),
            "application/json");
        QCOMPARE(status_of(raw), 200);
        QCOMPARE(json::parse(raw->body)["model"].get<std::string>(), gemma);
        QCOMPARE(health(), gemma);
        json back = user_chat("Say hello.", 3);
        back["model"] = smol;
        auto chat = server_.client().Post("/v1/chat/completions", back.dump(), "application/json");
        QCOMPARE(status_of(chat), 200);
        QCOMPARE(json::parse(chat->body)["model"].get<std::string>(), smol);
        QCOMPARE(health(), smol);
    }

    // kill -9 while an answer streams: every message stored before is intact, and the server
    // starts again on the same database and answers.
    void killNineLosesNothing() {
        auto before_r = server_.client().Post("/v1/chat/completions", user_chat("Name a colour.", 4).dump(), "application/json");
        QVERIFY2(before_r, qPrintable(QString::fromStdString(httplib::to_string(before_r.error())) + server_.log()));
        QCOMPARE(status_of(before_r), 200);
        const std::vector<MessageRecord> before = all_messages(db());
        QVERIFY(before.size() >= 2);
        std::atomic<bool> streaming{false};
        std::thread client([&] {
            stream_chat(server_, user_chat("Write a long poem about autumn leaves.", 400, true), [&](const std::string&) {
                streaming = true;
                return true;
            });
        });
        JoinOnExit join_client{client};
        QVERIFY(wait_until([&] { return streaming.load(); }));
        server_.kill9();
        client.join();
        const std::vector<MessageRecord> after = all_messages(db());
        QVERIFY(after.size() >= before.size());
        for (size_t i = 0; i < before.size(); ++i) {
            QCOMPARE(after[i].id, before[i].id);
            QCOMPARE(after[i].content, before[i].content);
            QCOMPARE(after[i].role, before[i].role);
        }
        // The killed request's question was stored before its answer began.
        bool question_kept = false;
        for (const MessageRecord& m : after)
            question_kept |= m.content == "Write a long poem about autumn leaves." && m.role == Role::User;
        QVERIFY(question_kept);
        const QString problem = server_.start({"--db", db(), "--max-queue", "1"});
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        auto again = server_.client().Post("/v1/chat/completions", user_chat("Name a fruit.", 4).dump(), "application/json");
        QVERIFY(again);
        QCOMPARE(status_of(again), 200);
    }
};

QTEST_GUILESS_MAIN(TestApiServer)
#include "test_api_server.moc"
