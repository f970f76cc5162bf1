#pragma once
// A chart with one row per cache layer, painted from a CacheTelemetry value. What does not change
// from step to step (row tints, labels, legend) is drawn by paintBackground into a pixmap kept
// until the size or the layers' kinds change; a redraw during generation then paints only what
// moved, which keeps the inspector's share of a decode step small.
#include "engine/cache/cache.h"
#include "ui/inspector/inspector_chart.h"

#include <QPixmap>
#include <QStringList>

#include <vector>

class QFontMetrics;
class QPainter;

namespace kvchat {

class LayerChart : public InspectorChart {
    Q_OBJECT
public:
    void setTelemetry(const CacheTelemetry& telemetry);
    const CacheTelemetry& telemetry() const { return telemetry_; }

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;
    // The legend wraps in a narrow inspector: the chart grows taller instead of cutting it off.
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;

protected:
    // Row geometry in pixels: rows start at `top`, each `height` tall with `gap` below; the legend
    // takes `footer` under the last row (at least: footerHeight says how much at a width).
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
    // The height under the rows at `width`.
    virtual int footerHeight(int /*width*/) const { return rows_.footer; }
    // The smaller font the figures and legends use.
    QFont smallFont() const;
    // Where the legend's entries (a 10 px box and the name) go across `width` from (4, top),
    // wrapping to a new line 15 px down when the next entry does not fit; one place per name.
    static std::vector<QPointF> legendPlaces(const QStringList& names, double width, double top, const QFontMetrics& fm);
    // Lines the legend takes at `width`.
    static int legendLines(const QStringList& names, double width, const QFontMetrics& fm);
    void changeEvent(QEvent* e) override;

    CacheTelemetry telemetry_;
    const Rows rows_;

private:
    QPixmap background_;
    std::vector<bool> backgroundKinds_;
};

}  // namespace kvchat
