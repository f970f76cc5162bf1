#pragma once
// Measures how long the GUI event loop goes without running: a timer asks to run every
// kIntervalMs, and each time it runs late, the lateness is a stall (an event the loop was busy
// with, a layout, a parse). The longest is what a user feels as a freeze.
#include <QElapsedTimer>
#include <QObject>
#include <QTimer>

namespace kvchat {

class EventLoopStall : public QObject {
    Q_OBJECT
public:
    static constexpr int kIntervalMs = 5;
    explicit EventLoopStall(QObject* parent = nullptr);

    void start();
    void stop();
    bool running() const { return timer_.isActive(); }
    // The longest gap beyond the interval since start() (ms), and how many ticks were measured.
    double maxStallMs() const { return maxStallMs_; }
    qint64 ticks() const { return ticks_; }

private:
    void tick();
    QTimer timer_;
    QElapsedTimer clock_;
    qint64 lastNs_ = 0;
    double maxStallMs_ = 0;
    qint64 ticks_ = 0;
};

}  // namespace kvchat
