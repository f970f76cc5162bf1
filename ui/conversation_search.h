#pragma once
// Search results that show and lead to their match: while the user searches, the list shows
// under each conversation the words around the match (the worker's searchMatched, for the query
// still typed), and opening a result (choosing it in the list, clicking it, Enter) scrolls the
// transcript to the matching message and highlights it for a moment.
#include "ui/search_match.h"

#include <QObject>
#include <QPointer>

#include <optional>

class QLineEdit;
class QListView;
class QTimer;
class QWidget;

namespace kvchat {

class ConversationSearchModel;
class TranscriptView;

class ConversationSearch : public QObject {
    Q_OBJECT
public:
    static constexpr int kHighlightMs = 2500;

    ConversationSearch(QLineEdit* field, QListView* list, ConversationSearchModel* model, TranscriptView* transcript,
                       QObject* parent);

    // The frame around the message jumped to (null once it faded).
    QWidget* highlight() const { return highlight_; }

public Q_SLOTS:
    // The worker's searchMatched: kept when `query` is still the one typed.
    void showMatches(const QString& query, const QList<kvchat::SearchMatch>& matches);
    // Scrolls to conversation `id`'s matching message once its transcript is shown.
    void jumpToMatch(qint64 id);

private:
    void tryJump();

    QLineEdit* field_;
    QListView* list_;
    ConversationSearchModel* model_;
    TranscriptView* transcript_;
    QTimer* retry_ = nullptr;
    int tries_ = 0;
    std::optional<SearchMatch> pending_;
    QPointer<QWidget> highlight_;
};

}  // namespace kvchat
