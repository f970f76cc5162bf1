#pragma once
// Memory per layer: one bar per layer, stacked by tier (fast / slow) and precision (full /
// quantized), the capacity reserved beyond what is held drawn apart as an outline, and sliding
// layers told from global ones by a tag and a tinted row. Painted from a CacheTelemetry value.
#include "ui/inspector/layer_chart.h"

#include <QRectF>
#include <QStaticText>

#include <vector>

namespace kvchat {

class MemoryBars : public LayerChart {
    Q_OBJECT
public:
    enum class Part { FastFull, FastQuantized, SlowFull, SlowQuantized, Reserved };
    struct Segment {
        int layer = 0;
        Part part = Part::FastFull;
        int64_t bytes = 0;
        QRectF rect;  // where it is drawn (Reserved: the outline past the held bytes)
    };

    explicit MemoryBars(QWidget* parent = nullptr);

    // What paintEvent draws, for hover and tests; held parts of a layer sum to its fast + slow bytes.
    std::vector<Segment> segments() const;
    QString toolTipAt(const QPointF& pos) const override;
    static QString partName(Part part);
    static QColor partColor(Part part);
    // The totals under the legend, cut between their figures into lines that fit `width`.
    QStringList totalsLines(int width) const;

protected:
    void paintEvent(QPaintEvent*) override;
    void paintBackground(QPainter& p) const override;
    int footerHeight(int width) const override;

private:
    QRectF rowRect(int layer) const;
    QRectF barArea(int layer) const;
    double bytesPerPixel() const;

    static QStringList legendNames();

    std::vector<QStaticText> values_;
    int totalsShown_ = 1;  // lines the totals took at the last paint
};

}  // namespace kvchat
