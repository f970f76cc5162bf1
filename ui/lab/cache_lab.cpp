#include "ui/lab/cache_lab.h"

#include "ui/engine_worker.h"
#include "ui/inspector/cache_inspector.h"
#include "ui/lab/comparison_view.h"
#include "ui/lab/lab_values.h"
#include "ui/lab/strategy_panel.h"
#include "ui/inspector/reuse_panel.h"

#include <QAction>
#include <QDockWidget>
#include <QMainWindow>
#include <QMenu>

namespace kvchat {

namespace {

// The last answer's figures; none when the message has none (a typed one, or no answer yet).
std::optional<AnswerFigures> reuseOf(const AnswerFigures& f) {
    if (!f.present()) return std::nullopt;
    return f;
}

}  // namespace

CacheLab::CacheLab(EngineWorker* w, QMainWindow* window, QDockWidget* inspectorDock, QMenu* viewMenu) : QObject(window) {
    registerLabValues();

    inspector_ = new CacheInspector;
    inspector_->setMinimumWidth(300);
    inspectorDock->setWidget(inspector_);

    // The window places it (inside the chat panel, ui/chat_panel.h).
    panel_ = new StrategyPanel;

    comparison_ = new ComparisonView;
    auto* comparisonDock = new QDockWidget(tr("Compare strategies"), window);
    comparisonDock->setObjectName(QStringLiteral("comparisonDock"));
    comparisonDock->setWidget(comparison_);
    window->addDockWidget(Qt::BottomDockWidgetArea, comparisonDock);
    comparisonDock->hide();
    QAction* toggle = comparisonDock->toggleViewAction();
    toggle->setShortcut(QKeySequence(QStringLiteral("Ctrl+Shift+M")));
    viewMenu->addAction(toggle);

    // Requests.
    connect(this, &CacheLab::requestPlan, w, &EngineWorker::planSwitch);
    connect(this, &CacheLab::requestSwitch, w, &EngineWorker::switchStrategy);
    connect(this, &CacheLab::requestCompare, w, &EngineWorker::compare);
    connect(this, &CacheLab::requestSnapshot, w, &EngineWorker::reportSnapshot);
    connect(panel_, &StrategyPanel::planRequested, this, [this](const QString& spec) {
        if (conversation_ != 0) Q_EMIT requestPlan(conversation_, spec);
    });
    connect(panel_, &StrategyPanel::applyRequested, this, [this](const QString& spec) {
        if (conversation_ != 0) Q_EMIT requestSwitch(conversation_, spec);
    });
    // stop() only sets the flag the running step checks: safe from this thread.
    connect(panel_, &StrategyPanel::cancelRequested, this, [w] { w->stop(); });
    connect(comparison_, &ComparisonView::compareRequested, this, &CacheLab::requestCompare);
    connect(comparison_, &ComparisonView::cancelRequested, this, [w] { w->stop(); });

    // Results.
    connect(w, &EngineWorker::cacheTelemetry, this, [this](qint64 id, const CacheTelemetry& t) {
        if (id == conversation_) inspector_->setTelemetry(t);
    });
    connect(w, &EngineWorker::transcriptLoaded, this, [this](const ConversationItem& c, const QList<MessageItem>& messages) {
        if (c.id != conversation_) return;
        if (!panel_->busy()) showSpec(c.id, c.cacheSpec);
        std::optional<AnswerFigures> reuse;
        for (auto it = messages.rbegin(); it != messages.rend() && !reuse; ++it)
            if (it->role == MessageRole::Assistant) reuse = reuseOf(it->figures);
        inspector_->setReuse(reuse);
        lastAnswerId_ = c.id;
        Q_EMIT requestSnapshot(c.id);
    });
    connect(w, &EngineWorker::turnFinished, this, [this](const TurnOutcome& o) {
        if (o.conversationId != conversation_) return;
        if (!panel_->busy()) showSpec(o.conversationId, o.cacheSpec);
        inspector_->setReuse(reuseOf(o.answer.figures));
        lastAnswerId_ = o.conversationId;
        Q_EMIT requestSnapshot(o.conversationId);
    });
    connect(w, &EngineWorker::snapshotReported, this, [this](qint64 id, qint64 bytes) {
        if (id != lastAnswerId_ || id != conversation_) return;
        inspector_->setSnapshotBytes(bytes >= 0 ? std::optional<int64_t>(bytes) : std::nullopt);
    });
    connect(w, &EngineWorker::switchPlanned, this, [this](qint64 id, const ConversionPlan& plan) {
        if (id == conversation_) panel_->showPlan(plan);
    });
    connect(w, &EngineWorker::switchPlanFailed, this, [this](qint64 id, const QString& spec, const QString& problem) {
        if (id == conversation_ && spec == panel_->chosenSpec()) panel_->showError(problem);
    });
    connect(w, &EngineWorker::turnProgress, this, [this](qint64 id, const QString& task, qint64 done, qint64 total) {
        if (id == conversation_ && panel_->busy()) panel_->showProgress(task, done, total);
    });
    // A switch that failed (or was cancelled) comes back with the old spec and no summary.
    connect(w, &EngineWorker::strategySwitched, this, [this](qint64 id, const QString& spec, const QString& summary) {
        if (id != conversation_) return;
        if (panel_->busy())
            panel_->applyFinished(!summary.isEmpty(), spec, summary.isEmpty() ? tr("The strategy was not changed.") : summary);
        else
            showSpec(id, spec);
    });
    auto listConversations = [this](const QList<ConversationItem>& list) {
        QList<QPair<qint64, QString>> items;
        for (const ConversationItem& c : list) items.append({c.id, c.title});
        comparison_->setConversations(items);
    };
    connect(w, &EngineWorker::conversationsChanged, this, listConversations);
    connect(w, &EngineWorker::storeOpened, this,
            [listConversations](const QString&, const QList<ConversationItem>& list, const QList<PrefixItem>&) { listConversations(list); });
    connect(w, &EngineWorker::comparisonProgress, comparison_, &ComparisonView::showProgress);
    connect(w, &EngineWorker::comparisonFinished, comparison_, &ComparisonView::showRows);
    connect(w, &EngineWorker::comparisonFailed, this, [this](const QString& problem) {
        comparison_->showError(problem.isEmpty() ? tr("The comparison was cancelled.") : problem);
    });
}

// A report on the conversation the panel already shows keeps what the user is choosing there
// (a turn that ends while they type must not wipe it); another conversation's fills the fields.
void CacheLab::showSpec(qint64 id, const QString& spec) {
    if (id == panelConversation_) panel_->reportCurrentSpec(spec);
    else panel_->setCurrentSpec(spec);
    panelConversation_ = id;
}

void CacheLab::setConversation(qint64 id) {
    if (id == conversation_) return;
    conversation_ = id;
    inspector_->clear(id != 0);
    lastAnswerId_ = -1;
}

}  // namespace kvchat
