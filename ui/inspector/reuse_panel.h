#pragma once
// Reuse in the last turn: prompt tokens taken from the conversation's cache (of those, from a
// saved prefix's cache) and computed, the prefill time that saved, and the snapshot's size on disk.
#include "ui/inspector/inspector_chart.h"

#include <QRectF>

#include <cstdint>
#include <optional>

namespace kvchat {

struct TurnReuse {
    int64_t cached_tokens = 0;    // prompt tokens reused from the cache (prefix ones included)
    int64_t prefix_tokens = 0;    // of those, from a saved prefix's cache
    int64_t computed_tokens = 0;  // prompt tokens prefilled this turn
    std::optional<double> prefill_saved_ms;
    int64_t snapshot_bytes = -1;  // the conversation's snapshot file; -1: none yet
};

class ReusePanel : public InspectorChart {
    Q_OBJECT
public:
    enum class Part { Prefix, Cache, Computed };
    struct Segment {
        Part part;
        int64_t tokens;
        QRectF rect;
    };

    explicit ReusePanel(QWidget* parent = nullptr);
    void setReuse(const std::optional<TurnReuse>& reuse);
    const std::optional<TurnReuse>& reuse() const { return reuse_; }

    std::vector<Segment> segments() const;
    QString summary() const;  // the lines under the bar
    QString toolTipAt(const QPointF& pos) const override;
    static QString partName(Part part);

    QSize sizeHint() const override { return {420, heightForWidth(420)}; }
    QSize minimumSizeHint() const override { return {240, 70}; }
    // The summary wraps: a narrow panel is taller, never cut off.
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;

protected:
    void paintEvent(QPaintEvent*) override;

private:
    std::optional<TurnReuse> reuse_;
};

}  // namespace kvchat
