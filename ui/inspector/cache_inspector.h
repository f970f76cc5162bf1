#pragma once
// The cache inspector (a dock's content): memory per layer, windows per layer, offload traffic
// and reuse in the last turn, with exports. Fed by values: setTelemetry() only stores the latest
// telemetry (and records the step's traffic); a timer redraws at most 20 times a second, and
// not at all while the inspector is hidden.
#include "engine/cache/cache.h"
#include "ui/inspector/reuse_panel.h"

#include <QWidget>

#include <optional>

class QLabel;
class QTimer;

namespace kvchat {

class MemoryBars;
class WindowStrips;
class TrafficTimeline;

class CacheInspector : public QWidget {
    Q_OBJECT
public:
    static constexpr int kRedrawIntervalMs = 50;

    explicit CacheInspector(QWidget* parent = nullptr);

    const std::optional<CacheTelemetry>& telemetry() const { return telemetry_; }
    MemoryBars* memoryBars() const { return bars_; }
    WindowStrips* windowStrips() const { return strips_; }
    TrafficTimeline* trafficTimeline() const { return traffic_; }
    ReusePanel* reusePanel() const { return reuse_; }
    // Why the snapshot on disk and what the cache holds differ (under the reuse panel).
    QLabel* snapshotNote() const { return snapshotNote_; }
    static QString snapshotExplanation(int64_t snapshotBytes);
    // How many times the views were brought up to date (for the redraw-rate check).
    int64_t redraws() const { return redraws_; }

    bool exportPng(const QString& path);
    bool exportCsv(const QString& path) const;
    bool exportJson(const QString& path) const;

public Q_SLOTS:
    // After every decode step (or when the conversation changes): stores, never draws.
    void setTelemetry(const kvchat::CacheTelemetry& telemetry);
    void setReuse(const std::optional<kvchat::AnswerFigures>& figures);
    // The open conversation's snapshot on disk (nullopt: none): the reuse panel's figure and the note.
    void setSnapshotBytes(std::optional<int64_t> bytes);
    // Another conversation (or none): the traffic history starts again.
    void clear(bool conversationOpen = false);
    // Brings the views up to date now (the timer does this on its own).
    void flush();

protected:
    void showEvent(QShowEvent* e) override;

private:
    void chooseExport(const QString& kind);

    std::optional<CacheTelemetry> telemetry_;
    bool dirty_ = false;
    int64_t redraws_ = 0;
    int64_t trafficShown_ = 0;  // steps the timeline showed at its last repaint
    QTimer* timer_ = nullptr;
    QLabel* header_ = nullptr;
    MemoryBars* bars_ = nullptr;
    WindowStrips* strips_ = nullptr;
    TrafficTimeline* traffic_ = nullptr;
    ReusePanel* reuse_ = nullptr;
    QLabel* snapshotNote_ = nullptr;
};

}  // namespace kvchat
