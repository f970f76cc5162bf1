#include "ui/worker_session_host.h"

#include "engine/api/api_error.h"

#include <QMetaObject>
#include <QObject>

#include <exception>
#include <memory>

namespace kvchat {

namespace {
// One job handed to the worker, and how it ended.
struct Handoff {
    bool done = false;
    bool skipped = false;  // abandoned before it ran: it never will
    std::exception_ptr error;
};

api::ApiError stopping() {
    return api::ApiError(503, "the app is stopping its API server", "server_error", {}, "server_stopping");
}
}  // namespace

void WorkerSessionHost::run(const std::string& model_path, const std::function<void(api::HostedSession&)>& job) {
    auto h = std::make_shared<Handoff>();
    {
        std::lock_guard<std::mutex> lock(m_);
        if (abandoned_) throw stopping();
    }
    QMetaObject::invokeMethod(
        &worker_,
        [this, h, model_path, job] {
            {
                std::lock_guard<std::mutex> lock(m_);
                if (abandoned_) return;  // its requester was answered already
            }
            try {
                runner_(model_path, job);
            } catch (...) {
                h->error = std::current_exception();
            }
            {
                std::lock_guard<std::mutex> lock(m_);
                h->done = true;
            }
            cv_.notify_all();
        },
        Qt::QueuedConnection);
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return h->done || abandoned_; });
    if (!h->done) throw stopping();
    if (h->error) std::rethrow_exception(h->error);
}

std::string WorkerSessionHost::loaded_model() const {
    std::lock_guard<std::mutex> lock(m_);
    return loaded_;
}

void WorkerSessionHost::set_loaded_model(const std::string& path) {
    std::lock_guard<std::mutex> lock(m_);
    loaded_ = path;
}

void WorkerSessionHost::abandon() {
    {
        std::lock_guard<std::mutex> lock(m_);
        abandoned_ = true;
    }
    cv_.notify_all();
}

}  // namespace kvchat
