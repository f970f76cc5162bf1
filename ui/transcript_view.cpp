#include "ui/transcript_view.h"

#include "ui/message_view.h"

#include <QLabel>
#include <QScrollBar>
#include <QTimer>
#include <QVBoxLayout>

namespace kvchat {

TranscriptView::TranscriptView(QWidget* parent) : QScrollArea(parent) {
    setObjectName(QStringLiteral("transcriptView"));
    setAccessibleName(tr("Transcript"));
    setWidgetResizable(true);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setFocusPolicy(Qt::StrongFocus);
    column_ = new QWidget;
    column_->setObjectName(QStringLiteral("transcriptColumn"));
    layout_ = new QVBoxLayout(column_);
    layout_->setContentsMargins(12, 12, 12, 12);
    layout_->setSpacing(10);
    placeholder_ = new QLabel(tr("Start the conversation below."));
    placeholder_->setObjectName(QStringLiteral("transcriptPlaceholder"));
    placeholder_->setAlignment(Qt::AlignCenter);
    placeholder_->setForegroundRole(QPalette::PlaceholderText);
    layout_->addWidget(placeholder_);
    layout_->addStretch(1);
    setWidget(column_);
    // Following the end: the view keeps to the bottom while an answer grows, unless the user
    // scrolled up to read.
    connect(verticalScrollBar(), &QScrollBar::valueChanged, this, [this](int v) {
        following_ = v >= verticalScrollBar()->maximum() - 8;
    });
    connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int max) {
        if (following_) verticalScrollBar()->setValue(max);
    });
}

void TranscriptView::setPlaceholder(const QString& text) { placeholder_->setText(text); }

void TranscriptView::clear() {
    ++generation_;
    pending_.clear();
    for (MessageView* v : views_) {
        v->hide();
        v->deleteLater();
    }
    views_.clear();
    streaming_ = nullptr;
    following_ = true;
    placeholder_->setVisible(true);
}

void TranscriptView::setMessages(const QList<MessageItem>& messages) {
    clear();
    pending_ = messages;
    placeholder_->setVisible(messages.isEmpty());
    buildPending();
}

void TranscriptView::buildPending() {
    for (int n = 0; n < kBuildBatch && !pending_.isEmpty(); ++n) addView(pending_.takeFirst());
    if (!pending_.isEmpty()) {
        const int gen = generation_;
        QTimer::singleShot(0, this, [this, gen] {
            if (gen == generation_) buildPending();
        });
    }
}

void TranscriptView::flushPending() {
    while (!pending_.isEmpty()) addView(pending_.takeFirst());
}

MessageView* TranscriptView::appendMessage(const MessageItem& message) {
    // A message added while the history is still being built goes after all of it.
    flushPending();
    return addView(message);
}

MessageView* TranscriptView::addView(const MessageItem& message) {
    placeholder_->setVisible(false);
    auto* v = new MessageView(message, column_);
    connect(v, &MessageView::editRequested, this, &TranscriptView::editRequested);
    connect(v, &MessageView::regenerateRequested, this, &TranscriptView::regenerateRequested);
    layout_->insertWidget(layout_->count() - 1, v);
    views_.push_back(v);
    updateRegenerate();
    return v;
}

void TranscriptView::truncateAfter(int ordinal) {
    flushPending();
    while (!views_.isEmpty() && views_.last()->message().ordinal > ordinal) {
        MessageView* v = views_.takeLast();
        if (v == streaming_) streaming_ = nullptr;
        v->hide();
        v->deleteLater();
    }
    updateRegenerate();
}

void TranscriptView::removeLastAnswer() {
    flushPending();
    if (!views_.isEmpty() && views_.last()->message().role == MessageRole::Assistant)
        truncateAfter(views_.last()->message().ordinal - 1);
}

void TranscriptView::replaceContent(int ordinal, const QString& content) {
    for (MessageView* v : views_)
        if (v->message().ordinal == ordinal) {
            MessageItem m = v->message();
            m.content = content;
            v->setMessage(m);
        }
}

void TranscriptView::startAnswer() {
    flushPending();
    MessageItem m;
    m.role = MessageRole::Assistant;
    m.ordinal = views_.isEmpty() ? 0 : views_.last()->message().ordinal + 1;
    streaming_ = appendMessage(m);
    streaming_->startStreaming();
    following_ = true;
    updateRegenerate();
}

void TranscriptView::appendAnswerText(const QString& piece) {
    if (streaming_) streaming_->appendText(piece);
}

void TranscriptView::finishAnswer(const MessageItem& stored) {
    if (!streaming_) return;
    MessageItem m = stored;
    if (m.id == 0) {
        // Nothing was stored (the turn failed): what streamed stays on screen as it was.
        m = streaming_->message();
    }
    streaming_->finish(m);
    if (streaming_->content().isEmpty() && stored.id == 0) {
        views_.removeOne(streaming_);
        streaming_->hide();
        streaming_->deleteLater();
    }
    streaming_ = nullptr;
    updateRegenerate();
}

void TranscriptView::updateRegenerate() {
    for (qsizetype i = 0; i < views_.size(); ++i)
        views_[i]->setRegenerateVisible(i == views_.size() - 1 && pending_.isEmpty() && !streaming_);
}

}  // namespace kvchat
