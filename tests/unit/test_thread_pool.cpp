// ThreadPool: every index runs once per call, ranges are covered exactly once, errors reach the
// caller, and back-to-back dispatches (a decode step makes ~100) neither lose nor repeat work.
#include "engine/compute/thread_pool.h"

#include <QtTest>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using kvchat::ThreadPool;

class TestThreadPool : public QObject {
    Q_OBJECT
private slots:
    void runCallsEveryIndexOnce() {
        for (int n : {1, 2, 3, 5}) {
            ThreadPool pool(n);
            QCOMPARE(pool.size(), n);
            std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
            std::atomic<bool> caller_is_zero{false};
            std::atomic<int> wrong_total{0};
            const auto caller = std::this_thread::get_id();
            pool.run([&](int i, int total) {
                if (total != n) wrong_total.fetch_add(1);
                calls[size_t(i)].fetch_add(1);
                if (i == 0 && std::this_thread::get_id() == caller) caller_is_zero = true;
            });
            for (auto& c : calls) QCOMPARE(c.load(), 1);
            QVERIFY(caller_is_zero.load());
            QCOMPARE(wrong_total.load(), 0);
        }
    }

    void defaultSizeIsCoreCount() {
        ThreadPool pool(0);
        QCOMPARE(pool.size(), int(std::max(1u, std::thread::hardware_concurrency())));
    }

    void parallelForCoversRangeOnce() {
        for (int n : {1, 2, 3}) {
            ThreadPool pool(n);
            for (int64_t len : {0, 1, 2, 7, 1000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(len));
                std::atomic<int> empty_chunks{0};
                pool.parallel_for(len, [&](int64_t b, int64_t e) {
                    if (b >= e) empty_chunks.fetch_add(1);
                    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
                });
                for (auto& h : hits) QCOMPARE(h.load(), 1);
                QCOMPARE(empty_chunks.load(), 0);
            }
        }
    }

    // Pieces of `grain` items, each exactly once, none longer than the grain, none empty.
    void parallelForDynamicCoversRangeOnce() {
        for (int n : {1, 2, 3}) {
            ThreadPool pool(n);
            for (int64_t len : {0, 1, 2, 7, 1000}) {
                for (int64_t grain : {0, 1, 3, 64, 5000}) {
                    std::vector<std::atomic<int>> hits(static_cast<size_t>(len));
                    std::atomic<int> bad_pieces{0};
                    pool.parallel_for_dynamic(len, grain, [&](int64_t b, int64_t e) {
                        if (b >= e || (e - b > std::max<int64_t>(grain, 1) && e - b != len)) bad_pieces.fetch_add(1);
                        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
                    });
                    for (auto& h : hits) QCOMPARE(h.load(), 1);
                    QCOMPARE(bad_pieces.load(), 0);
                }
            }
        }
    }

    // A thread held up inside its first piece leaves the remaining pieces to the others, which a
    // fixed split into equal shares could not do.
    void parallelForDynamicRoutesAroundASlowThread() {
        ThreadPool pool(2);
        std::atomic<int> by_slow{0}, total{0};
        std::atomic<bool> release{false};
        const auto caller = std::this_thread::get_id();
        pool.parallel_for_dynamic(100, 1, [&](int64_t, int64_t) {
            total.fetch_add(1);
            if (std::this_thread::get_id() != caller) {
                by_slow.fetch_add(1);
                // The worker stalls in its first piece until every piece has been taken (the
                // time limit only keeps a broken pool from hanging the suite).
                const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                while (!release.load() && total.load() < 100 && std::chrono::steady_clock::now() < limit)
                    std::this_thread::sleep_for(std::chrono::microseconds(50));
            } else if (total.load() == 100) {
                release = true;
            }
        });
        QCOMPARE(total.load(), 100);
        QVERIFY2(by_slow.load() <= 1, qPrintable(QString("the stalled worker took %1 pieces").arg(by_slow.load())));
    }

    void manyQuickDispatches() {
        ThreadPool pool(3);
        std::atomic<int64_t> total{0};
        for (int k = 0; k < 20000; ++k) pool.run([&](int i, int) { total.fetch_add(i + 1); });
        QCOMPARE(total.load(), int64_t(20000) * 6);
    }

    // parallel_for does not wait for a worker that has not joined by the time the caller is done;
    // such a worker must then neither run that call's chunks nor take the next call (a run(),
    // which every worker joins) twice or under the wrong index. Calls of all three kinds back to
    // back, so that late workers meet every kind of next call.
    void lateWorkersMixedDispatches() {
        for (int n : {2, 3}) {
            ThreadPool pool(n);
            std::atomic<int64_t> run_total{0}, items{0};
            std::atomic<int> bad_index{0};
            const int kRounds = 20000;
            for (int k = 0; k < kRounds; ++k) {
                pool.run([&](int i, int total) {
                    if (i < 0 || i >= total) bad_index.fetch_add(1);
                    run_total.fetch_add(i + 1);
                });
                pool.parallel_for(7, [&](int64_t b, int64_t e) { items.fetch_add(e - b); });
                pool.parallel_for_dynamic(5, 1, [&](int64_t b, int64_t e) { items.fetch_add(e - b); });
            }
            QCOMPARE(bad_index.load(), 0);
            QCOMPARE(run_total.load(), int64_t(kRounds) * n * (n + 1) / 2);
            QCOMPARE(items.load(), int64_t(kRounds) * 12);
        }
    }

    // Workers that went to sleep between calls still wake up.
    void dispatchAfterIdle() {
        ThreadPool pool(2);
        std::atomic<int> n{0};
        pool.run([&](int, int) { n.fetch_add(1); });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        pool.run([&](int, int) { n.fetch_add(1); });
        QCOMPARE(n.load(), 4);
    }

    void workerExceptionReachesCaller() {
        ThreadPool pool(2);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, pool.run([](int i, int) {
            if (i == 1) throw std::runtime_error("worker");
        }));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, pool.run([](int i, int) {
            if (i == 0) throw std::runtime_error("caller");
        }));
        // The pool stays usable.
        std::atomic<int> n{0};
        pool.run([&](int, int) { n.fetch_add(1); });
        QCOMPARE(n.load(), 2);
    }

    // Workers are started once: the same thread serves index 1 on every call, and it is not the
    // caller. The dispatch time is printed, not asserted: the machine may be shared and loaded.
    void workersPersist() {
        ThreadPool pool(2);
        const auto caller = std::this_thread::get_id();
        std::vector<std::thread::id> seen(500);
        const auto t0 = std::chrono::steady_clock::now();
        for (auto& id : seen) pool.run([&](int i, int) {
            if (i == 1) id = std::this_thread::get_id();
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        qInfo("dispatch: %.2f us", s / double(seen.size()) * 1e6);
        QVERIFY(seen[0] != caller);
        for (const auto& id : seen) QCOMPARE(id, seen[0]);
    }
};

QTEST_GUILESS_MAIN(TestThreadPool)
#include "test_thread_pool.moc"
