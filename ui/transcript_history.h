#pragma once
// What the transcript shows besides the messages: the versions of a place (‹ 2/3 › under a
// regenerated answer or an edited message) and where the cache strategy changed (a divider
// between messages), put on the messages as the store reader reads them.
#include "ui/engine_values.h"

#include <vector>

namespace kvchat {

// "Strategy: dynamic → quantized:nbits=4"
QString strategyChangeText(const StrategyChange& change);
// Sets each message's versions and strategy dividers: a change at `at` messages goes above
// message `at`, or after the last message when there is none yet.
void markHistory(QList<MessageItem>& messages, const std::vector<VersionSet>& versions,
                 const std::vector<StrategyChange>& changes);

}  // namespace kvchat
