// The chat panel's requests: a conversation's own settings and its system prompt.
#include "ui/engine_worker.h"

#include "engine/chat/chat_session.h"
#include "engine/model/model.h"

namespace kvchat {

void EngineWorker::reportChatPanel(qint64 id) {
    if (!session_ || id == 0) return;
    try {
        ChatPanelValues v;
        v.conversationId = id;
        v.own = session_->conversation_settings(id);
        v.global = *settings_;
        v.modelContext = model_ ? model_->config().n_ctx_train : 0;
        const std::vector<MessageRecord> messages = session_->messages(id);
        if (!messages.empty() && messages.front().role == Role::System)
            v.systemPrompt = QString::fromStdString(messages.front().content);
        Q_EMIT chatPanelLoaded(v);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Chat settings"), QString::fromUtf8(e.what()));
    }
}

void EngineWorker::saveChatSettings(qint64 id, const ConversationSettings& own) {
    if (!session_) return;
    try {
        session_->set_conversation_settings(id, own);
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("Chat settings"), QString::fromUtf8(e.what()));
    }
    reportChatPanel(id);
}

void EngineWorker::setSystemPrompt(qint64 id, const QString& text) {
    if (!session_) return;
    try {
        if (session_->set_system_prompt(id, text.toStdString())) {
            emitNotices(session_->take_notices());
            Q_EMIT notice(tr("The system prompt changed: the next turn renders the conversation again and prefills "
                             "what the cache no longer matches."));
            openConversation(id);  // the transcript shows the new system message
            Q_EMIT conversationsChanged(conversationItems());
        }
    } catch (const std::exception& e) {
        Q_EMIT failed(tr("System prompt"), QString::fromUtf8(e.what()));
    }
    reportChatPanel(id);
}

}  // namespace kvchat
