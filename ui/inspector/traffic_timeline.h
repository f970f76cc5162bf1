#pragma once
// Offload traffic: bytes read into fast memory (up) and written back (down) at each decode step,
// the most recent steps from right to left, steps where the prefetch made a layer wait marked in
// red; hover gives a step's per-layer figures.
#include "engine/cache/cache.h"

#include "ui/inspector/inspector_chart.h"

#include <QRectF>

#include <deque>
#include <vector>

namespace kvchat {

class TrafficTimeline : public InspectorChart {
    Q_OBJECT
public:
    struct Step {
        int64_t index = 0;  // steps recorded since the last clear
        int64_t tokens = 0;
        int64_t moved_in = 0, moved_out = 0;
        double stall_ms = 0;  // prefetch stall added by this step
        std::vector<std::pair<int64_t, int64_t>> layers;  // (in, out) per layer
    };

    explicit TrafficTimeline(QWidget* parent = nullptr);
    // Records one step without repainting (the inspector calls it for every step and repaints on
    // its own timer; call update() to show it).
    void addStep(const CacheTelemetry& telemetry);
    void clear();
    const std::deque<Step>& steps() const { return steps_; }
    // Steps recorded since the last clear (also those dropped off the left edge).
    int64_t recorded() const { return next_index_; }
    int capacity() const { return capacity_; }

    // The bar of step `i` of steps() (in: above the axis, out: below), for hover and tests.
    QRectF inBar(size_t i) const;
    QRectF outBar(size_t i) const;
    QString toolTipAt(const QPointF& pos) const override;

    QSize sizeHint() const override { return {420, 124}; }
    QSize minimumSizeHint() const override { return {240, 104}; }

protected:
    void paintEvent(QPaintEvent*) override;

private:
    QRectF plotArea() const;
    double barWidth() const;
    int64_t scale(bool in) const;

    std::deque<Step> steps_;
    int capacity_ = 240;
    int64_t next_index_ = 0;
    double last_stall_total_ = -1;
};

}  // namespace kvchat
