#include "ui/chat_settings_value.h"
#include "ui/engine_values.h"

namespace kvchat {

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
    qRegisterMetaType<QList<MessageItem>>();
    qRegisterMetaType<QList<ConversationItem>>();
    qRegisterMetaType<QList<PrefixItem>>();
    qRegisterMetaType<QList<qint64>>();
}

}  // namespace kvchat
