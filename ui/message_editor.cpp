#include "ui/message_editor.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace kvchat {

MessageEditor::MessageEditor(const QString& text, int after, QWidget* parent) : QFrame(parent), original_(text) {
    setObjectName(QStringLiteral("messageEditor"));
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(4);
    edit_ = new QPlainTextEdit(text);
    edit_->setObjectName(QStringLiteral("messageEditorText"));
    edit_->setAccessibleName(tr("Edited message"));
    edit_->setTabChangesFocus(true);
    // Tall enough for the message, within reason: the transcript scrolls, not the editor.
    const int lines = std::clamp(static_cast<int>(text.count(QLatin1Char('\n'))) + 2, 3, 12);
    edit_->setFixedHeight(edit_->fontMetrics().lineSpacing() * lines + 12);
    edit_->installEventFilter(this);
    v->addWidget(edit_);
    warning_ = new QLabel(replaceWarning(after));
    warning_->setObjectName(QStringLiteral("replaceWarning"));
    warning_->setWordWrap(true);
    v->addWidget(warning_);
    auto* h = new QHBoxLayout;
    h->addStretch(1);
    auto* cancel = new QPushButton(tr("Cancel"));
    cancel->setObjectName(QStringLiteral("cancelEditButton"));
    cancel->setToolTip(tr("Keep the message as it is (Esc)"));
    h->addWidget(cancel);
    save_ = new QPushButton(tr("Save and answer"));
    save_->setObjectName(QStringLiteral("saveEditButton"));
    save_->setToolTip(tr("Replace the message and answer it again (Ctrl+Enter)"));
    save_->setDefault(true);
    h->addWidget(save_);
    v->addLayout(h);
    connect(cancel, &QPushButton::clicked, this, &MessageEditor::cancelled);
    connect(save_, &QPushButton::clicked, this, &MessageEditor::save);
    connect(edit_, &QPlainTextEdit::textChanged, this, &MessageEditor::updateSave);
    updateSave();
}

QString MessageEditor::replaceWarning(int after) {
    if (after <= 0) return tr("Answers the message again.");
    if (after == 1) return tr("Replaces the answer; it stays as an earlier version (‹ ›).");
    if (after == 2) return tr("Replaces the answer and the message after it; they stay as an earlier version (‹ ›).");
    return tr("Replaces the answer and the %1 messages after it; they stay as an earlier version (‹ ›).").arg(after - 1);
}

QString MessageEditor::text() const { return edit_->toPlainText(); }

void MessageEditor::updateSave() {
    const QString t = text();
    save_->setEnabled(!t.trimmed().isEmpty() && t != original_);
}

void MessageEditor::save() {
    if (save_->isEnabled()) Q_EMIT saved(text());
}

bool MessageEditor::eventFilter(QObject* watched, QEvent* event) {
    if (watched == edit_ && (event->type() == QEvent::KeyPress || event->type() == QEvent::ShortcutOverride)) {
        auto* k = static_cast<QKeyEvent*>(event);
        const bool enter = k->key() == Qt::Key_Return || k->key() == Qt::Key_Enter;
        const bool mine = k->key() == Qt::Key_Escape || (enter && (k->modifiers() & Qt::ControlModifier));
        if (mine && event->type() == QEvent::ShortcutOverride) {
            // The window's Esc (stop) and Ctrl+Enter must not take these keys from the editor.
            event->accept();
            return true;
        }
        if (mine) {
            if (k->key() == Qt::Key_Escape) Q_EMIT cancelled();
            else save();
            return true;
        }
    }
    return QFrame::eventFilter(watched, event);
}

}  // namespace kvchat
