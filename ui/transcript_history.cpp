#include "ui/transcript_history.h"

#include <QCoreApplication>

namespace kvchat {

QString strategyChangeText(const StrategyChange& change) {
    return QCoreApplication::translate("TranscriptHistory", "Strategy: %1 → %2")
        .arg(QString::fromStdString(change.from), QString::fromStdString(change.to));
}

void markHistory(QList<MessageItem>& messages, const std::vector<VersionSet>& versions,
                 const std::vector<StrategyChange>& changes) {
    for (MessageItem& m : messages) {
        m.versionCount = 0;
        m.versionShown = 0;
        m.strategyBefore.clear();
        m.strategyAfter.clear();
    }
    for (const VersionSet& v : versions)
        if (v.ordinal >= 0 && v.ordinal < messages.size()) {
            messages[v.ordinal].versionCount = static_cast<int>(v.count);
            messages[v.ordinal].versionShown = static_cast<int>(v.shown);
        }
    if (messages.isEmpty()) return;
    for (const StrategyChange& c : changes) {
        if (c.at < 0) continue;
        if (c.at < messages.size()) messages[c.at].strategyBefore.push_back(strategyChangeText(c));
        else messages.back().strategyAfter.push_back(strategyChangeText(c));
    }
}

}  // namespace kvchat
