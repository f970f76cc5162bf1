#include "ui/color_scheme.h"

#include <QApplication>
#include <QSettings>
#include <QStyleHints>

namespace kvchat {

namespace {
const char* const kSetting = "view/colorScheme";
}

ColorScheme::ColorScheme(QObject* parent) : QObject(parent), choice_(saved()) {
#if QT_VERSION >= QT_VERSION_CHECK(6, 5, 0)
    connect(QGuiApplication::styleHints(), &QStyleHints::colorSchemeChanged, this, [this] {
        if (choice_ == Choice::System) apply();
    });
#endif
    apply();
}

QString ColorScheme::name(Choice c) {
    switch (c) {
        case Choice::Light: return QStringLiteral("light");
        case Choice::Dark: return QStringLiteral("dark");
        case Choice::System: break;
    }
    return QStringLiteral("system");
}

ColorScheme::Choice ColorScheme::saved() {
    const QString s = QSettings().value(kSetting).toString();
    if (s == name(Choice::Light)) return Choice::Light;
    if (s == name(Choice::Dark)) return Choice::Dark;
    return Choice::System;
}

void ColorScheme::choose(Choice c) {
    choice_ = c;
    QSettings().setValue(kSetting, name(c));
    apply();
}

bool ColorScheme::dark() const {
    const QPalette p = QApplication::palette();
    return p.color(QPalette::Window).lightness() < p.color(QPalette::WindowText).lightness();
}

void ColorScheme::apply() {
    const bool wasDark = dark();
    // The platform's own palette first (a native dark theme is kept as it is), then ours where it
    // is not what was asked for.
    QApplication::setPalette(QPalette());
    bool wantDark = dark();
    if (choice_ == Choice::Dark) wantDark = true;
    else if (choice_ == Choice::Light) wantDark = false;
#if QT_VERSION >= QT_VERSION_CHECK(6, 5, 0)
    else if (QGuiApplication::styleHints()->colorScheme() != Qt::ColorScheme::Unknown)
        wantDark = QGuiApplication::styleHints()->colorScheme() == Qt::ColorScheme::Dark;
#endif
    if (wantDark != dark()) QApplication::setPalette(wantDark ? darkPalette() : lightPalette());
    if (dark() != wasDark) Q_EMIT changed(dark());
}

QPalette ColorScheme::lightPalette() {
    QPalette p(QColor(0xef, 0xef, 0xef), QColor(0xef, 0xef, 0xef));
    p.setColor(QPalette::Window, QColor(0xef, 0xef, 0xef));
    p.setColor(QPalette::WindowText, QColor(0x1e, 0x1e, 0x1e));
    p.setColor(QPalette::Base, Qt::white);
    p.setColor(QPalette::AlternateBase, QColor(0xf3, 0xf3, 0xf5));
    p.setColor(QPalette::Text, QColor(0x1e, 0x1e, 0x1e));
    p.setColor(QPalette::Button, QColor(0xef, 0xef, 0xef));
    p.setColor(QPalette::ButtonText, QColor(0x1e, 0x1e, 0x1e));
    p.setColor(QPalette::ToolTipBase, QColor(0xff, 0xff, 0xdc));
    p.setColor(QPalette::ToolTipText, Qt::black);
    p.setColor(QPalette::Highlight, QColor(0x30, 0x8c, 0xc6));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::PlaceholderText, QColor(0x80, 0x80, 0x80));
    p.setColor(QPalette::Link, QColor(0x15, 0x65, 0xc0));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0xa0, 0xa0, 0xa0));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0xa0, 0xa0, 0xa0));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0xa0, 0xa0, 0xa0));
    return p;
}

QPalette ColorScheme::darkPalette() {
    QPalette p;
    const QColor window(0x2d, 0x2d, 0x30), text(0xe6, 0xe6, 0xe6), disabled(0x7f, 0x7f, 0x7f);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x20));
    p.setColor(QPalette::AlternateBase, QColor(0x37, 0x37, 0x3c));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(0x35, 0x35, 0x39));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, Qt::white);
    p.setColor(QPalette::ToolTipBase, QColor(0x3c, 0x3c, 0x41));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::Highlight, QColor(0x2a, 0x82, 0xda));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::PlaceholderText, QColor(0x96, 0x96, 0x96));
    p.setColor(QPalette::Link, QColor(0x64, 0xb5, 0xf6));
    p.setColor(QPalette::LinkVisited, QColor(0xce, 0x93, 0xd8));
    p.setColor(QPalette::Light, QColor(0x50, 0x50, 0x55));
    p.setColor(QPalette::Midlight, QColor(0x42, 0x42, 0x46));
    p.setColor(QPalette::Mid, QColor(0x26, 0x26, 0x28));
    p.setColor(QPalette::Dark, QColor(0x1a, 0x1a, 0x1c));
    p.setColor(QPalette::Shadow, Qt::black);
    for (QPalette::ColorRole r : {QPalette::Text, QPalette::WindowText, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, r, disabled);
    p.setColor(QPalette::Disabled, QPalette::Highlight, QColor(0x50, 0x50, 0x55));
    return p;
}

}  // namespace kvchat
