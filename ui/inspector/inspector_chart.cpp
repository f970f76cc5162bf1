#include "ui/inspector/inspector_chart.h"

#include <QHelpEvent>
#include <QToolTip>

namespace kvchat {

InspectorChart::InspectorChart(const QString& objectName, QWidget* parent) : QWidget(parent) {
    setObjectName(objectName);
    setMouseTracking(true);
    setAttribute(Qt::WA_OpaquePaintEvent);  // paints every pixel: nothing behind it is drawn first
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Minimum);
}

bool InspectorChart::event(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {
        auto* he = static_cast<QHelpEvent*>(e);
        const QString text = toolTipAt(he->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(he->globalPos(), text, this);
        return true;
    }
    return QWidget::event(e);
}

}  // namespace kvchat
