#pragma once
// What the conversation suites share: the small six-layer Gemma-shaped model they chat with
// (sliding window 8, so checkpoints and windows come into play within a few turns) and the set-up
// around it, greedy turn options, a conversation left answered by an earlier session, and reading
// the message of what a call throws.
#include "engine/chat/chat_session.h"
#include "engine/chat/conversation.h"
#include "engine/compute/backend.h"
#include "engine/store/store.h"
#include "engine/model/model.h"
#include "support/tiny_model.h"

#include <QTemporaryDir>

#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace kvchat::test {

// Writes the model as dir/m.gguf and returns its path.
inline std::string write_chat_model(const QTemporaryDir& dir) {
    const std::string path = (dir.path() + "/m.gguf").toStdString();
    write_tiny_gguf(chat_sized_spec(), path);
    return path;
}

inline std::unique_ptr<Model> chat_model(const QTemporaryDir& dir) { return Model::load(write_chat_model(dir)); }

// A temporary folder with the chat model loaded, a two-thread CPU backend and a database path
// in the folder: what the session suites start each case from.
struct ChatSetup {
    QTemporaryDir dir;
    std::unique_ptr<Model> m = chat_model(dir);
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    std::string db = (dir.path() + "/kv.db").toStdString();
};

inline TurnOptions greedy(int n) {
    TurnOptions o;
    o.generation.max_new_tokens = n;
    o.generation.sampling.greedy = true;
    return o;
}

// A new conversation `title` in the database `db`, with `message` answered (greedy, at most n
// tokens) by a session that has closed again, as an earlier run of a program leaves it; `then`
// changes the store before that session closes. Returns the conversation's id.
inline int64_t conversation_answered_once(const std::string& db, const Model& model, Backend& backend,
                                          const std::string& title, const std::string& message, int n,
                                          const std::function<void(Store&, int64_t)>& then = {}) {
    Store store(db);
    ChatSession session(store, model, backend);
    const int64_t id = session.create(title);
    session.send(id, message, greedy(n));
    if (then) then(store, id);
    return id;
}

// The message of what f throws; empty when it returns.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace kvchat::test
