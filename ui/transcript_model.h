#pragma once
// The open conversation's messages, one row each, as the transcript view shows them. It lives on
// the GUI thread and changes only there, from the worker's values.
//
// A turn the window asks for shows at once as rows the model owns (the question as sent, the
// answer as it streams), marked by their state, until the worker's word on it: finishTurn makes
// them the stored messages; failTurn, for a turn refused or failed before anything was stored,
// takes them out and brings back what the turn replaced, since the engine then leaves the
// conversation as it was. The turn's rows outlive a visit to another conversation: coming back
// while it answers shows the stored messages before it and its rows after them.
#include "ui/engine_values.h"

#include <QAbstractListModel>

#include <optional>

namespace kvchat {

enum class MessageState {
    Stored,      // as the database holds it
    Sending,     // the question of a turn under way, not yet confirmed stored by the worker
    Streaming,   // the answer being generated
    Unanswered,  // the conversation ends with this question and no turn is answering it
    Failed,      // what streamed before the turn failed; the stored messages are being read again
};

class TranscriptModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Roles {
        ItemRole = Qt::UserRole + 1,  // the whole MessageItem
        IdRole,                       // 0 while not stored
        OrdinalRole,
        AuthorRole,       // MessageRole as int
        ContentRole,      // the text as stored (a thinking answer's reasoning included)
        AnswerTextRole,   // without the reasoning
        ThinkingRole,     // the reasoning (<think>...</think>), empty when none
        StateRole,        // MessageState as int
        FiguresRole,      // AnswerFigures
        FiguresTextRole,  // the figures in words
        EndingTextRole,   // how the answer ended, in words (endingText); empty when not recorded
    };

    explicit TranscriptModel(QObject* parent = nullptr);

    // "prompt 120 tokens: 100 cached, 20 computed · first token 40 ms · 31.5 tok/s · 64 tokens";
    // empty for a message without figures.
    static QString figuresText(const AnswerFigures& figures);
    // "Stopped by you", "Hit the answer's token limit", "End of turn", "Ended at a stop string",
    // "Context full"; empty when not recorded (answers stored before schema 6).
    static QString endingText(const std::optional<StopReason>& reason);

    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QHash<int, QByteArray> roleNames() const override;

    const MessageItem& message(int row) const { return rows_[row].message; }
    MessageState state(int row) const { return rows_[row].state; }

    qint64 conversationId() const { return conversation_; }
    // The open conversation's stored messages have arrived.
    bool loaded() const { return loaded_; }
    // A turn is under way (in any conversation), and which.
    bool answering() const { return turn_.has_value(); }
    qint64 answeringConversation() const { return turn_ ? turn_->conversationId : 0; }

    // Another conversation is opened: no rows until its messages arrive.
    void open(qint64 conversationId);
    // The stored messages of a conversation; ignored unless it is the open one. While a turn of it
    // is under way, the turn's rows stand in for the stored ones from where it began.
    void setMessages(qint64 conversationId, const QList<MessageItem>& messages);

    // A turn on the open conversation; false, with nothing changed, while another turn is under
    // way or before the messages have arrived. Regenerate: false when there is no question to
    // answer again. Edit: `ordinal` must be one of the user's messages.
    bool beginSend(const QString& text);
    bool beginRegenerate();
    bool beginEdit(int ordinal, const QString& text);

    // The worker's values for the turn under way (others are ignored).
    void appendAnswerText(qint64 conversationId, const QString& piece);
    void finishTurn(const TurnOutcome& outcome);
    // Nothing stored: the rows return to what they were before the turn, and a sent message's text
    // is returned (it goes back to the message box). Something stored: the streamed answer stays,
    // marked Failed, until the stored messages are read again (setMessages).
    QString failTurn(qint64 conversationId, bool messageStored);

private:
    struct Row {
        MessageItem message;
        MessageState state = MessageState::Stored;
    };
    struct Turn {
        qint64 conversationId = 0;
        int base = 0;           // the rows before the turn; its rows start here
        QList<Row> rows;        // the question (send, edit) and the answer
        QList<Row> replaced;    // the rows from `base` on before it began
        bool sent = false;      // a send: its text goes back to the message box when refused
    };

    // The empty assistant row a turn streams its answer into, at `ordinal`.
    static Row streamingAnswer(int ordinal);
    bool turnShown() const;
    // Starts a turn on the open conversation: rows from `base` on are replaced by `rows`.
    void beginTurn(int base, QList<Row> rows, bool sent);
    // Rows from `first` on become `rows`, with row signals for what differs.
    void replaceTail(int first, const QList<Row>& rows);
    void setRow(int row, const Row& value);
    // The last row is marked Unanswered when it is a stored question with no turn answering it.
    void markUnanswered();

    QList<Row> rows_;
    qint64 conversation_ = 0;
    bool loaded_ = false;
    std::optional<Turn> turn_;
};

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::MessageState)
