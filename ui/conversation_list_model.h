#pragma once
// The conversations the worker reported, one row each, in the order they arrived (the
// ConversationSearchModel above it sorts and filters them for the list). Lives on the GUI thread
// and changes only there: a new list from the worker is applied by rows (rows inserted for new
// conversations, removed for deleted ones, dataChanged for changed ones), never by a reset, so
// the view keeps its selection and scroll position. Renaming in place asks the worker
// (renameRequested) rather than changing the row, which comes back with the worker's next list.
#include "ui/engine_values.h"

#include <QAbstractListModel>
#include <QHash>
#include <QList>
#include <optional>

namespace kvchat {

class ConversationListModel : public QAbstractListModel {
    Q_OBJECT
public:
    // PlaceRole: a key (text) that sorts the rows ascending into the list's order: most recent
    // activity first, a branch right under its parent, the parent's group as recent as its most
    // recent branch; DepthRole: how many parents it has in the list (the delegate indents by it).
    // FromApiRole: the local API server made it (the delegate says "via API").
    enum Roles { IdRole = Qt::UserRole + 1, UpdatedRole, MessageCountRole, CacheSpecRole, PlaceRole, DepthRole, FromApiRole };
    using QAbstractListModel::QAbstractListModel;

    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

    void setConversations(const QList<ConversationItem>& conversations);

    int rowOf(qint64 id) const;  // -1 when absent
    std::optional<ConversationItem> find(qint64 id) const;
    const QList<ConversationItem>& all() const { return rows_; }

Q_SIGNALS:
    void renameRequested(qint64 id, const QString& title);

private:
    // Works out PlaceRole and DepthRole again; dataChanged for the rows whose values moved.
    void updatePlaces();

    QList<ConversationItem> rows_;
    QHash<qint64, QString> place_;
    QHash<qint64, int> depth_;
};

}  // namespace kvchat
