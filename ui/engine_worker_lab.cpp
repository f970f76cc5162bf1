// The engine worker's part for the cache lab: a strategy switch's plan before Apply, the strategy
// comparison, and the snapshot size the inspector shows. Runs on the worker's thread like the rest
// of EngineWorker; the comparison is cancelled through stop(), as an answer is.
#include "ui/engine_worker.h"

#include "engine/chat/chat_template.h"
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/generate/comparison.h"
#include "engine/model/model.h"


namespace kvchat {

namespace {
QString text(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
}  // namespace

void EngineWorker::planSwitch(qint64 id, const QString& spec) {
    if (!session_ || !session_->has_model()) {
        Q_EMIT switchPlanFailed(id, spec, tr("No model is loaded yet."));
        return;
    }
    try {
        Q_EMIT switchPlanned(id, session_->plan_switch(id, spec.toStdString()));
    } catch (const std::exception& e) {
        Q_EMIT switchPlanFailed(id, spec, text(e.what()));
    }
}

void EngineWorker::compare(const QStringList& strategies, qint64 conversationId, const QString& prompt, int genTokens) {
    if (!needModel(tr("Compare strategies"))) {
        Q_EMIT comparisonFailed(tr("No model is loaded yet."));
        return;
    }
    stop_.store(false);
    Q_EMIT busyChanged(true);
    try {
        // The conversation up to its last question (its last answer is what is compared), or the
        // one prompt as a user message, rendered as the model was trained.
        std::vector<ChatMessage> messages;
        if (conversationId > 0) {
            const std::vector<MessageRecord> records = session_->messages(conversationId);
            size_t end = records.size();
            while (end > 0 && records[end - 1].role == Role::Assistant) --end;
            for (size_t i = 0; i < end; ++i) messages.push_back({records[i].role, records[i].content});
            if (messages.empty()) throw Error("the conversation has no question to answer yet");
        } else {
            messages.push_back({Role::User, prompt.toStdString()});
        }
        const std::vector<int32_t> tokens = session_->chat_template().render(messages, true).tokens;
        ComparisonOptions opt;
        opt.gen_tokens = genTokens;
        opt.progress = throttled(
            [this](const QString& task, qint64 done, qint64 total) { Q_EMIT comparisonProgress(task, done, total); },
            &stop_);
        std::vector<std::string> specs;
        for (const QString& s : strategies) specs.push_back(s.toStdString());
        Q_EMIT comparisonFinished(compare_strategies(*model_, *backend_, tokens, specs, opt));
    } catch (const Cancelled&) {
        Q_EMIT comparisonFailed(QString());
    } catch (const std::exception& e) {
        Q_EMIT comparisonFailed(text(e.what()));
    }
    Q_EMIT busyChanged(false);
}

void EngineWorker::reportSnapshot(qint64 id) {
    std::optional<int64_t> bytes;
    try {
        if (session_) bytes = session_->snapshot_bytes(id);
    } catch (const std::exception&) {
        // Unknown reads as none on disk.
    }
    Q_EMIT snapshotReported(id, bytes.value_or(-1));
}

}  // namespace kvchat
