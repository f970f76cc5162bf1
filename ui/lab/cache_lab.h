#pragma once
// The cache lab in the main window: the cache inspector in the cache dock, the strategy panel (the
// window puts it in the chat panel), and the comparison view in a bottom dock (View menu, Ctrl+Shift+M). It only
// connects these widgets to the window's engine worker: requests go out as queued calls, results
// come back as values. The window hands it what it needs (the worker, the dock the inspector goes
// into, the View menu) and tells it which conversation is open (setConversation).
#include <QObject>

class QDockWidget;
class QMainWindow;
class QMenu;

namespace kvchat {

class CacheInspector;
class ComparisonView;
class EngineWorker;
class StrategyPanel;

class CacheLab : public QObject {
    Q_OBJECT
public:
    // The docks are added to `window`, their toggles to `viewMenu`; the inspector becomes
    // `inspectorDock`'s widget.
    CacheLab(EngineWorker* worker, QMainWindow* window, QDockWidget* inspectorDock, QMenu* viewMenu);

    CacheInspector* inspector() const { return inspector_; }
    StrategyPanel* strategyPanel() const { return panel_; }
    ComparisonView* comparisonView() const { return comparison_; }

public Q_SLOTS:
    // The conversation the window shows (0: none): the lab describes its cache.
    void setConversation(qint64 id);

Q_SIGNALS:
    // To the worker (queued: it lives on its own thread).
    void requestPlan(qint64 conversationId, const QString& spec);
    void requestSwitch(qint64 conversationId, const QString& spec);
    void requestCompare(const QStringList& strategies, qint64 conversationId, const QString& prompt, int genTokens);
    void requestSnapshot(qint64 conversationId);

private:
    void showSpec(qint64 id, const QString& spec);
    qint64 conversation_ = 0;
    CacheInspector* inspector_ = nullptr;
    StrategyPanel* panel_ = nullptr;
    ComparisonView* comparison_ = nullptr;
    qint64 lastAnswerId_ = -1;  // the conversation the reuse panel describes
    qint64 panelConversation_ = 0;  // the conversation whose strategy the panel shows
};

}  // namespace kvchat
