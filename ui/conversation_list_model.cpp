#include "ui/conversation_list_model.h"

#include <QDateTime>
#include <QLocale>

#include <QHash>

namespace kvchat {

int ConversationListModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

QVariant ConversationListModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rows_.size()) return {};
    const ConversationItem& c = rows_[index.row()];
    switch (role) {
        case Qt::DisplayRole:
        case Qt::EditRole:
        case Qt::AccessibleTextRole: return c.title;
        case Qt::ToolTipRole:
            return tr("%1\n%2 messages, last active %3\ncache: %4 (%5)")
                .arg(c.title)
                .arg(c.messageCount)
                .arg(QLocale().toString(QDateTime::fromMSecsSinceEpoch(c.updatedMs), QLocale::ShortFormat), c.cacheSpec,
                     c.cacheSaved ? tr("saved on disk") : tr("not saved: computed again when opened"));
        case IdRole: return c.id;
        case UpdatedRole: return c.updatedMs;
        case MessageCountRole: return c.messageCount;
        case CacheSpecRole: return c.cacheSpec;
        default: return {};
    }
}

bool ConversationListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    if (role != Qt::EditRole || !index.isValid() || index.row() >= rows_.size()) return false;
    const QString title = value.toString().trimmed();
    if (title.isEmpty() || title == rows_[index.row()].title) return false;
    Q_EMIT renameRequested(rows_[index.row()].id, title);
    return false;
}

Qt::ItemFlags ConversationListModel::flags(const QModelIndex& index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    return Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsEditable;
}

namespace {

bool sameItem(const ConversationItem& a, const ConversationItem& b) {
    return a.id == b.id && a.title == b.title && a.updatedMs == b.updatedMs && a.messageCount == b.messageCount &&
           a.tokens == b.tokens && a.cacheSpec == b.cacheSpec && a.cacheResident == b.cacheResident &&
           a.cacheSaved == b.cacheSaved && a.lastUnanswered == b.lastUnanswered;
}

}  // namespace

void ConversationListModel::setConversations(const QList<ConversationItem>& conversations) {
    QHash<qint64, const ConversationItem*> next;
    for (const ConversationItem& c : conversations) next.insert(c.id, &c);
    // Deleted ones go, from the end so the rows before keep their numbers.
    for (int row = static_cast<int>(rows_.size()) - 1; row >= 0; --row) {
        if (next.contains(rows_[row].id)) continue;
        beginRemoveRows({}, row, row);
        rows_.removeAt(row);
        endRemoveRows();
    }
    // Changed ones change in place; new ones are added at the end.
    QHash<qint64, int> rowById;
    for (qsizetype i = 0; i < rows_.size(); ++i) rowById.insert(rows_[i].id, static_cast<int>(i));
    QList<ConversationItem> added;
    for (const ConversationItem& c : conversations) {
        const int row = rowById.value(c.id, -1);
        if (row < 0) {
            added.push_back(c);
        } else if (!sameItem(rows_[row], c)) {
            rows_[row] = c;
            Q_EMIT dataChanged(index(row), index(row));
        }
    }
    if (!added.isEmpty()) {
        beginInsertRows({}, static_cast<int>(rows_.size()), static_cast<int>(rows_.size() + added.size()) - 1);
        rows_ += added;
        endInsertRows();
    }
}

int ConversationListModel::rowOf(qint64 id) const {
    for (qsizetype i = 0; i < rows_.size(); ++i)
        if (rows_[i].id == id) return static_cast<int>(i);
    return -1;
}

std::optional<ConversationItem> ConversationListModel::find(qint64 id) const {
    const int row = rowOf(id);
    if (row < 0) return std::nullopt;
    return rows_[row];
}

}  // namespace kvchat
