#pragma once
// The status bar's context meter: tokens in the open conversation against what its cache can
// attend to. A cache whose every layer forgets (a sliding window, a sink) holds at most its
// window however long the conversation grows, so it reads "1,197 tokens, window 256" instead of
// counting against the model's context.
#include "engine/cache/cache.h"

#include <QProgressBar>

namespace kvchat {

class ContextMeter : public QProgressBar {
    Q_OBJECT
public:
    explicit ContextMeter(QWidget* parent = nullptr);
    // The model's context (the meter's end while the cache keeps every token).
    void setContextLimit(qint64 tokens);
    // The conversation's tokens as a turn or the list reports them (no cache figures).
    void setTokens(qint64 tokens);
    void setTelemetry(const CacheTelemetry& telemetry);
    void clear();
    // Held tokens of the window when every layer forgets; 0 otherwise.
    qint64 window() const { return window_; }

private:
    void show(qint64 tokens, qint64 window);
    qint64 limit_ = 1;
    qint64 window_ = 0;
};

}  // namespace kvchat
