#include "engine/api/session_host.h"

#include "engine/error.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace kvchat::api {

namespace fs = std::filesystem;

LocalSessionHost::LocalSessionHost(Store& store, ChatSettings settings, std::unique_ptr<Backend> backend,
                                   std::unique_ptr<Model> model)
    : store_(store), settings_(std::move(settings)), backend_(std::move(backend)), model_(std::move(model)) {
    session_ = std::make_unique<ChatSession>(store_, *model_, *backend_, static_cast<size_t>(settings_.resident_caches));
    path_ = model_->path();
}

LocalSessionHost::~LocalSessionHost() {
    // Caches changed since their last snapshot are written before the model goes.
    if (session_) {
        std::vector<std::string> notices;
        try {
            session_->save_all(notices);
        } catch (const std::exception&) {
            // The transcript is stored; a cache that could not be saved is rebuilt on its next turn.
        }
    }
}

void LocalSessionHost::run(const std::string& model_path, const std::function<void(HostedSession&)>& job) {
    if (!model_path.empty() && (!model_ || model_path != model_->path())) {
        const std::string path_before = model_ ? model_->path() : std::string();
        // The old session saves its caches and lets go of the model before the new one loads, so
        // two models are never in memory together.
        std::vector<std::string> notices;
        try {
            if (session_) session_->save_all(notices);
        } catch (const std::exception&) {
        }
        session_.reset();
        model_.reset();
        {
            std::lock_guard<std::mutex> lock(path_mutex_);
            path_.clear();
        }
        const std::string previous = path_before;
        try {
            model_ = Model::load(model_path);
        } catch (...) {
            // The model asked for could not be loaded: the one before comes back, so the server
            // keeps answering requests for it.
            try {
                model_ = Model::load(previous);
            } catch (const std::exception&) {
            }
            if (model_) {
                session_ = std::make_unique<ChatSession>(store_, *model_, *backend_,
                                                         static_cast<size_t>(settings_.resident_caches));
                std::lock_guard<std::mutex> lock(path_mutex_);
                path_ = model_->path();
            }
            throw;
        }
        session_ = std::make_unique<ChatSession>(store_, *model_, *backend_, static_cast<size_t>(settings_.resident_caches));
        std::lock_guard<std::mutex> lock(path_mutex_);
        path_ = model_->path();
    }
    if (!model_) throw Error("no model is loaded");
    HostedSession h{*session_, *model_, *backend_, settings_};
    job(h);
}

std::string LocalSessionHost::loaded_model() const {
    std::lock_guard<std::mutex> lock(path_mutex_);
    return path_;
}

std::string model_id(const std::string& path) {
    fs::path p(path);
    if (p.extension() == ".gguf") return p.stem().string();
    return p.filename().string();
}

std::vector<ServedModel> served_models(const std::string& models_dir, const std::string& loaded) {
    std::vector<ServedModel> out;
    auto mtime = [](const fs::path& p) -> int64_t {
        std::error_code ec;
        const auto t = fs::last_write_time(p, ec);
        if (ec) return 0;
        const auto sys = std::chrono::time_point_cast<std::chrono::seconds>(
            t - fs::file_time_type::clock::now() + std::chrono::system_clock::now());
        return sys.time_since_epoch().count();
    };
    std::error_code ec;
    for (fs::directory_iterator it(models_dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        std::error_code fe;
        // Names starting with a dot are files being written (packaging/kvchat.sh's .partial).
        if (p.extension() != ".gguf" || p.filename().string().front() == '.' || !it->is_regular_file(fe)) continue;
        out.push_back({p.stem().string(), p.string(), mtime(p)});
    }
    std::sort(out.begin(), out.end(), [](const ServedModel& a, const ServedModel& b) { return a.id < b.id; });
    if (!loaded.empty()) {
        std::error_code e1;
        const bool listed = std::any_of(out.begin(), out.end(), [&](const ServedModel& m) {
            std::error_code e2;
            return m.path == loaded || fs::equivalent(m.path, loaded, e2);
        });
        if (!listed) out.insert(out.begin(), {model_id(loaded), loaded, mtime(loaded)});
    }
    return out;
}

}  // namespace kvchat::api
