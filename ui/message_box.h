#pragma once
// Where the user types: Enter sends, Shift+Enter starts a new line. Pasted text is taken as
// plain text (Qt has already replaced any invalid UTF-8 by U+FFFD); NUL characters are dropped.
#include <QPlainTextEdit>

namespace kvchat {

class MessageBox : public QPlainTextEdit {
    Q_OBJECT
public:
    explicit MessageBox(QWidget* parent = nullptr);
    bool isBlank() const;

Q_SIGNALS:
    void submitted();

protected:
    void keyPressEvent(QKeyEvent* e) override;
    bool canInsertFromMimeData(const QMimeData* source) const override;
    void insertFromMimeData(const QMimeData* source) override;
    QSize sizeHint() const override;
};

}  // namespace kvchat
