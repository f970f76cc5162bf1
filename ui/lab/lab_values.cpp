#include "ui/lab/lab_values.h"

namespace kvchat {

void registerLabValues() {
    qRegisterMetaType<kvchat::ConversionPlan>();
    qRegisterMetaType<std::vector<kvchat::ComparisonRow>>();
}

}  // namespace kvchat
