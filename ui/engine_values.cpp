#include "ui/chat_panel.h"
#include "ui/chat_settings_value.h"
#include "ui/engine_values.h"

namespace kvchat {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

}  // namespace

MessageRole messageRoleOf(Role r) {
    switch (r) {
        case Role::System: return MessageRole::System;
        case Role::User: return MessageRole::User;
        case Role::Assistant: return MessageRole::Assistant;
    }
    return MessageRole::User;
}

MessageItem messageItemOf(const MessageRecord& m) {
    MessageItem item;
    item.id = m.id;
    item.ordinal = static_cast<int>(m.ordinal);
    item.role = messageRoleOf(m.role);
    item.content = qs(m.content);
    item.repaired = m.content_repaired;
    item.figures = m.stats;
    item.createdMs = m.created_ms;
    return item;
}

ConversationItem conversationItemOf(const ConversationOverview& o) {
    ConversationItem item;
    item.id = o.conversation.id;
    item.title = qs(o.conversation.title);
    item.updatedMs = o.conversation.updated_ms;
    item.messageCount = o.message_count;
    item.tokens = o.tokens;
    item.cacheSpec = qs(o.conversation.cache_spec);
    item.cacheSaved = !o.conversation.snapshot.empty();
    item.lastUnanswered = o.last_unanswered;
    item.parentId = o.conversation.parent_id.value_or(0);
    item.branchAt = o.conversation.branch_at;
    item.fromApi = o.conversation.origin == "api";
    return item;
}

ConversationItem conversationItemOf(const ConversationRecord& c, const std::vector<MessageRecord>& messages) {
    ConversationOverview o;
    o.conversation = c;
    o.message_count = static_cast<int64_t>(messages.size());
    for (auto it = messages.rbegin(); it != messages.rend(); ++it)
        if (it->role == Role::Assistant) {
            o.tokens = it->stats.prompt_tokens + it->stats.generated_tokens;
            break;
        }
    o.last_unanswered = !messages.empty() && messages.back().role == Role::User;
    return conversationItemOf(o);
}

void registerEngineValues() {
    qRegisterMetaType<AnswerFigures>();
    qRegisterMetaType<MessageItem>();
    qRegisterMetaType<ConversationItem>();
    qRegisterMetaType<PrefixItem>();
    qRegisterMetaType<ModelInfo>();
    qRegisterMetaType<StorageReport>();
    qRegisterMetaType<TurnOutcome>();
    qRegisterMetaType<CacheTelemetry>();
    qRegisterMetaType<ChatSettings>();
    qRegisterMetaType<ConversationSettings>();
    qRegisterMetaType<ChatPanelValues>();
    qRegisterMetaType<QList<MessageItem>>();
    qRegisterMetaType<QList<ConversationItem>>();
    qRegisterMetaType<QList<PrefixItem>>();
    qRegisterMetaType<QList<qint64>>();
}

}  // namespace kvchat
