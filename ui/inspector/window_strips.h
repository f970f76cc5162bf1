#pragma once
// Windows per layer: a strip over token positions 0..tokens showing the sink tokens, the tokens
// evicted, what is held in full precision (a live window or everything), the quantized region
// and the full-precision residual, drawn from the layer's own ranges (sink_begin/end,
// window_begin/end, quantized and residual counts), so a sink cache, a sliding ring and Gemma's
// hybrid layers look different and move as tokens arrive.
#include "ui/inspector/layer_chart.h"

#include <QRectF>

#include <vector>

namespace kvchat {

class WindowStrips : public LayerChart {
    Q_OBJECT
public:
    enum class Part { Sinks, Evicted, FullPrecision, Quantized, Residual };
    struct Region {
        int layer = 0;
        Part part = Part::FullPrecision;
        int64_t begin = 0, end = 0;  // positions [begin, end)
        QRectF rect;
    };

    explicit WindowStrips(QWidget* parent = nullptr);

    std::vector<Region> regions() const;
    // The x coordinate of position p on layer strips (p = tokens: the right edge).
    double xOf(int64_t position) const;
    QString toolTipAt(const QPointF& pos) const override;
    static QString partName(Part part);
    static QColor partColor(Part part);

protected:
    void paintEvent(QPaintEvent*) override;
    void paintBackground(QPainter& p) const override;
    int footerHeight(int width) const override;

private:
    QRectF stripRect(int layer) const;
};

}  // namespace kvchat
