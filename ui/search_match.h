#pragma once
// Where a conversation search matched in message text (Store::search_message_matches): the
// message and a few words around the match, the matched words between kMatchBegin and kMatchEnd.
#include <QList>
#include <QMetaType>
#include <QString>

namespace kvchat {

struct SearchMatch {
    static constexpr QChar kMatchBegin{0x02}, kMatchEnd{0x03};
    qint64 conversationId = 0;
    qint64 messageId = 0;
    int ordinal = 0;
    QString snippet;
    // The snippet as plain text (the marks left out).
    QString plainSnippet() const {
        QString s = snippet;
        s.remove(kMatchBegin);
        s.remove(kMatchEnd);
        return s;
    }
};

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::SearchMatch)
