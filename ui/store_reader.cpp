#include "ui/store_reader.h"

#include "engine/store/store.h"
#include "ui/transcript_history.h"

#include <exception>

namespace kvchat {

StoreReader::StoreReader(QObject* parent) : QObject(parent) {}

StoreReader::~StoreReader() = default;

void StoreReader::open(const QString& path) {
    store_.reset();
    try {
        store_ = std::make_unique<Store>(path.toStdString(), Store::Access::ReadOnly);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Open conversation"), QString::fromUtf8(e.what()));
    }
}

void StoreReader::readTranscript(qint64 id) {
    if (!store_) return;
    try {
        const auto conversation = store_->find_conversation_by_id(id);
        const std::vector<MessageRecord> records = conversation ? store_->list_messages(id) : std::vector<MessageRecord>{};
        QList<MessageItem> messages;
        messages.reserve(static_cast<qsizetype>(records.size()));
        for (const MessageRecord& m : records) messages.push_back(messageItemOf(m));
        if (conversation) markHistory(messages, store_->version_sets(id), store_->strategy_changes(id));
        ConversationItem item;
        if (conversation) item = conversationItemOf(*conversation, records);
        item.id = id;  // a conversation deleted meanwhile reads as empty
        Q_EMIT transcriptRead(item, messages);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Open conversation"), QString::fromUtf8(e.what()));
    }
}

void StoreReader::search(const QString& query) {
    if (!store_) return;
    QList<qint64> ids;
    QList<SearchMatch> matches;
    try {
        for (const Store::MessageMatch& m : store_->search_message_matches(query.toStdString()))
            matches.push_back({m.conversation_id, m.message_id, static_cast<int>(m.ordinal), QString::fromStdString(m.snippet)});
        Q_EMIT searchMatched(query, matches);
        for (const ConversationOverview& o : store_->search_conversations(query.toStdString())) ids.push_back(o.conversation.id);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Search"), QString::fromUtf8(e.what()));
    }
    Q_EMIT searchResults(query, ids);
}

}  // namespace kvchat
