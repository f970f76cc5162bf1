#include "ui/dock_room.h"

#include <QAction>
#include <QDockWidget>
#include <QEvent>
#include <QMainWindow>
#include <QScreen>
#include <QSettings>
#include <QTimer>

#include <algorithm>
#include <utility>

namespace kvchat {

namespace {
// The docks sent away when the window last closed (its saved state has them hidden): a start in a
// wide window brings them back.
const char* const kSentAwaySetting = "window/docksSentAway";
}  // namespace

DockRoom::DockRoom(QMainWindow* window) : QObject(window), window_(window) {
    setObjectName(QStringLiteral("dockRoom"));
    window_->installEventFilter(this);
    watchNewDocks();
}

void DockRoom::remember() const {
    QStringList names;
    for (const auto& d : sentAway_)
        if (d) names << d->objectName();
    QSettings().setValue(kSentAwaySetting, names);
}

bool DockRoom::narrow() const { return window_->width() < kNarrowWidth; }

QList<QDockWidget*> DockRoom::sentAway() const {
    QList<QDockWidget*> out;
    for (const auto& d : sentAway_)
        if (d) out << d;
    return out;
}

QList<QDockWidget*> DockRoom::docks() const {
    // The window's own docks (added to it, hence its children), in the order they were added.
    QList<QDockWidget*> out;
    for (QObject* o : window_->children())
        if (auto* d = qobject_cast<QDockWidget*>(o)) out << d;
    return out;
}

QList<QDockWidget*> DockRoom::sideDocks() const {
    QList<QDockWidget*> out;
    for (QDockWidget* d : docks()) {
        const Qt::DockWidgetArea area = window_->dockWidgetArea(d);
        // Open (a tab behind another counts), docked at a side.
        if (!d->isFloating() && d->toggleViewAction()->isChecked() && (area == Qt::LeftDockWidgetArea || area == Qt::RightDockWidgetArea))
            out << d;
    }
    return out;
}

void DockRoom::watchNewDocks() {
    for (QDockWidget* d : docks()) {
        if (watched_.contains(d)) continue;
        watched_ << d;
        d->installEventFilter(this);
        // The user opens it (View menu, its shortcut): in a narrow window it floats instead of
        // taking the chat's room.
        connect(d->toggleViewAction(), &QAction::triggered, this, [this, d](bool open) {
            if (!open) {
                sentAway_.removeAll(d);
                remember();
                return;
            }
            if (narrow() && !d->isFloating() && window_->dockWidgetArea(d) != Qt::NoDockWidgetArea)
                floatInsideScreen(d, std::max(380, d->minimumSizeHint().width()));
        });
    }
}

bool DockRoom::eventFilter(QObject* watched, QEvent* event) {
    if (watched == window_) {
        if ((event->type() == QEvent::Resize || event->type() == QEvent::Show) && !fitting_) {
            fitting_ = true;
            // After the resize has been laid out (hiding a dock inside it would relayout twice).
            QTimer::singleShot(0, this, [this] {
                fitting_ = false;
                fit();
            });
        }
    } else if (auto* d = qobject_cast<QDockWidget*>(watched); d && event->type() == QEvent::Show && d->isFloating()) {
        // A floating dock (one restored from the last run too) shows whole on its screen.
        QTimer::singleShot(0, d, [this, d] {
            if (!d->isFloating()) return;
            const QRect avail = (window_->screen() ? window_->screen() : d->screen())->availableGeometry();
            QRect g = d->frameGeometry();
            g.setSize(g.size().boundedTo(avail.size()));
            g.moveLeft(std::clamp(g.left(), avail.left(), avail.right() - g.width() + 1));
            g.moveTop(std::clamp(g.top(), avail.top(), avail.bottom() - g.height() + 1));
            if (g != d->frameGeometry()) {
                const QMargins frame(d->geometry().left() - d->frameGeometry().left(), d->geometry().top() - d->frameGeometry().top(),
                                     d->frameGeometry().right() - d->geometry().right(),
                                     d->frameGeometry().bottom() - d->geometry().bottom());
                d->setGeometry(g - frame);
            }
        });
    }
    return QObject::eventFilter(watched, event);
}

void DockRoom::fit() {
    if (!window_->isVisible()) return;
    watchNewDocks();
    if (!restored_) {
        restored_ = true;
        // Restored hidden because the last run's window was narrow (the saved state keeps that).
        for (const QString& name : QSettings().value(kSentAwaySetting).toStringList())
            for (QDockWidget* d : docks())
                if (d->objectName() == name && !sentAway_.contains(d) && d->isHidden()) sentAway_ << d;
    }
    if (narrow()) {
        for (QDockWidget* d : sideDocks()) {
            sentAway_ << d;
            d->hide();
        }
        remember();
        return;
    }
    // Wide again: what was sent away comes back (the front tab of a group last, so it stays in front).
    QList<QPointer<QDockWidget>> back = std::exchange(sentAway_, {});
    for (const auto& d : back)
        if (d) d->show();
    if (!back.isEmpty()) remember();
    // The docks of a side together take at most a third of the window.
    for (Qt::DockWidgetArea area : {Qt::LeftDockWidgetArea, Qt::RightDockWidgetArea}) {
        QList<QDockWidget*> docks;
        int widest = 0;
        for (QDockWidget* d : sideDocks())
            if (window_->dockWidgetArea(d) == area && d->isVisible()) {
                docks << d;
                widest = std::max(widest, d->width());
            }
        const int most = window_->width() / 3;
        if (!docks.isEmpty() && widest > most) window_->resizeDocks(docks, QList<int>(docks.size(), most), Qt::Horizontal);
    }
}

void DockRoom::present(QDockWidget* dock, int usefulWidth) {
    watchNewDocks();
    if (sentAway_.removeAll(dock) > 0) remember();
    if (narrow() && !dock->isFloating()) {
        floatInsideScreen(dock, usefulWidth);
    } else {
        dock->show();
        if (!dock->isFloating() && dock->width() < usefulWidth)
            window_->resizeDocks({dock}, {std::min(usefulWidth, window_->width() / 3)}, Qt::Horizontal);
        // Most of the height too, when it shares its side with another dock.
        if (!dock->isFloating() && dock->height() < window_->height() * 2 / 3)
            window_->resizeDocks({dock}, {window_->height() * 2 / 3}, Qt::Vertical);
    }
    dock->raise();
}

void DockRoom::floatInsideScreen(QDockWidget* dock, int usefulWidth) {
    const QRect avail = (window_->screen() ? window_->screen() : dock->screen())->availableGeometry();
    const QRect win = window_->frameGeometry();
    const int w = std::min(std::max(usefulWidth, dock->minimumSizeHint().width()), avail.width() * 9 / 10);
    const int h = std::min(std::max(560, dock->sizeHint().height()), std::min(win.height(), avail.height() * 9 / 10));
    // Over the window's right edge, where the dock would have been.
    const int x = std::clamp(win.right() - w - 24, avail.left(), avail.right() - w);
    const int y = std::clamp(win.top() + 48, avail.top(), avail.bottom() - h);
    dock->setFloating(true);
    dock->setGeometry(x, y, w, h);
    dock->show();
}

}  // namespace kvchat
