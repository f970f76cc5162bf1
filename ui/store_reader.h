#pragma once
// Reads the database on a thread of its own through a read-only connection, so opening a
// conversation and searching never wait behind a turn running on the engine's thread (SQLite's
// write-ahead log lets this connection read while the worker writes, and it sees every commit
// made before the read began). It only reads: every change goes through the worker. EngineWorker
// owns it and passes its results on as its own signals.
#include "ui/engine_values.h"
#include "ui/search_match.h"

#include <QObject>

#include <memory>

namespace kvchat {

class Store;

class StoreReader : public QObject {
    Q_OBJECT
public:
    explicit StoreReader(QObject* parent = nullptr);
    ~StoreReader() override;

public Q_SLOTS:
    // The database the worker has opened (and brought up to date); replaces any earlier one.
    void open(const QString& path);
    void readTranscript(qint64 conversationId);
    void search(const QString& query);

Q_SIGNALS:
    void transcriptRead(const kvchat::ConversationItem& conversation, const QList<kvchat::MessageItem>& messages);
    void searchResults(const QString& query, const QList<qint64>& ids);
    // Where the query matched in message text (sent just before searchResults).
    void searchMatched(const QString& query, const QList<kvchat::SearchMatch>& matches);
    // `what` names the request ("Open conversation", "Search").
    void failed(const QString& what, const QString& problem);

private:
    std::unique_ptr<Store> store_;
};

}  // namespace kvchat
