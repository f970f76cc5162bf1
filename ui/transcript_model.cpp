#include "ui/transcript_model.h"

#include "engine/chat/chat_template.h"

#include <QDateTime>
#include <QLocale>

#include <utility>

namespace kvchat {

namespace {

bool sameFigures(const AnswerFigures& a, const AnswerFigures& b) {
    return a.prompt_tokens == b.prompt_tokens && a.generated_tokens == b.generated_tokens &&
           a.cached_tokens == b.cached_tokens && a.prefix_tokens == b.prefix_tokens &&
           a.computed_tokens == b.computed_tokens && a.ttft_ms == b.ttft_ms && a.tokens_per_second == b.tokens_per_second &&
           a.prefill_saved_ms == b.prefill_saved_ms && a.stop_reason == b.stop_reason;
}

bool sameRow(const MessageItem& a, const MessageItem& b) {
    return a.id == b.id && a.ordinal == b.ordinal && a.role == b.role && a.content == b.content &&
           a.repaired == b.repaired && a.createdMs == b.createdMs && sameFigures(a.figures, b.figures) &&
           a.versionCount == b.versionCount && a.versionShown == b.versionShown && a.strategyBefore == b.strategyBefore &&
           a.strategyAfter == b.strategyAfter;
}

QString number(qint64 n) { return QLocale().toString(n); }

QString duration(double ms) {
    if (ms >= 1000) return TranscriptModel::tr("%1 s").arg(ms / 1000.0, 0, 'f', 2);
    return TranscriptModel::tr("%1 ms").arg(ms, 0, 'f', 0);
}

}  // namespace

QString TranscriptModel::figuresText(const AnswerFigures& f) {
    if (!f.present()) return {};
    QStringList parts;
    QString prompt = tr("prompt %1 tokens").arg(number(f.prompt_tokens));
    if (f.cached_tokens > 0 || f.computed_tokens > 0) {
        QString cached = tr("%1 cached").arg(number(f.cached_tokens));
        if (f.prefix_tokens > 0) cached += tr(" (%1 from a prefix)").arg(number(f.prefix_tokens));
        prompt += QStringLiteral(": ") + cached + tr(", %1 computed").arg(number(f.computed_tokens));
    }
    parts << prompt;
    if (f.prefill_saved_ms && f.cached_tokens > 0) parts << tr("prefill saved ~%1").arg(duration(*f.prefill_saved_ms));
    if (f.ttft_ms) parts << tr("first token %1").arg(duration(*f.ttft_ms));
    if (f.tokens_per_second) parts << tr("%1 tok/s").arg(*f.tokens_per_second, 0, 'f', 1);
    parts << tr("%1 tokens").arg(number(f.generated_tokens));
    return parts.join(QStringLiteral(" · "));
}

QString TranscriptModel::endingText(const std::optional<StopReason>& reason) {
    if (!reason) return {};
    switch (*reason) {
        case StopReason::Stopped: return tr("Stopped by you");
        case StopReason::MaxNewTokens: return tr("Hit the answer's token limit");
        case StopReason::EndOfTurn:
        case StopReason::EndOfSequence: return tr("End of turn");
        case StopReason::StopString: return tr("Ended at a stop string");
        case StopReason::ContextFull: return tr("Context full");
    }
    return {};
}

TranscriptModel::TranscriptModel(QObject* parent) : QAbstractListModel(parent) {
    setObjectName(QStringLiteral("transcriptModel"));
    qRegisterMetaType<MessageState>();
}

int TranscriptModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

QVariant TranscriptModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() < 0 || index.row() >= rows_.size()) return {};
    const Row& r = rows_[index.row()];
    const MessageItem& m = r.message;
    switch (role) {
        case Qt::DisplayRole:
        case ContentRole: return m.content;
        case ItemRole: return QVariant::fromValue(m);
        case IdRole: return m.id;
        case OrdinalRole: return m.ordinal;
        case AuthorRole: return static_cast<int>(m.role);
        case StateRole: return static_cast<int>(r.state);
        case FiguresRole: return QVariant::fromValue(m.figures);
        case FiguresTextRole: return figuresText(m.figures);
        case EndingTextRole: return endingText(m.figures.stop_reason);
        case AnswerTextRole:
        case ThinkingRole: {
            if (m.role != MessageRole::Assistant) return role == AnswerTextRole ? m.content : QString();
            // The same split the chat template makes when it drops the reasoning from earlier answers.
            const ThinkingSplit split = split_thinking(m.content.toStdString());
            if (!split.has_thinking) return role == AnswerTextRole ? m.content : QString();
            return QString::fromStdString(role == AnswerTextRole ? split.answer : split.thinking);
        }
        default: return {};
    }
}

QHash<int, QByteArray> TranscriptModel::roleNames() const {
    QHash<int, QByteArray> names = QAbstractListModel::roleNames();
    names.insert({{ItemRole, "item"},
                  {IdRole, "id"},
                  {OrdinalRole, "ordinal"},
                  {AuthorRole, "author"},
                  {ContentRole, "content"},
                  {AnswerTextRole, "answerText"},
                  {ThinkingRole, "thinking"},
                  {StateRole, "state"},
                  {FiguresRole, "figures"},
                  {FiguresTextRole, "figuresText"},
                  {EndingTextRole, "endingText"}});
    return names;
}

bool TranscriptModel::turnShown() const { return turn_ && loaded_ && turn_->conversationId == conversation_; }

void TranscriptModel::open(qint64 conversationId) {
    beginResetModel();
    conversation_ = conversationId;
    loaded_ = false;
    rows_.clear();
    endResetModel();
}

void TranscriptModel::setMessages(qint64 conversationId, const QList<MessageItem>& messages) {
    if (conversationId != conversation_) return;
    QList<Row> rows;
    rows.reserve(messages.size());
    for (const MessageItem& m : messages) rows.push_back({m, MessageState::Stored});
    if (turn_ && turn_->conversationId == conversationId) {
        // What the read found from the turn's start on is the turn's business until it ends.
        if (rows.size() > turn_->base) rows.resize(turn_->base);
        rows += turn_->rows;
    }
    if (loaded_) {
        // The same conversation read again: only the rows that differ change.
        replaceTail(0, rows);
    } else {
        beginResetModel();
        rows_ = rows;
        loaded_ = true;
        endResetModel();
    }
    markUnanswered();
}

void TranscriptModel::setRow(int row, const Row& value) {
    rows_[row] = value;
    const QModelIndex i = index(row);
    Q_EMIT dataChanged(i, i);
}

void TranscriptModel::replaceTail(int first, const QList<Row>& rows) {
    int i = 0;
    // Rows that keep their author change in place; from the first that does not, the rest is
    // removed and inserted again (a view shows a question and an answer differently).
    for (; i < rows.size() && first + i < rows_.size(); ++i) {
        const Row& old = rows_[first + i];
        if (old.message.role != rows[i].message.role) break;
        if (old.state != rows[i].state || !sameRow(old.message, rows[i].message)) setRow(first + i, rows[i]);
    }
    if (first + i < rows_.size()) {
        beginRemoveRows({}, first + i, static_cast<int>(rows_.size()) - 1);
        rows_.resize(first + i);
        endRemoveRows();
    }
    if (i < rows.size()) {
        beginInsertRows({}, first + i, first + static_cast<int>(rows.size()) - 1);
        rows_ += rows.mid(i);
        endInsertRows();
    }
}

void TranscriptModel::markUnanswered() {
    if (rows_.isEmpty() || turnShown()) return;
    const int last = static_cast<int>(rows_.size()) - 1;
    Row r = rows_[last];
    if (r.message.role == MessageRole::User && r.state == MessageState::Stored) {
        r.state = MessageState::Unanswered;
        setRow(last, r);
    }
}

void TranscriptModel::beginTurn(int base, QList<Row> rows, bool sent) {
    Turn t;
    t.conversationId = conversation_;
    t.base = base;
    t.rows = std::move(rows);
    t.replaced = rows_.mid(base);
    t.sent = sent;
    // A question being answered again is no longer unanswered.
    for (Row& r : t.replaced)
        if (r.state == MessageState::Unanswered) r.state = MessageState::Stored;
    turn_ = t;
    if (base > 0 && rows_[base - 1].state == MessageState::Unanswered) {
        Row r = rows_[base - 1];
        r.state = MessageState::Stored;
        setRow(base - 1, r);
    }
    replaceTail(base, turn_->rows);
}

TranscriptModel::Row TranscriptModel::streamingAnswer(int ordinal) {
    Row answer;
    answer.message.ordinal = ordinal;
    answer.message.role = MessageRole::Assistant;
    answer.state = MessageState::Streaming;
    return answer;
}

bool TranscriptModel::beginSend(const QString& text) {
    if (turn_ || !loaded_ || conversation_ == 0) return false;
    const int base = static_cast<int>(rows_.size());
    Row question;
    question.message.ordinal = base;
    question.message.role = MessageRole::User;
    question.message.content = text;
    question.message.createdMs = QDateTime::currentMSecsSinceEpoch();
    question.state = MessageState::Sending;
    const Row answer = streamingAnswer(base + 1);
    beginTurn(base, {question, answer}, true);
    return true;
}

bool TranscriptModel::beginRegenerate() {
    if (turn_ || !loaded_ || rows_.isEmpty()) return false;
    int base = static_cast<int>(rows_.size());
    if (rows_.last().message.role == MessageRole::Assistant) --base;
    if (base == 0 || rows_[base - 1].message.role != MessageRole::User) return false;
    const Row answer = streamingAnswer(base);
    beginTurn(base, {answer}, false);
    return true;
}

bool TranscriptModel::beginEdit(int ordinal, const QString& text) {
    if (turn_ || !loaded_ || ordinal < 0 || ordinal >= rows_.size()) return false;
    if (rows_[ordinal].message.role != MessageRole::User) return false;
    Row question = rows_[ordinal];
    question.message.content = text;
    question.state = MessageState::Sending;
    const Row answer = streamingAnswer(ordinal + 1);
    beginTurn(ordinal, {question, answer}, false);
    return true;
}

void TranscriptModel::appendAnswerText(qint64 conversationId, const QString& piece) {
    if (!turn_ || turn_->conversationId != conversationId || piece.isEmpty()) return;
    Row& answer = turn_->rows.last();
    answer.message.content += piece;
    if (!turnShown()) return;
    const int row = turn_->base + static_cast<int>(turn_->rows.size()) - 1;
    rows_[row].message.content = answer.message.content;
    const QModelIndex i = index(row);
    Q_EMIT dataChanged(i, i, {Qt::DisplayRole, ContentRole, AnswerTextRole, ThinkingRole, ItemRole});
}

void TranscriptModel::finishTurn(const TurnOutcome& outcome) {
    if (!turn_ || turn_->conversationId != outcome.conversationId) return;
    const bool shown = turnShown();
    Turn t = std::move(*turn_);
    turn_.reset();
    QList<Row> rows;
    for (const Row& r : t.rows) {
        if (r.state == MessageState::Sending) {
            // The question as the engine stored it (id, time, text repaired or not).
            rows.push_back({outcome.question.id != 0 ? outcome.question : r.message, MessageState::Stored});
        } else if (outcome.answer.id != 0) {
            rows.push_back({outcome.answer, MessageState::Stored});
        }
        // No answer stored (stopped before its first word): the question is left unanswered.
    }
    if (shown) {
        replaceTail(t.base, rows);
        markUnanswered();
    }
}

QString TranscriptModel::failTurn(qint64 conversationId, bool messageStored) {
    if (!turn_ || turn_->conversationId != conversationId) return {};
    const bool shown = turnShown();
    Turn t = std::move(*turn_);
    turn_.reset();
    if (!messageStored) {
        if (shown) {
            replaceTail(t.base, t.replaced);
            markUnanswered();
        }
        return t.sent ? t.rows.first().message.content : QString();
    }
    if (shown) {
        QList<Row> rows;
        for (Row r : t.rows) {
            if (r.state == MessageState::Sending) r.state = MessageState::Stored;
            else if (r.message.content.isEmpty()) continue;
            else r.state = MessageState::Failed;
            rows.push_back(r);
        }
        replaceTail(t.base, rows);
        markUnanswered();
    }
    return {};
}

}  // namespace kvchat
