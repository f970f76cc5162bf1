#pragma once
// What the window's View menu offers beyond each dock's own toggle: the cache inspector one key
// (Ctrl+I) and one click (the status bar's Inspector button) away at a useful size, the colour
// scheme (Light, Dark, System), the comparison view as a window of its own sized to the screen,
// the docks' room on a small screen (DockRoom), and a visible keyboard focus (FocusRing).
#include <QObject>

class QAction;
class QDockWidget;
class QMainWindow;
class QMenu;
class QToolButton;

namespace kvchat {

class ColorScheme;
class DockRoom;

class ViewControls : public QObject {
    Q_OBJECT
public:
    // Wide enough for the inspector's per-layer figures and legend without cutting a word.
    static constexpr int kInspectorWidth = 440;

    // Call once the window's docks are made (docks added later are still looked after).
    // comparisonDock: the comparison view's (opens as a window of its own); may be null.
    ViewControls(QMainWindow* window, QMenu* viewMenu, QDockWidget* inspectorDock, QDockWidget* comparisonDock);

    DockRoom* dockRoom() const { return room_; }
    ColorScheme* colorScheme() const { return scheme_; }
    QAction* inspectorAction() const { return inspectorAction_; }
    QToolButton* inspectorButton() const { return inspectorButton_; }

    void showInspector();

private:
    void addColorSchemeMenu(QMenu* viewMenu);
    void floatComparison(QDockWidget* dock);

    QMainWindow* window_;
    QDockWidget* inspectorDock_;
    DockRoom* room_ = nullptr;
    ColorScheme* scheme_ = nullptr;
    QAction* inspectorAction_ = nullptr;
    QToolButton* inspectorButton_ = nullptr;
};

}  // namespace kvchat
