#include "ui/context_meter.h"

#include <QLocale>

#include <algorithm>

namespace kvchat {

ContextMeter::ContextMeter(QWidget* parent) : QProgressBar(parent) {
    setObjectName(QStringLiteral("contextBar"));
    setAccessibleName(tr("Tokens in context"));
    setTextVisible(true);
    clear();
}

void ContextMeter::setContextLimit(qint64 tokens) {
    limit_ = std::max<qint64>(1, tokens);
    if (window_ == 0) show(value(), 0);
}

void ContextMeter::setTokens(qint64 tokens) { show(tokens, window_); }

void ContextMeter::setTelemetry(const CacheTelemetry& t) {
    qint64 held = 0;
    for (const LayerTelemetry& l : t.layers) held = std::max<qint64>(held, l.tokens_held);
    // Every layer holds fewer than the conversation's tokens: the cache is a window over it.
    show(t.tokens, !t.layers.empty() && held < t.tokens ? held : 0);
}

void ContextMeter::clear() {
    window_ = 0;
    setRange(0, static_cast<int>(std::min<qint64>(limit_, 1 << 30)));
    setValue(0);
    setFormat(tr("%1 / %2 tokens").arg(0).arg(QLocale().toString(limit_)));
}

void ContextMeter::show(qint64 tokens, qint64 window) {
    window_ = window;
    const QLocale loc;
    if (window > 0) {
        setRange(0, static_cast<int>(std::min<qint64>(window, 1 << 30)));
        setValue(static_cast<int>(std::min<qint64>(window, 1 << 30)));
        setFormat(tr("%1 tokens, window %2").arg(loc.toString(tokens), loc.toString(window)));
        setToolTip(tr("The conversation has %1 tokens; its cache keeps the last %2 of them (older ones are no longer "
                      "attended to).")
                       .arg(loc.toString(tokens), loc.toString(window)));
    } else {
        setRange(0, static_cast<int>(std::min<qint64>(limit_, 1 << 30)));
        setValue(static_cast<int>(std::min<qint64>(tokens, maximum())));
        setFormat(tr("%1 / %2 tokens").arg(loc.toString(tokens), loc.toString(limit_)));
        setToolTip(tr("Tokens in the conversation's cache against the model's context"));
    }
}

}  // namespace kvchat
