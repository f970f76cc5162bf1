#pragma once
// What the API server computes with: the chat session of the loaded model, reached through a
// host that decides on which thread it runs. kvchat-cli serve holds its own (LocalSessionHost);
// the desktop app's host hands each job to the worker thread that owns the window's session, so
// the window and the server never compute at the same time.
#include "engine/chat/chat_session.h"
#include "engine/chat/chat_settings.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvchat::api {

// What a job gets: the session and what it was made of.
struct HostedSession {
    ChatSession& session;
    const Model& model;
    Backend& backend;
    const ChatSettings& settings;
};

class SessionHost {
public:
    virtual ~SessionHost() = default;
    // Runs `job` with the session of the model at `model_path` (empty: the one loaded now),
    // loading that model first when another one is loaded (one model in memory at a time).
    // The server calls it one job at a time. Throws what loading or the job throws.
    virtual void run(const std::string& model_path, const std::function<void(HostedSession&)>& job) = 0;
    // The path of the loaded model ("" when none); callable from any thread.
    virtual std::string loaded_model() const = 0;
};

// kvchat-cli serve's host: the store, the settings and a backend it was given, and the model it
// loads itself. Jobs run on the calling thread.
class LocalSessionHost : public SessionHost {
public:
    LocalSessionHost(Store& store, ChatSettings settings, std::unique_ptr<Backend> backend,
                     std::unique_ptr<Model> model);
    ~LocalSessionHost() override;
    void run(const std::string& model_path, const std::function<void(HostedSession&)>& job) override;
    std::string loaded_model() const override;

private:
    Store& store_;
    ChatSettings settings_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<ChatSession> session_;
    mutable std::mutex path_mutex_;
    std::string path_;
};

// A model a client may name: its id (the file name without .gguf) and its path.
struct ServedModel {
    std::string id;
    std::string path;
    int64_t created = 0;  // the file's modification time (seconds since the epoch)
};
// The GGUF files in `models_dir` (the folder packaging/kvchat.sh model installs into), then
// `loaded` when it is not one of them; by id.
std::vector<ServedModel> served_models(const std::string& models_dir, const std::string& loaded);
// The id a model file is named by.
std::string model_id(const std::string& path);

}  // namespace kvchat::api
