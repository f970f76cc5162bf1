#pragma once
// Which messages a strategy switch costs, in words for the preview: "Drops messages 1–3 (412
// tokens; message 3 in part)", "Quantizes messages 2–9 (1,024 tokens)", from the plan's token
// positions and the conversation's message starts (ConversionPlan::message_starts). Messages are
// numbered from 1 as the transcript shows them.
#include "engine/cache/conversion_plan.h"

#include <QString>

namespace kvchat {

// Empty when the switch loses nothing or the plan has no messages to name.
QString droppedMessagesText(const ConversionPlan& plan);
QString quantizedMessagesText(const ConversionPlan& plan);

}  // namespace kvchat
