#include "ui/conversation_list_model.h"

#include <algorithm>
#include <functional>
#include <limits>

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
                     c.cacheSaved ? tr("saved on disk") : tr("not saved: computed again when opened")) +
                (c.parentId != 0 ? tr("\nbranched from %1 after message %2")
                                       .arg(find(c.parentId) ? find(c.parentId)->title : tr("a deleted conversation"))
                                       .arg(c.branchAt)
                                 : QString()) +
                (c.fromApi ? tr("\nmade by a client of the local API server") : QString());
        case IdRole: return c.id;
        case UpdatedRole: return c.updatedMs;
        case MessageCountRole: return c.messageCount;
        case CacheSpecRole: return c.cacheSpec;
        case PlaceRole: return place_.value(c.id);
        case DepthRole: return depth_.value(c.id);
        case FromApiRole: return c.fromApi;
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
           a.cacheSaved == b.cacheSaved && a.lastUnanswered == b.lastUnanswered && a.parentId == b.parentId &&
           a.branchAt == b.branchAt && a.fromApi == b.fromApi;
}

}  // namespace

namespace {

// Each conversation's place in the list as a key that sorts ascending, and its depth: groups of a
// conversation and its branches (and theirs), the group with the most recent activity first; in
// a group, a parent right before its branches, which follow by their own most recent activity.
// The key of a row is made of its own group's times only, so a conversation added elsewhere
// changes no other row's key.
void placesOf(const QList<ConversationItem>& all, QHash<qint64, QString>& place, QHash<qint64, int>& depth) {
    place.clear();
    depth.clear();
    QHash<qint64, const ConversationItem*> byId;
    for (const ConversationItem& c : all) byId.insert(c.id, &c);
    QHash<qint64, QList<const ConversationItem*>> children;
    for (const ConversationItem& c : all)
        if (c.parentId != 0 && c.parentId != c.id && byId.contains(c.parentId)) children[c.parentId].push_back(&c);
    // The most recent activity of a conversation and all its branches.
    QHash<qint64, qint64> latest;
    std::function<qint64(const ConversationItem*, int)> latestOf = [&](const ConversationItem* c, int guard) -> qint64 {
        if (auto it = latest.find(c->id); it != latest.end()) return *it;
        qint64 t = c->updatedMs;
        if (guard < 64)  // (a parent loop cannot come from the store; the guard keeps a bad list finite)
            for (const ConversationItem* k : children.value(c->id)) t = std::max(t, latestOf(k, guard + 1));
        latest.insert(c->id, t);
        return t;
    };
    // One step of the key: later activity first, then the larger id, fixed width.
    auto step = [&](const ConversationItem* c) {
        const qint64 t = std::numeric_limits<qint64>::max() - std::max<qint64>(0, latestOf(c, 0));
        const qint64 id = std::numeric_limits<qint64>::max() - c->id;
        return QStringLiteral("%1%2/").arg(t, 19, 10, QLatin1Char('0')).arg(id, 19, 10, QLatin1Char('0'));
    };
    for (const ConversationItem& c : all) {
        QString key;
        int d = 0;
        const ConversationItem* at = &c;
        for (int guard = 0; at && guard < 64; ++guard) {
            key.prepend(step(at));
            const ConversationItem* up = at->parentId != 0 && at->parentId != at->id ? byId.value(at->parentId) : nullptr;
            if (up) ++d;
            at = up;
        }
        place.insert(c.id, key);
        depth.insert(c.id, d);
    }
}

}  // namespace

void ConversationListModel::setConversations(const QList<ConversationItem>& conversations) {
    // The places first, so rows inserted below are sorted where they belong.
    const QHash<qint64, QString> oldPlace = place_;
    const QHash<qint64, int> oldDepth = depth_;
    placesOf(conversations, place_, depth_);
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
    for (qsizetype i = 0; i < rows_.size(); ++i) {
        const qint64 id = rows_[i].id;
        // (A row just inserted was sorted with its place already.)
        if (oldPlace.contains(id) && (oldPlace.value(id) != place_.value(id) || oldDepth.value(id) != depth_.value(id)))
            Q_EMIT dataChanged(index(static_cast<int>(i)), index(static_cast<int>(i)));
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
