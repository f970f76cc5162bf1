#include "ui/view_controls.h"

#include "ui/color_scheme.h"
#include "ui/dock_room.h"
#include "ui/focus_ring.h"

#include <QAction>
#include <QActionGroup>
#include <QDockWidget>
#include <QGuiApplication>
#include <QMainWindow>
#include <QMenu>
#include <QScreen>
#include <QStatusBar>
#include <QToolButton>

#include <algorithm>

namespace kvchat {

ViewControls::ViewControls(QMainWindow* window, QMenu* viewMenu, QDockWidget* inspectorDock, QDockWidget* comparisonDock)
    : QObject(window), window_(window), inspectorDock_(inspectorDock) {
    setObjectName(QStringLiteral("viewControls"));
    room_ = new DockRoom(window);
    scheme_ = new ColorScheme(this);
    new FocusRing(this);  // every Tab stop shows where the keyboard is

    inspectorAction_ = new QAction(tr("Cache &inspector"), window);
    inspectorAction_->setObjectName(QStringLiteral("showInspectorAction"));
    inspectorAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_I));
    inspectorAction_->setToolTip(tr("Show the cache inspector (%1)").arg(inspectorAction_->shortcut().toString(QKeySequence::NativeText)));
    window->addAction(inspectorAction_);
    connect(inspectorAction_, &QAction::triggered, this, &ViewControls::showInspector);
    QAction* first = viewMenu->actions().value(0);
    viewMenu->insertAction(first, inspectorAction_);
    if (first) viewMenu->insertSeparator(first);

    // One click from anywhere in the window: the status bar's right end.
    inspectorButton_ = new QToolButton;
    inspectorButton_->setObjectName(QStringLiteral("inspectorButton"));
    inspectorButton_->setDefaultAction(inspectorAction_);
    inspectorButton_->setText(tr("Inspector"));
    inspectorButton_->setAccessibleName(tr("Show the cache inspector"));
    inspectorButton_->setAutoRaise(true);
    window->statusBar()->addPermanentWidget(inspectorButton_);

    addColorSchemeMenu(viewMenu);
    floatComparison(comparisonDock);
}

void ViewControls::showInspector() {
    room_->present(inspectorDock_, kInspectorWidth);
}

void ViewControls::addColorSchemeMenu(QMenu* viewMenu) {
    viewMenu->addSeparator();
    QMenu* menu = viewMenu->addMenu(tr("&Colours"));
    menu->setObjectName(QStringLiteral("colorSchemeMenu"));
    auto* group = new QActionGroup(menu);
    const std::pair<ColorScheme::Choice, QString> choices[] = {{ColorScheme::Choice::System, tr("&System (follow the desktop)")},
                                                               {ColorScheme::Choice::Light, tr("&Light")},
                                                               {ColorScheme::Choice::Dark, tr("&Dark")}};
    for (const auto& [choice, text] : choices) {
        QAction* a = menu->addAction(text);
        const QString name = ColorScheme::name(choice);
        a->setObjectName(QStringLiteral("colorScheme%1Action").arg(name.left(1).toUpper() + name.mid(1)));
        a->setCheckable(true);
        a->setChecked(scheme_->choice() == choice);
        group->addAction(a);
        connect(a, &QAction::triggered, this, [this, c = choice] { scheme_->choose(c); });
    }
}

void ViewControls::floatComparison(QDockWidget* dock) {
    if (!dock) return;
    // Docked below the chat it took the window's height and pushed the window past the screen:
    // it opens as a window of its own, as big as a dialog and never bigger than the screen (it
    // can still be docked by the user; its content scrolls then).
    const QScreen* screen = window_->screen() ? window_->screen() : QGuiApplication::primaryScreen();
    const QRect avail = screen ? screen->availableGeometry() : QRect(0, 0, 1280, 800);
    const QSize size(std::min(1200, avail.width() * 9 / 10), std::min(800, avail.height() * 9 / 10));
    dock->setFloating(true);
    dock->setGeometry(QRect(QPoint(0, 0), size).translated(avail.center() - QRect(QPoint(0, 0), size).center()));
}

}  // namespace kvchat
