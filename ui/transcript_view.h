#pragma once
// The messages of the open conversation, one MessageView each, in a scrolling column. Only the
// answer being streamed changes while it streams; the others are laid out once. A long history
// is built a few messages per event-loop turn so opening it never freezes the window.
#include "ui/engine_values.h"

#include <QList>
#include <QScrollArea>

class QLabel;
class QVBoxLayout;

namespace kvchat {

class MessageView;

class TranscriptView : public QScrollArea {
    Q_OBJECT
public:
    explicit TranscriptView(QWidget* parent = nullptr);

    void setMessages(const QList<MessageItem>& messages);
    void clear();
    MessageView* appendMessage(const MessageItem& message);
    // Drops every message after `ordinal` (an edit answers again from there).
    void truncateAfter(int ordinal);
    // Drops the last answer (regenerate).
    void removeLastAnswer();
    void replaceContent(int ordinal, const QString& content);

    void startAnswer();
    void appendAnswerText(const QString& piece);
    void finishAnswer(const MessageItem& stored);
    bool answering() const { return streaming_ != nullptr; }

    QList<MessageView*> messageViews() const { return views_; }
    MessageView* streamingView() const { return streaming_; }
    int messageCount() const { return static_cast<int>(views_.size()) + static_cast<int>(pending_.size()); }
    void setPlaceholder(const QString& text);

    // How many messages are built per event-loop turn when a history opens.
    static constexpr int kBuildBatch = 6;

Q_SIGNALS:
    void editRequested(int ordinal, const QString& content);
    void regenerateRequested();

private:
    void buildPending();
    void flushPending();
    MessageView* addView(const MessageItem& message);
    void updateRegenerate();
    void scrollToEndIfFollowing();

    QWidget* column_ = nullptr;
    QVBoxLayout* layout_ = nullptr;
    QLabel* placeholder_ = nullptr;
    QList<MessageView*> views_;
    QList<MessageItem> pending_;
    MessageView* streaming_ = nullptr;
    bool following_ = true;
    int generation_ = 0;
};

}  // namespace kvchat
