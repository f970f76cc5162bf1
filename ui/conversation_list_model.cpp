#include "ui/conversation_list_model.h"

#include <QDateTime>
#include <QLocale>

#include <algorithm>

namespace kvchat {

int ConversationListModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(shown_.size());
}

QVariant ConversationListModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= shown_.size()) return {};
    const ConversationItem& c = shown_[index.row()];
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
    if (role != Qt::EditRole || !index.isValid() || index.row() >= shown_.size()) return false;
    const QString title = value.toString().trimmed();
    if (title.isEmpty() || title == shown_[index.row()].title) return false;
    Q_EMIT renameRequested(shown_[index.row()].id, title);
    return false;
}

Qt::ItemFlags ConversationListModel::flags(const QModelIndex& index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    return Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsEditable;
}

void ConversationListModel::setConversations(const QList<ConversationItem>& conversations) {
    all_ = conversations;
    std::stable_sort(all_.begin(), all_.end(),
                     [](const ConversationItem& a, const ConversationItem& b) { return a.updatedMs > b.updatedMs; });
    rebuild();
}

void ConversationListModel::setFilter(std::optional<QList<qint64>> ids) {
    filter_ = std::move(ids);
    rebuild();
}

void ConversationListModel::rebuild() {
    beginResetModel();
    shown_.clear();
    for (const ConversationItem& c : all_)
        if (!filter_ || filter_->contains(c.id)) shown_.push_back(c);
    endResetModel();
}

int ConversationListModel::rowOf(qint64 id) const {
    for (qsizetype i = 0; i < shown_.size(); ++i)
        if (shown_[i].id == id) return static_cast<int>(i);
    return -1;
}

qint64 ConversationListModel::idAt(int row) const {
    return row >= 0 && row < shown_.size() ? shown_[row].id : 0;
}

std::optional<ConversationItem> ConversationListModel::find(qint64 id) const {
    for (const ConversationItem& c : all_)
        if (c.id == id) return c;
    return std::nullopt;
}

}  // namespace kvchat
