#pragma once
// The window's colours: light, dark, or the desktop's. "System" follows the desktop's colour
// scheme (Qt 6.5's QStyleHints::colorScheme and its change signal where this Qt has them; else
// the palette the platform gives, which Qt keeps current). Light and Dark keep the platform's
// palette when it already is one, else use ours. The choice is kept in the settings (view/colorScheme) and
// applied to the whole application, so every widget, and every chart painted from the palette,
// follows it.
#include <QObject>
#include <QPalette>

namespace kvchat {

class ColorScheme : public QObject {
    Q_OBJECT
public:
    enum class Choice { System, Light, Dark };

    explicit ColorScheme(QObject* parent = nullptr);

    Choice choice() const { return choice_; }
    // Applies `c` and keeps it in the settings.
    void choose(Choice c);
    // What is shown now.
    bool dark() const;

    static QPalette darkPalette();
    static QPalette lightPalette();
    // The saved choice ("system", "light", "dark"); System when none or unknown.
    static Choice saved();
    static QString name(Choice c);

Q_SIGNALS:
    void changed(bool dark);

private:
    void apply();

    Choice choice_ = Choice::System;
};

}  // namespace kvchat
