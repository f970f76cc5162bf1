#include "ui/event_loop_stall.h"

#include <algorithm>

namespace kvchat {

EventLoopStall::EventLoopStall(QObject* parent) : QObject(parent) {
    timer_.setInterval(kIntervalMs);
    timer_.setTimerType(Qt::PreciseTimer);
    connect(&timer_, &QTimer::timeout, this, &EventLoopStall::tick);
}

void EventLoopStall::start() {
    maxStallMs_ = 0;
    ticks_ = 0;
    clock_.start();
    lastNs_ = 0;
    timer_.start();
}

void EventLoopStall::stop() {
    tick();
    timer_.stop();
}

void EventLoopStall::tick() {
    if (!clock_.isValid()) return;
    const qint64 now = clock_.nsecsElapsed();
    const double gapMs = static_cast<double>(now - lastNs_) / 1e6;
    lastNs_ = now;
    ++ticks_;
    maxStallMs_ = std::max(maxStallMs_, gapMs - kIntervalMs);
}

}  // namespace kvchat
