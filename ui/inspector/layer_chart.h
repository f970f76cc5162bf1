#pragma once
// A chart with one row per cache layer, painted from a CacheTelemetry value. What does not change
// from step to step (row tints, labels, legend) is drawn by paintBackground into a pixmap kept
// until the size or the layers' kinds change; a redraw during generation then paints only what
// moved, which keeps the inspector's share of a decode step small.
#include "engine/cache/cache.h"
#include "ui/inspector/inspector_chart.h"

#include <QPixmap>

#include <vector>

class QPainter;

namespace kvchat {

class LayerChart : public InspectorChart {
    Q_OBJECT
public:
    void setTelemetry(const CacheTelemetry& telemetry);
    const CacheTelemetry& telemetry() const { return telemetry_; }

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    // Row geometry in pixels: rows start at `top`, each `height` tall with `gap` below; the legend
    // takes `footer` under the last row.
    struct Rows {
        int height = 12, gap = 4, top = 4, footer = 50, min_width = 240;
    };
    LayerChart(const QString& objectName, Rows rows, QWidget* parent);

    // The top of layer i's row, and where the rows end.
    double rowTop(int layer) const { return rows_.top + layer * (rows_.height + rows_.gap); }
    double rowsEnd() const { return rowTop(static_cast<int>(telemetry_.layers.size())); }
    // Draws the kept background (made again with `font` when stale); true when it was made again.
    bool drawBackground(QPainter& p, const QFont& font);
    virtual void paintBackground(QPainter& p) const = 0;

    CacheTelemetry telemetry_;
    const Rows rows_;

private:
    QPixmap background_;
    std::vector<bool> backgroundKinds_;
};

}  // namespace kvchat
