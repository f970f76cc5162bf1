#pragma once
// The cache lab's values that cross from the engine worker's thread to the GUI thread: a
// strategy switch's plan and a comparison's rows (copies of engine values, never pointers).
#include "engine/cache/conversion_plan.h"
#include "engine/generate/comparison.h"

#include <QMetaType>

#include <vector>

namespace kvchat {

// Registers the values above for queued connections; called once before the worker starts.
void registerLabValues();

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::ConversionPlan)
Q_DECLARE_METATYPE(std::vector<kvchat::ComparisonRow>)
