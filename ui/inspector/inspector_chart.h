#pragma once
// What every chart of the cache inspector shares: it paints every pixel itself, stretches
// across the dock, and hovering shows the text toolTipAt gives for the point (nothing when
// empty). Charts with one row per cache layer build on LayerChart (layer_chart.h).
#include <QPointF>
#include <QString>
#include <QWidget>

namespace kvchat {

class InspectorChart : public QWidget {
    Q_OBJECT
public:
    // The hover text at pos; empty: no tooltip there.
    virtual QString toolTipAt(const QPointF& pos) const = 0;

protected:
    InspectorChart(const QString& objectName, QWidget* parent);
    bool event(QEvent* e) override;
};

}  // namespace kvchat
