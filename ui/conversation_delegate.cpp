#include "ui/conversation_delegate.h"

#include "ui/conversation_list_model.h"
#include "ui/conversation_search_model.h"

#include <algorithm>

#include <QApplication>
#include <QDateTime>
#include <QLocale>
#include <QPainter>

namespace kvchat {

QString ConversationDelegate::activity(qint64 updatedMs, qint64 nowMs) {
    const qint64 minutes = (nowMs - updatedMs) / 60000;
    if (minutes < 1) return tr("just now");
    if (minutes < 60) return tr("%1 min ago").arg(minutes);
    if (minutes < 24 * 60) return tr("%1 h ago").arg(minutes / 60);
    if (minutes < 48 * 60) return tr("yesterday");
    return QLocale().toString(QDateTime::fromMSecsSinceEpoch(updatedMs).date(), QLocale::ShortFormat);
}

void ConversationDelegate::paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const {
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QString title = opt.text;
    opt.text.clear();
    const QWidget* w = opt.widget;
    QStyle* style = w ? w->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &opt, p, w);

    // A branch is indented under its parent, with a hook before its title.
    const int depth = std::min(index.data(ConversationListModel::DepthRole).toInt(), 4);
    const QRect r = opt.rect.adjusted(6 + 14 * depth, 3, -6, -3);
    const bool selected = opt.state & QStyle::State_Selected;
    const QPalette::ColorGroup group = opt.state & QStyle::State_Enabled ? QPalette::Normal : QPalette::Disabled;
    p->save();
    p->setPen(opt.palette.color(group, selected ? QPalette::HighlightedText : QPalette::Text));
    QFont titleFont = opt.font;
    p->setFont(titleFont);
    const QFontMetrics fm(titleFont);
    const QString shown = depth > 0 ? QStringLiteral("↳ ") + title : title;
    p->drawText(QRect(r.left(), r.top(), r.width(), fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
                fm.elidedText(shown, Qt::ElideRight, r.width()));
    QFont small = opt.font;
    small.setPointSizeF(small.pointSizeF() * 0.85);
    p->setFont(small);
    const QFontMetrics sm(small);
    QColor soft = opt.palette.color(group, selected ? QPalette::HighlightedText : QPalette::PlaceholderText);
    p->setPen(soft);
    const qint64 count = index.data(ConversationListModel::MessageCountRole).toLongLong();
    const QString line = (count == 1 ? tr("1 message") : tr("%1 messages").arg(count)) + QStringLiteral(" · ") +
                         activity(index.data(ConversationListModel::UpdatedRole).toLongLong(),
                                  QDateTime::currentMSecsSinceEpoch()) +
                         (index.data(ConversationListModel::FromApiRole).toBool() ? tr(" · via API") : QString());
    p->drawText(QRect(r.left(), r.top() + fm.height() + 1, r.width(), sm.height()), Qt::AlignLeft | Qt::AlignVCenter,
                sm.elidedText(line, Qt::ElideRight, r.width()));
    // While searching: the words around the match, the matched ones in bold, cut at the edge.
    const QVariant snippet = index.data(ConversationSearchModel::SnippetRole);
    if (snippet.isValid()) {
        const QString s = snippet.toString().simplified();
        QFont bold = small;
        bold.setBold(true);
        const QFontMetrics bm(bold);
        const int top = r.top() + fm.height() + sm.height() + 2;
        int x = r.left();
        bool inMatch = false;
        QString piece;
        auto flush = [&] {
            if (piece.isEmpty() || x >= r.right()) return;
            const QFontMetrics& m = inMatch ? bm : sm;
            p->setFont(inMatch ? bold : small);
            p->setPen(inMatch ? opt.palette.color(group, selected ? QPalette::HighlightedText : QPalette::Text) : soft);
            const int room = r.right() - x;
            const QString shown = m.horizontalAdvance(piece) <= room ? piece : m.elidedText(piece, Qt::ElideRight, room);
            p->drawText(QRect(x, top, room, sm.height()), Qt::AlignLeft | Qt::AlignVCenter, shown);
            x += m.horizontalAdvance(shown);
            if (shown != piece) x = r.right();  // cut: nothing more fits
            piece.clear();
        };
        for (const QChar c : s) {
            if (c == SearchMatch::kMatchBegin || c == SearchMatch::kMatchEnd) {
                flush();
                inMatch = c == SearchMatch::kMatchBegin;
            } else {
                piece += c;
            }
        }
        flush();
    }
    p->restore();
}

QSize ConversationDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const {
    QSize s = QStyledItemDelegate::sizeHint(option, index);
    QFont small = option.font;
    small.setPointSizeF(small.pointSizeF() * 0.85);
    const int lines = index.data(ConversationSearchModel::SnippetRole).isValid() ? 2 : 1;
    s.setHeight(QFontMetrics(option.font).height() + lines * QFontMetrics(small).height() + 8 + (lines - 1) * 1);
    return s;
}

}  // namespace kvchat
