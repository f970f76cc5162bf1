// EngineWorker's local API server: kvchat-cli serve's server (engine/api) over the window's own
// session, its jobs run on this worker's thread (ui/worker_session_host.h).
#include "ui/engine_worker.h"

#include "engine/api/api_server.h"
#include "engine/chat/chat_session.h"
#include "engine/chat/chat_settings.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"
#include "ui/worker_session_host.h"

namespace kvchat {

void EngineWorker::setApiServer(bool on, int port) {
    stopApiServer();
    if (!on) {
        Q_EMIT apiServerChanged(tr("API off"), false);
        return;
    }
    api::ServerOptions o;
    o.host = "127.0.0.1";  // the app serves this machine only
    o.port = port;
    o.models_dir = data_dir() + "/models";
    auto host = std::make_unique<WorkerSessionHost>(
        *this, [this](const std::string& path, const std::function<void(api::HostedSession&)>& job) {
            runApiJob(path, job);
        });
    if (model_) host->set_loaded_model(model_->path());
    auto server = std::make_unique<api::ApiServer>(*host, o);
    try {
        server->bind();
    } catch (const std::exception& e) {
        Q_EMIT apiServerChanged(tr("API not serving: %1").arg(QString::fromUtf8(e.what())), false);
        return;
    }
    apiHost_ = std::move(host);
    apiServer_ = std::move(server);
    api::ApiServer* s = apiServer_.get();
    apiThread_ = std::thread([s] { s->listen(); });
    Q_EMIT apiServerChanged(tr("API: http://127.0.0.1:%1/v1").arg(apiServer_->port()), true);
}

void EngineWorker::stopApiServer() {
    if (!apiServer_) return;
    // Requests waiting for this thread are answered first, so the server's threads can end.
    apiHost_->abandon();
    apiServer_->stop();
    if (apiThread_.joinable()) apiThread_.join();
    apiServer_.reset();
    apiHost_.reset();
}

void EngineWorker::runApiJob(const std::string& model_path, const std::function<void(api::HostedSession&)>& job) {
    if (!model_path.empty() && (!model_ || model_->path() != model_path)) {
        // One model in memory: the one the request names replaces the window's (the window is told
        // by the usual signals).
        loadModel(QString::fromStdString(model_path));
        if (!model_ || model_->path() != model_path) throw Error("the model " + model_path + " could not be loaded");
    }
    if (!model_ || !session_ || !backend_) throw Error("the app has no model loaded yet");
    api::HostedSession h{*session_, *model_, *backend_, *settings_};
    job(h);
    // Conversations the request made or changed show in the window's list.
    Q_EMIT conversationsChanged(conversationItems());
}

}  // namespace kvchat
