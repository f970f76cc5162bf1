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
    const bool wasSearching = matches_.has_value();
    matches_ = std::move(ids);
    if (!matches_) snippets_.clear();
    invalidateRowsFilter();
    // Rows gain or lose their snippet line: the view measures them again.
    if (wasSearching != matches_.has_value()) {
        Q_EMIT layoutAboutToBeChanged();
        Q_EMIT layoutChanged();
    }
}

void ConversationSearchModel::setSnippets(const QList<SearchMatch>& matches) {
    snippets_.clear();
    for (const SearchMatch& m : matches) snippets_.insert(m.conversationId, m);
    if (rowCount() > 0) Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, 0), {SnippetRole});
}

std::optional<SearchMatch> ConversationSearchModel::match(qint64 id) const {
    const auto it = snippets_.constFind(id);
    if (it == snippets_.constEnd()) return std::nullopt;
    return *it;
}

QVariant ConversationSearchModel::data(const QModelIndex& index, int role) const {
    if (role != SnippetRole) return QSortFilterProxyModel::data(index, role);
    if (!matches_) return {};
    const auto m = match(index.data(ConversationListModel::IdRole).toLongLong());
    return m ? m->snippet : tr("Found in the title");
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
