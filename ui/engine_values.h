#pragma once
// The values that cross between the engine worker's thread and the GUI thread. Every signal of
// EngineWorker carries only these (copies, never pointers into the engine), so widgets and item
// models never see an engine object that another thread could change under them.
#include "engine/cache/cache.h"
#include "engine/store/records.h"

#include <QList>
#include <QMetaType>
#include <QString>
#include <QStringList>

namespace kvchat {

enum class MessageRole { System, User, Assistant };

struct MessageItem {
    qint64 id = 0;
    int ordinal = 0;
    MessageRole role = MessageRole::User;
    QString content;
    bool repaired = false;  // invalid UTF-8 was replaced when it was stored
    AnswerFigures figures;  // the engine's value as the store keeps it (none: a typed message)
    qint64 createdMs = 0;
    // This place has versions (regenerate, edit): version versionShown of versionCount (0: none).
    int versionCount = 0;
    int versionShown = 0;
    // Strategy changes marked above this message, and (on the last message) after it.
    QStringList strategyBefore;
    QStringList strategyAfter;
};

struct ConversationItem {
    qint64 id = 0;
    QString title;
    qint64 updatedMs = 0;
    qint64 messageCount = 0;
    qint64 tokens = 0;
    QString cacheSpec;
    bool cacheResident = false;
    bool cacheSaved = false;  // a snapshot of its cache is on disk (reopening it skips the prefill)
    bool lastUnanswered = false;
    qint64 parentId = 0;  // a branch: the conversation it was branched from (0: none)
    qint64 branchAt = 0;  // a branch: how many of the parent's messages it began with
    bool fromApi = false; // the local API server made it (a client's conversation)
};

struct PrefixItem {
    qint64 id = 0;
    QString name;
    QString text;  // the first message (all of a prefix saved from text)
    int messageCount = 0;
    qint64 tokens = 0;
    qint64 cacheBytes = 0;   // its snapshot on disk (0: none saved)
    qint64 lastUsedMs = -1;  // -1: never used
    qint64 useCount = 0;
    QString cacheSpec;
};

// One conversation or prefix in the storage view.
struct StorageItem {
    bool prefix = false;  // else a conversation
    qint64 id = 0;
    QString name;
    qint64 tokens = 0;
    QString cacheSpec;
    bool saved = false;   // a cache snapshot is on disk
    qint64 bytes = 0;
    qint64 checkpoints = 0;
    qint64 lastUsedMs = 0;
};

// What the saved caches take on disk against their budget.
struct StorageReport {
    QList<StorageItem> items;  // most recently used first
    qint64 totalBytes = 0;
    qint64 budgetBytes = 0;
    bool budgetIsDefault = true;
};

struct ModelInfo {
    QString path;
    QString name;          // file or folder name
    QString architecture;  // as the file names it
    qint64 contextLimit = 0;
    qint64 fileBytes = 0;
    int layers = 0;
};

// What one finished (or stopped) turn left: the stored question and answer and the cache after it.
struct TurnOutcome {
    qint64 conversationId = 0;
    MessageItem question;  // the user's message the turn answered, as stored (id 0: none)
    MessageItem answer;    // id 0: no answer was stored
    QString stopReason;
    QStringList notices;
    qint64 contextTokens = 0;  // tokens the conversation's cache holds now
    qint64 kvBytes = 0;
    QString cacheSpec;
};

// The engine's records as the window's values.
MessageRole messageRoleOf(Role role);
MessageItem messageItemOf(const MessageRecord& message);
ConversationItem conversationItemOf(const ConversationOverview& overview);
// A conversation's line from its row and its messages, counted as the store's overview counts them.
ConversationItem conversationItemOf(const ConversationRecord& conversation, const std::vector<MessageRecord>& messages);

// Registers every value above (and the engine's CacheTelemetry and ChatSettings) with Qt's
// meta-type system so queued connections can copy them. Called once before the worker starts.
void registerEngineValues();

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::AnswerFigures)
Q_DECLARE_METATYPE(kvchat::MessageItem)
Q_DECLARE_METATYPE(kvchat::ConversationItem)
Q_DECLARE_METATYPE(kvchat::PrefixItem)
Q_DECLARE_METATYPE(kvchat::ModelInfo)
Q_DECLARE_METATYPE(kvchat::StorageReport)
Q_DECLARE_METATYPE(kvchat::TurnOutcome)
Q_DECLARE_METATYPE(kvchat::CacheTelemetry)
