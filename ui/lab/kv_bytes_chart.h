#pragma once
// KV bytes against tokens in the cache, one line per strategy: a small QPainter chart (exact,
// cheap, and renderable to a QImage in tests); hover names the nearest point.
#include "ui/inspector/inspector_chart.h"

#include <QColor>
#include <QPointF>
#include <QRectF>
#include <QString>

#include <utility>
#include <vector>

namespace kvchat {

class KvBytesChart : public InspectorChart {
    Q_OBJECT
public:
    struct Line {
        QString name;
        QColor color;
        std::vector<std::pair<int64_t, int64_t>> points;  // (tokens, bytes), tokens ascending
    };

    explicit KvBytesChart(QWidget* parent = nullptr);
    void setLines(std::vector<Line> lines);
    const std::vector<Line>& lines() const { return lines_; }

    // The axes' marks: from 0 in round steps (1, 2 or 5 times a power of ten tokens; of bytes, in
    // the unit the labels use) up to the first mark at or past the largest value. Empty while
    // there is nothing to draw: the chart then shows what it will show instead of an axis.
    std::vector<int64_t> tokenTicks() const;
    std::vector<int64_t> byteTicks() const;
    static std::vector<int64_t> roundTicks(int64_t largest, int64_t unit, int most);
    QString placeholderText() const;

    // Where a point is drawn, for hover and tests.
    QPointF mapPoint(int64_t tokens, int64_t bytes) const;
    QRectF plotArea() const;
    QString toolTipAt(const QPointF& pos) const override;

    QSize sizeHint() const override { return {520, 220}; }
    QSize minimumSizeHint() const override { return {260, 160}; }

protected:
    void paintEvent(QPaintEvent*) override;

private:
    bool empty() const;
    int64_t maxTokens() const;  // the axes' ends: their last marks
    int64_t maxBytes() const;

    std::vector<Line> lines_;
};

}  // namespace kvchat
