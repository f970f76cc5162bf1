#include "ui/lab/plan_messages.h"

#include <QCoreApplication>

namespace kvchat {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("PlanMessages", text); }

// "messages 1–3 (412 tokens; message 3 in part)": `verb` the positions [first, last], `tokens` of them.
QString describe(const ConversionPlan& plan, const char* verb, int64_t first, int64_t last, int64_t tokens) {
    const auto [a, b] = messages_spanning(plan.message_starts, first, last);
    if (a < 0 || tokens <= 0) return {};
    const auto& starts = plan.message_starts;
    const int64_t n = static_cast<int64_t>(starts.size());
    // Whole: from a message's first token to the last before the next message (the end of the
    // cache for the last message is not known here, so the last message is never called whole).
    const bool wholeFirst = first <= starts[static_cast<size_t>(a)];
    const bool wholeLast = b + 1 < n && last + 1 >= starts[static_cast<size_t>(b + 1)];
    QString which = a == b ? tr("message %1").arg(a + 1) : tr("messages %1–%2").arg(a + 1).arg(b + 1);
    QString part;
    if (a == b && !(wholeFirst && wholeLast)) part = tr("in part");
    else if (a != b && !wholeFirst && !wholeLast) part = tr("messages %1 and %2 in part").arg(a + 1).arg(b + 1);
    else if (a != b && !wholeFirst) part = tr("message %1 in part").arg(a + 1);
    else if (a != b && !wholeLast) part = tr("message %1 in part").arg(b + 1);
    const QString count = tokens == 1 ? tr("1 token") : tr("%L1 tokens").arg(tokens);
    return QStringLiteral("%1 %2 (%3%4)").arg(tr(verb), which, count, part.isEmpty() ? QString() : QStringLiteral("; ") + part);
}

}  // namespace

QString droppedMessagesText(const ConversionPlan& plan) {
    return describe(plan, QT_TRANSLATE_NOOP("PlanMessages", "Drops"), plan.evicted_first, plan.evicted_last, plan.tokens_evicted);
}

QString quantizedMessagesText(const ConversionPlan& plan) {
    return describe(plan, QT_TRANSLATE_NOOP("PlanMessages", "Quantizes"), plan.quantized_first, plan.quantized_last,
                    plan.tokens_quantized);
}

}  // namespace kvchat
