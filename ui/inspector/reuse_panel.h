#pragma once
// Reuse in the last turn: prompt tokens taken from the conversation's cache (of those, from a
// saved prefix's cache) and computed, the prefill time that saved (the answer's AnswerFigures),
// and the snapshot's size on disk.
#include "engine/store/records.h"
#include "ui/inspector/inspector_chart.h"

#include <QRectF>

#include <cstdint>
#include <optional>

namespace kvchat {

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
    // The last answer's figures (none: no answer yet in this conversation).
    void setReuse(const std::optional<AnswerFigures>& figures);
    const std::optional<AnswerFigures>& reuse() const { return reuse_; }
    // The conversation's snapshot file on disk (nullopt: none yet).
    void setSnapshotBytes(std::optional<int64_t> bytes);

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
    std::optional<AnswerFigures> reuse_;
    std::optional<int64_t> snapshotBytes_;
};

}  // namespace kvchat
