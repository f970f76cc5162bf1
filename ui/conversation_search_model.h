#pragma once
// The conversation list as the user sees it: most recent activity first, narrowed to a search's
// matches while one is active. A proxy over the ConversationListModel, so a conversation that
// becomes the most recent moves (the view keeps it selected) and a search narrows the rows
// without touching the conversations themselves. The matches come from the store's full-text
// search (titles and message text), which the window asks the worker for.
#include "ui/search_match.h"

#include <QHash>
#include <QSet>
#include <QSortFilterProxyModel>

#include <optional>

namespace kvchat {

class ConversationSearchModel : public QSortFilterProxyModel {
    Q_OBJECT
public:
    // While searching: where the conversation matched (SearchMatch::snippet, the matched words
    // marked), or a note that the title did; nothing otherwise.
    static constexpr int SnippetRole = Qt::UserRole + 100;

    explicit ConversationSearchModel(QObject* parent = nullptr);

    // Where the search matched in each conversation's messages (kept until the search ends).
    void setSnippets(const QList<SearchMatch>& matches);
    std::optional<SearchMatch> match(qint64 id) const;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;

    // Shows only these conversations (a search's matches); nullopt shows all.
    void setMatches(std::optional<QSet<qint64>> ids);
    bool searching() const { return matches_.has_value(); }

    int rowOf(qint64 id) const;  // -1 when not shown
    qint64 idAt(int row) const;  // 0 when there is no such row

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    std::optional<QSet<qint64>> matches_;
    QHash<qint64, SearchMatch> snippets_;
};

}  // namespace kvchat
