#pragma once
// The API server's way into the window's engine: each job runs on the EngineWorker's thread, with
// the session the window uses, queued behind whatever the window asked for; one job at a time, so
// the window and the server never compute together. The server's thread waits for its job.
#include "engine/api/session_host.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

class QObject;

namespace kvchat {

class WorkerSessionHost : public api::SessionHost {
public:
    // What runs a job on the worker's thread (EngineWorker::runApiJob).
    using JobRunner = std::function<void(const std::string& model_path, const std::function<void(api::HostedSession&)>& job)>;
    // `worker`: the object whose thread runs the jobs.
    WorkerSessionHost(QObject& worker, JobRunner runner) : worker_(worker), runner_(std::move(runner)) {}
    void run(const std::string& model_path, const std::function<void(api::HostedSession&)>& job) override;
    std::string loaded_model() const override;
    // The worker says which model it holds now.
    void set_loaded_model(const std::string& path);
    // The server is going away: jobs waiting for the worker are answered 503 and new ones refused.
    // Called on the worker's thread (or after it ended), so no job is running then.
    void abandon();

private:
    QObject& worker_;
    JobRunner runner_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool abandoned_ = false;
    std::string loaded_;
};

}  // namespace kvchat
