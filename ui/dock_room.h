#pragma once
// How much of the window's width the docks at its sides may take, so the chat stays readable on
// a laptop: at most a third, and in a window narrower than kNarrowWidth none (they leave the
// window and come back when it is wide again). A dock the user opens in a narrow window floats
// beside it instead, at a useful size inside the screen. Docks added to the window later (by
// other parts) are looked after too.
#include <QList>
#include <QObject>
#include <QPointer>

class QDockWidget;
class QMainWindow;

namespace kvchat {

class DockRoom : public QObject {
    Q_OBJECT
public:
    // Below this width the side docks leave the window: beside the conversation list (200 px)
    // the chat keeps its two thirds and a dock its useful width only from about here.
    static constexpr int kNarrowWidth = 1200;

    explicit DockRoom(QMainWindow* window);

    bool narrow() const;
    // Shows `dock` and brings it to the front, at least `usefulWidth` wide: at its side of the
    // window when there is room, else floating inside the window's screen.
    void present(QDockWidget* dock, int usefulWidth);
    // The docks sent away for want of room (shown again when the window is wide again).
    QList<QDockWidget*> sentAway() const;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void fit();
    void watchNewDocks();
    QList<QDockWidget*> docks() const;
    QList<QDockWidget*> sideDocks() const;
    void floatInsideScreen(QDockWidget* dock, int usefulWidth);
    void remember() const;

    QMainWindow* window_;
    QList<QPointer<QDockWidget>> watched_;
    QList<QPointer<QDockWidget>> sentAway_;
    bool fitting_ = false;
    bool restored_ = false;
};

}  // namespace kvchat
