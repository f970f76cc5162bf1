#pragma once
// A message of the user's edited in place, in the transcript: the text, what saving will replace
// (the answer and the messages after it, kept as a version), Save (Ctrl+Enter) and Cancel (Esc).
#include <QFrame>

class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace kvchat {

class MessageEditor : public QFrame {
    Q_OBJECT
public:
    // `after`: how many messages follow the one edited.
    MessageEditor(const QString& text, int after, QWidget* parent = nullptr);

    // What saving replaces, in words: "Replaces the answer and the 3 messages after it; they
    // stay as version 1 (‹ ›)."
    static QString replaceWarning(int after);

    QString text() const;
    QPlainTextEdit* textEdit() const { return edit_; }

Q_SIGNALS:
    // Only for a text that is not blank and differs from the message.
    void saved(const QString& text);
    void cancelled();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void save();
    void updateSave();

    QString original_;
    QPlainTextEdit* edit_ = nullptr;
    QLabel* warning_ = nullptr;
    QPushButton* save_ = nullptr;
};

}  // namespace kvchat
