#pragma once
// The conversations as the list on the left shows them: most recent activity first, narrowed to
// a search's matches when one is active. Lives on the GUI thread and changes only there, from
// the worker's values; renaming in place asks the worker (renameRequested) rather than changing
// the row, which comes back with the worker's next list.
#include "ui/engine_values.h"

#include <QAbstractListModel>
#include <QList>
#include <optional>

namespace kvchat {

class ConversationListModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Roles { IdRole = Qt::UserRole + 1, UpdatedRole, MessageCountRole, CacheSpecRole };
    using QAbstractListModel::QAbstractListModel;

    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

    void setConversations(const QList<ConversationItem>& conversations);
    // Shows only these conversations (a search's results); nullopt shows all.
    void setFilter(std::optional<QList<qint64>> ids);
    bool filtered() const { return filter_.has_value(); }

    int rowOf(qint64 id) const;  // -1 when not shown
    qint64 idAt(int row) const;
    std::optional<ConversationItem> find(qint64 id) const;
    const QList<ConversationItem>& all() const { return all_; }

Q_SIGNALS:
    void renameRequested(qint64 id, const QString& title);

private:
    void rebuild();
    QList<ConversationItem> all_;
    QList<ConversationItem> shown_;
    std::optional<QList<qint64>> filter_;
};

}  // namespace kvchat
