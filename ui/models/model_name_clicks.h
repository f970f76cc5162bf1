#pragma once
// Makes a label (the status bar's model name) a way into the Models view: a click on it, or
// Enter or Space while it has the keyboard focus (it takes Tab focus), emits activated(). The
// label stays a label, so whatever sets its text keeps doing so.
#include <QObject>

class QLabel;

namespace kvchat {

class ModelNameClicks : public QObject {
    Q_OBJECT
public:
    explicit ModelNameClicks(QLabel* label);

Q_SIGNALS:
    void activated();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;
};

}  // namespace kvchat
