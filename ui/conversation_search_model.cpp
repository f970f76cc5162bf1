#include "ui/conversation_search_model.h"

#include "ui/conversation_list_model.h"

namespace kvchat {

ConversationSearchModel::ConversationSearchModel(QObject* parent) : QSortFilterProxyModel(parent) {
    setObjectName(QStringLiteral("conversationSearchModel"));
    // Most recent first, branches under their parents (the list model works the places out).
    setSortRole(ConversationListModel::PlaceRole);
    setDynamicSortFilter(true);
    sort(0, Qt::AscendingOrder);
}

void ConversationSearchModel::setMatches(std::optional<QSet<qint64>> ids) {
    if (ids == matches_) return;
    matches_ = std::move(ids);
    invalidateRowsFilter();
}

bool ConversationSearchModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
    if (!matches_) return true;
    const QModelIndex i = sourceModel()->index(sourceRow, 0, sourceParent);
    return matches_->contains(i.data(ConversationListModel::IdRole).toLongLong());
}

int ConversationSearchModel::rowOf(qint64 id) const {
    const auto* source = qobject_cast<const ConversationListModel*>(sourceModel());
    const int row = source ? source->rowOf(id) : -1;
    if (row < 0) return -1;
    const QModelIndex shown = mapFromSource(source->index(row));
    return shown.isValid() ? shown.row() : -1;
}

qint64 ConversationSearchModel::idAt(int row) const {
    return row >= 0 && row < rowCount() ? index(row, 0).data(ConversationListModel::IdRole).toLongLong() : 0;
}

}  // namespace kvchat
