#pragma once
// One message of the transcript, as the transcript view shows a row of the TranscriptModel: who
// said it, its text rendered as Markdown (code blocks in a monospace frame with a Copy button),
// under an answer the figures it was produced with, and a line for a row that is not simply
// stored (a question not answered, an answer that failed).
// A thinking model's reasoning (<think>…</think>) is folded into a "Thinking" line the user can
// open.
// Each message has its own documents, so a growing answer re-lays out only itself: while it
// streams, the text is parsed again on a short timer, and only its last piece (see
// markdown_segments.h); finish() parses once more when it ends.
#include "ui/engine_values.h"
#include "ui/markdown_segments.h"
#include "ui/transcript_model.h"

#include <QFrame>
#include <QList>
#include <QTimer>

class QLabel;
class QToolButton;
class QVBoxLayout;

namespace kvchat {
class MessageEditor;
class VersionSwitcher;
}  // namespace kvchat

namespace kvchat {

class MessageView : public QFrame {
    Q_OBJECT
public:
    explicit MessageView(const MessageItem& message, QWidget* parent = nullptr);

    const MessageItem& message() const { return message_; }
    QString content() const { return message_.content; }
    bool streaming() const { return streaming_; }
    MessageState state() const { return state_; }

    // A row of the model, as it is now: a streaming row grows (parsed again on the timer), a row
    // that stops streaming is parsed once more, a changed row is shown again, an unchanged one
    // costs nothing.
    void showRow(const MessageItem& message, MessageState state);

    // Streaming: the answer grows by `piece`; the view catches up on its own timer.
    void startStreaming();
    void appendText(const QString& piece);
    // The stored answer (figures, id) replaces what streamed; parsed one last time.
    void finish(const MessageItem& stored);
    void setMessage(const MessageItem& message);
    void setActionsEnabled(bool enabled);
    void setRegenerateVisible(bool visible);
    // How many messages follow this one (what editing it replaces).
    void setMessagesAfter(int after) { messagesAfter_ = after; }
    // Edit in place: the message becomes an editor (message_editor.h) until saved or cancelled.
    void startEditing();
    bool editing() const { return editor_ != nullptr; }
    MessageEditor* editor() const { return editor_; }
    VersionSwitcher* versionSwitcher() const { return versions_; }
    // How many times the message's documents were parsed (for tests of the streaming cost).
    int parses() const { return parses_; }

    // Messages longer than this are shown cut (Copy still copies all of it): laying out a pasted
    // megabyte would freeze the window for seconds.
    static constexpr qsizetype kShownChars = 32 * 1024;
    static constexpr int kReparseMs = 80;

Q_SIGNALS:
    // The message edited in place was saved as `content`.
    void editRequested(int ordinal, const QString& content);
    void regenerateRequested();
    // Show version `number` of this message's place.
    void versionRequested(int ordinal, int number);
    // A new conversation of the messages up to this one (reusing their cache).
    void branchRequested(int ordinal);

private:
    void render();
    QWidget* makeSegmentWidget(const MarkdownSegment& s);
    void updateSegmentWidget(QWidget* w, const MarkdownSegment& s);
    void showThinking(bool has, const QString& thinking, bool answered);
    void showState(MessageState state);
    void showHistory();
    void stopEditing();
    void showEnding();

    MessageItem message_;
    MessageState state_ = MessageState::Stored;
    bool streaming_ = false;
    int parses_ = 0;
    QTimer reparse_;
    QLabel* roleLabel_ = nullptr;
    QLabel* figures_ = nullptr;
    QLabel* ending_ = nullptr;  // how the answer ended (TranscriptModel::endingText)
    QLabel* cutNote_ = nullptr;
    QLabel* stateNote_ = nullptr;
    QToolButton* copy_ = nullptr;
    QToolButton* edit_ = nullptr;
    QToolButton* regenerate_ = nullptr;
    QToolButton* branch_ = nullptr;
    QToolButton* thinkingToggle_ = nullptr;
    QWidget* thinkingText_ = nullptr;
    QString thinkingShown_;
    QVBoxLayout* body_ = nullptr;
    QList<MarkdownSegment> shown_;
    QList<QWidget*> segmentWidgets_;
    // Where the strategy changed, above and below the message: the words, in a row with lines.
    QLabel* dividerBefore_ = nullptr;
    QLabel* dividerAfter_ = nullptr;
    VersionSwitcher* versions_ = nullptr;
    MessageEditor* editor_ = nullptr;
    int messagesAfter_ = 0;
    bool actionsEnabled_ = true;
};

}  // namespace kvchat
