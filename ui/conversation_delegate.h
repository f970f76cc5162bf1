#pragma once
// How a conversation looks in the list: its title, and under it in smaller, softer text how many
// messages it has and when it was last active ("12 messages · 5 min ago").
#include <QStyledItemDelegate>

namespace kvchat {

class ConversationDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;

    // "just now", "5 min ago", "3 h ago", "yesterday", or the date.
    static QString activity(qint64 updatedMs, qint64 nowMs);
};

}  // namespace kvchat
