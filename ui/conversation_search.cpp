#include "ui/conversation_search.h"

#include "ui/conversation_list_model.h"
#include "ui/conversation_search_model.h"
#include "ui/message_view.h"
#include "ui/transcript_model.h"
#include "ui/transcript_view.h"

#include <QFrame>
#include <QLayout>
#include <QLineEdit>
#include <QListView>
#include <QScrollBar>
#include <QTimer>

namespace kvchat {

namespace {
// The transcript is read and built a few messages per event-loop turn: wait for it this long.
constexpr int kRetryMs = 40, kMaxTries = 150;
}  // namespace

ConversationSearch::ConversationSearch(QLineEdit* field, QListView* list, ConversationSearchModel* model,
                                       TranscriptView* transcript, QObject* parent)
    : QObject(parent), field_(field), list_(list), model_(model), transcript_(transcript) {
    setObjectName(QStringLiteral("conversationSearch"));
    qRegisterMetaType<QList<SearchMatch>>();
    retry_ = new QTimer(this);
    retry_->setInterval(kRetryMs);
    connect(retry_, &QTimer::timeout, this, &ConversationSearch::tryJump);
    // Choosing the conversation that is already open (a click, Enter) jumps too.
    auto open = [this](const QModelIndex& index) { jumpToMatch(index.data(ConversationListModel::IdRole).toLongLong()); };
    connect(list_, &QListView::clicked, this, open);
    connect(list_, &QListView::activated, this, open);
}

void ConversationSearch::showMatches(const QString& query, const QList<SearchMatch>& matches) {
    if (query != field_->text()) return;  // an older search
    model_->setSnippets(matches);
}

void ConversationSearch::jumpToMatch(qint64 id) {
    if (!model_->searching()) return;
    pending_ = model_->match(id);
    tries_ = 0;
    if (!pending_) return;  // found by its title: nothing to scroll to
    tryJump();
}

void ConversationSearch::tryJump() {
    if (!pending_) return retry_->stop();
    TranscriptModel* m = transcript_->model();
    int row = -1;
    if (m && m->conversationId() == pending_->conversationId && m->loaded())
        for (int r = 0; r < m->rowCount() && row < 0; ++r)
            if (m->message(r).id == pending_->messageId) row = r;
    const QList<MessageView*> views = transcript_->messageViews();
    if (row < 0 || row >= views.size()) {
        if (++tries_ > kMaxTries) pending_.reset();  // another conversation was opened meanwhile, or it is gone
        if (pending_ && !retry_->isActive()) retry_->start();
        return;
    }
    retry_->stop();
    pending_.reset();
    MessageView* v = views[row];
    // Laid out now, so its place is known; then the message's top a little below the view's.
    transcript_->widget()->layout()->activate();
    transcript_->verticalScrollBar()->setValue(std::max(0, v->y() - 12));
    delete highlight_;
    auto* frame = new QFrame(v);
    frame->setObjectName(QStringLiteral("searchMatchHighlight"));
    frame->setAttribute(Qt::WA_TransparentForMouseEvents);
    frame->setFrameShape(QFrame::Box);
    frame->setLineWidth(3);
    QPalette p = frame->palette();
    p.setColor(QPalette::WindowText, p.color(QPalette::Highlight));
    frame->setPalette(p);
    frame->setGeometry(v->rect());
    frame->show();
    frame->raise();
    highlight_ = frame;
    QTimer::singleShot(kHighlightMs, frame, &QObject::deleteLater);
}

}  // namespace kvchat
