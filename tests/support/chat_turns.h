#pragma once
// What the conversation suites share: the small six-layer Gemma-shaped model they chat with
// (sliding window 8, so checkpoints and windows come into play within a few turns), greedy turn
// options, and reading the message of what a call throws.
#include "engine/chat/conversation.h"
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

inline TurnOptions greedy(int n) {
    TurnOptions o;
    o.generation.max_new_tokens = n;
    o.generation.sampling.greedy = true;
    return o;
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
