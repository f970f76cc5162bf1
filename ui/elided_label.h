#pragma once
// A one-line label that gives way when room is short: it asks for its whole text's width but can
// be made as narrow as a few characters, and then shows the text cut with an ellipsis (the whole
// text on hover). For the status bar, whose labels must never push the window wider.
#include <QLabel>

namespace kvchat {

class ElidedLabel : public QLabel {
    Q_OBJECT
public:
    explicit ElidedLabel(QWidget* parent = nullptr);

    QSize minimumSizeHint() const override;
    // The text as shown now (cut when the label is narrower than its text).
    QString shownText() const;

protected:
    void paintEvent(QPaintEvent* e) override;
    bool event(QEvent* e) override;
};

}  // namespace kvchat
