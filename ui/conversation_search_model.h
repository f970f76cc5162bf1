#pragma once
// The conversation list as the user sees it: most recent activity first, narrowed to a search's
// matches while one is active. A proxy over the ConversationListModel, so a conversation that
// becomes the most recent moves (the view keeps it selected) and a search narrows the rows
// without touching the conversations themselves. The matches come from the store's full-text
// search (titles and message text), which the window asks the worker for.
#include <QSet>
#include <QSortFilterProxyModel>

#include <optional>

namespace kvchat {

class ConversationSearchModel : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit ConversationSearchModel(QObject* parent = nullptr);

    // Shows only these conversations (a search's matches); nullopt shows all.
    void setMatches(std::optional<QSet<qint64>> ids);
    bool searching() const { return matches_.has_value(); }

    int rowOf(qint64 id) const;  // -1 when not shown
    qint64 idAt(int row) const;  // 0 when there is no such row

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    std::optional<QSet<qint64>> matches_;
};

}  // namespace kvchat
