#include "ui/message_box.h"

#include <QKeyEvent>
#include <QMimeData>

namespace kvchat {

MessageBox::MessageBox(QWidget* parent) : QPlainTextEdit(parent) {
    setObjectName(QStringLiteral("messageInput"));
    setAccessibleName(tr("Message"));
    setPlaceholderText(tr("Type a message… (Enter sends, Shift+Enter for a new line)"));
    setTabChangesFocus(true);
}

bool MessageBox::isBlank() const { return toPlainText().trimmed().isEmpty(); }

QSize MessageBox::sizeHint() const {
    const int line = fontMetrics().lineSpacing();
    return {400, line * 3 + 2 * frameWidth() + 8};
}

void MessageBox::keyPressEvent(QKeyEvent* e) {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) &&
        !(e->modifiers() & (Qt::ShiftModifier | Qt::ControlModifier | Qt::AltModifier))) {
        Q_EMIT submitted();
        return;
    }
    QPlainTextEdit::keyPressEvent(e);
}

bool MessageBox::canInsertFromMimeData(const QMimeData* source) const {
    return source->hasText() || source->hasUrls();
}

void MessageBox::insertFromMimeData(const QMimeData* source) {
    QString text = source->hasText() ? source->text() : QString();
    if (text.isEmpty() && source->hasUrls())
        for (const QUrl& u : source->urls()) text += u.toString() + QLatin1Char('\n');
    text.remove(QChar(u'\0'));
    insertPlainText(text);
}

}  // namespace kvchat
