#include "ui/transcript_view.h"

#include "ui/message_view.h"
#include "ui/transcript_model.h"

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
    // The layout holds the placeholder, then one view per built row, then the stretch.
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

void TranscriptView::setModel(TranscriptModel* model) {
    if (model_) disconnect(model_, nullptr, this, nullptr);
    model_ = model;
    if (model_) {
        connect(model_, &QAbstractItemModel::modelReset, this, &TranscriptView::rebuild);
        connect(model_, &QAbstractItemModel::layoutChanged, this, &TranscriptView::rebuild);
        connect(model_, &QAbstractItemModel::rowsMoved, this, &TranscriptView::rebuild);
        connect(model_, &QAbstractItemModel::rowsInserted, this,
                [this](const QModelIndex&, int first, int last) { insertViews(first, last); });
        connect(model_, &QAbstractItemModel::rowsRemoved, this,
                [this](const QModelIndex&, int first, int last) { removeViews(first, last); });
        connect(model_, &QAbstractItemModel::dataChanged, this,
                [this](const QModelIndex& from, const QModelIndex& to) { updateViews(from.row(), to.row()); });
    }
    rebuild();
}

void TranscriptView::setPlaceholder(const QString& text) { placeholder_->setText(text); }

MessageView* TranscriptView::streamingView() const {
    for (MessageView* v : views_)
        if (v->state() == MessageState::Streaming) return v;
    return nullptr;
}

MessageView* TranscriptView::makeView(int row) {
    auto* v = new MessageView(model_->message(row), column_);
    v->showRow(model_->message(row), model_->state(row));
    connect(v, &MessageView::editRequested, this, &TranscriptView::editRequested);
    connect(v, &MessageView::regenerateRequested, this, &TranscriptView::regenerateRequested);
    connect(v, &MessageView::versionRequested, this, &TranscriptView::versionRequested);
    connect(v, &MessageView::branchRequested, this, &TranscriptView::branchRequested);
    return v;
}

void TranscriptView::rebuild() {
    ++generation_;
    for (MessageView* v : views_) {
        v->hide();
        v->deleteLater();
    }
    views_.clear();
    following_ = true;
    updatePlaceholder();
    buildMore();
}

void TranscriptView::buildMore() {
    if (!model_) return;
    const int rows = model_->rowCount();
    for (int n = 0; n < kBuildBatch && views_.size() < rows; ++n) {
        MessageView* v = makeView(static_cast<int>(views_.size()));
        layout_->insertWidget(1 + static_cast<int>(views_.size()), v);
        views_.push_back(v);
    }
    if (views_.size() < rows) {
        const int gen = generation_;
        QTimer::singleShot(0, this, [this, gen] {
            if (gen == generation_) buildMore();
        });
    }
    updateRegenerate();
}

void TranscriptView::insertViews(int first, int last) {
    updatePlaceholder();
    // Rows past the ones built so far are built in their turn.
    if (first > views_.size()) return;
    for (int row = first; row <= last; ++row) {
        MessageView* v = makeView(row);
        layout_->insertWidget(1 + row, v);
        views_.insert(row, v);
    }
    if (last == model_->rowCount() - 1) following_ = true;  // a new message at the end is shown
    updateRegenerate();
}

void TranscriptView::removeViews(int first, int last) {
    for (int row = std::min(last, static_cast<int>(views_.size()) - 1); row >= first; --row) {
        MessageView* v = views_.takeAt(row);
        v->hide();
        v->deleteLater();
    }
    updatePlaceholder();
    updateRegenerate();
}

void TranscriptView::updateViews(int first, int last) {
    for (int row = first; row <= last && row < views_.size(); ++row) {
        MessageView* v = views_[row];
        if (v->message().role != model_->message(row).role) {
            // Another author: another kind of view (a question has Edit, an answer Regenerate).
            MessageView* replacement = makeView(row);
            layout_->replaceWidget(v, replacement);
            views_[row] = replacement;
            v->hide();
            v->deleteLater();
            continue;
        }
        v->showRow(model_->message(row), model_->state(row));
    }
    updateRegenerate();
}

void TranscriptView::updatePlaceholder() { placeholder_->setVisible(!model_ || model_->rowCount() == 0); }

void TranscriptView::updateRegenerate() {
    const bool all = model_ && views_.size() == model_->rowCount();
    for (qsizetype i = 0; i < views_.size(); ++i) {
        if (model_) views_[i]->setMessagesAfter(model_->rowCount() - 1 - static_cast<int>(i));
        views_[i]->setRegenerateVisible(all && i == views_.size() - 1 && !model_->answering() &&
                                        views_[i]->state() == MessageState::Stored);
    }
}

}  // namespace kvchat
