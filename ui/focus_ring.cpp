#include "ui/focus_ring.h"

#include <QApplication>
#include <QFocusEvent>
#include <QPainter>
#include <QWidget>

namespace kvchat {

namespace {

// Drawn over its parent (the focused widget), letting every click through.
class Ring : public QWidget {
public:
    explicit Ring(QWidget* parent) : QWidget(parent) {
        setObjectName(QStringLiteral("focusRing"));
        setAttribute(Qt::WA_TransparentForMouseEvents);
        setAttribute(Qt::WA_NoSystemBackground);
        setFocusPolicy(Qt::NoFocus);
    }

protected:
    void paintEvent(QPaintEvent*) override {
        QPainter p(this);
        p.setRenderHint(QPainter::Antialiasing);
        p.setPen(QPen(palette().color(QPalette::Active, QPalette::Highlight), FocusRing::kWidth));
        p.setBrush(Qt::NoBrush);
        const double half = FocusRing::kWidth / 2.0;
        p.drawRoundedRect(QRectF(rect()).adjusted(half, half, -half, -half), 3, 3);
    }
};

}  // namespace

FocusRing::FocusRing(QObject* parent) : QObject(parent) {
    setObjectName(QStringLiteral("focusRingFollower"));
    qApp->installEventFilter(this);
}

FocusRing::~FocusRing() {
    qApp->removeEventFilter(this);
    delete ring_;
}

QWidget* FocusRing::ring() const { return ring_ && ring_->isVisible() ? ring_.data() : nullptr; }

bool FocusRing::eventFilter(QObject* watched, QEvent* event) {
    switch (event->type()) {
        case QEvent::FocusIn: {
            auto* w = qobject_cast<QWidget*>(watched);
            if (!w) break;  // (a style or a window sees focus events too)
            const Qt::FocusReason why = static_cast<QFocusEvent*>(event)->reason();
            if ((why == Qt::TabFocusReason || why == Qt::BacktabFocusReason || why == Qt::ShortcutFocusReason))
                showOn(w);
            else
                hide();
            break;
        }
        case QEvent::FocusOut:
            if (watched == target_) hide();
            break;
        case QEvent::Resize:
        case QEvent::LayoutRequest:
            if (watched == target_ && ring_) ring_->setGeometry(target_->rect());
            break;
        default:
            break;
    }
    return QObject::eventFilter(watched, event);
}

void FocusRing::showOn(QWidget* w) {
    hide();
    target_ = w;
    ring_ = new Ring(w);
    ring_->setGeometry(w->rect());
    ring_->show();
    ring_->raise();
}

void FocusRing::hide() {
    if (ring_) ring_->deleteLater();
    ring_ = nullptr;
    target_ = nullptr;
}

}  // namespace kvchat
