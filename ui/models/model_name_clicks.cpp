#include "ui/models/model_name_clicks.h"

#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>

namespace kvchat {

ModelNameClicks::ModelNameClicks(QLabel* label) : QObject(label) {
    label->setCursor(Qt::PointingHandCursor);
    label->setFocusPolicy(Qt::TabFocus);
    label->setAccessibleDescription(tr("Opens the list of models"));
    label->installEventFilter(this);
}

bool ModelNameClicks::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() == QEvent::MouseButtonRelease) {
        auto* e = static_cast<QMouseEvent*>(event);
        auto* label = static_cast<QLabel*>(watched);
        if (e->button() == Qt::LeftButton && label->rect().contains(e->position().toPoint())) {
            Q_EMIT activated();
            return true;
        }
    } else if (event->type() == QEvent::KeyPress) {
        const int key = static_cast<QKeyEvent*>(event)->key();
        if (key == Qt::Key_Return || key == Qt::Key_Enter || key == Qt::Key_Space) {
            Q_EMIT activated();
            return true;
        }
    }
    return QObject::eventFilter(watched, event);
}

}  // namespace kvchat
