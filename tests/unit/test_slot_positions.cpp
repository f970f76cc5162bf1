// SlotPositions: where each position goes, what a crop forgets, which saved states are possible,
// and the visibility rule, against the definitions written out here.
#include "engine/cache/slot_positions.h"

#include <QtTest>

#include <vector>

using kvchat::SlotPositions;

class TestSlotPositions : public QObject {
    Q_OBJECT
private slots:
    void inOrderAppends() {
        SlotPositions s = SlotPositions::in_order();
        s.grow(8);
        for (int32_t p = 0; p < 6; ++p) {
            QCOMPARE(s.slot_for(p), int64_t(p));
            QVERIFY(!s.put(s.slot_for(p), p));
        }
        QCOMPARE(s.used(), int64_t(6));
        QCOMPARE(s.held(), int64_t(6));
        QCOMPARE(s.oldest(0), 0);
        s.crop(4);
        QCOMPARE(s.used(), int64_t(4));
        QCOMPARE(s.at(4), SlotPositions::kEmpty);
        QCOMPARE(s.slot_for(4), int64_t(4));  // the next token goes right after
        s.crop(9);                            // past the end: nothing to forget
        QCOMPARE(s.used(), int64_t(4));
        s.clear();
        QCOMPARE(s.held(), int64_t(0));
        QCOMPARE(s.oldest(0), SlotPositions::kEmpty);
    }

    void ringWithSinks() {
        // 2 sinks, then a ring of 3: position p >= 2 in slot 2 + (p - 2) % 3.
        SlotPositions s = SlotPositions::ring(2, 3);
        s.grow(5);
        int overwrites = 0;
        for (int32_t p = 0; p < 11; ++p) {
            const int64_t want = p < 2 ? p : 2 + (p - 2) % 3;
            QCOMPARE(s.slot_for(p), want);
            overwrites += s.put(s.slot_for(p), p);
        }
        QCOMPARE(overwrites, 11 - 5);
        QCOMPARE(s.held(), int64_t(5));
        const std::vector<int32_t> held(s.positions(), s.positions() + s.used());
        QCOMPARE(held, (std::vector<int32_t>{0, 1, 8, 9, 10}));
        QCOMPARE(s.oldest(2), 8);  // the oldest recent token
        QCOMPARE(s.oldest(0), 0);
        s.crop(9);  // forgets 9 and 10, keeps the slots' places
        QCOMPARE(s.held(), int64_t(3));
        QCOMPARE(s.at(3), SlotPositions::kEmpty);
        QCOMPARE(s.used(), int64_t(5));
    }

    void savedStatesAreChecked() {
        SlotPositions order = SlotPositions::in_order();
        const int32_t good[] = {0, 1, 2};
        const int32_t gap[] = {0, 2, 3};
        QVERIFY(order.valid(good, 3, 3));
        QVERIFY(!order.valid(good, 3, 2));  // more slots than positions seen
        QVERIFY(!order.valid(gap, 3, 4));
        SlotPositions ring = SlotPositions::ring(1, 3);
        const int32_t e = SlotPositions::kEmpty;
        const int32_t ok[] = {0, 7, e, 6};
        const int32_t wrong_slot[] = {0, 6, e, 7};
        const int32_t future[] = {0, 7, e, 6};
        const int32_t negative[] = {0, -2, e, e};
        QVERIFY(ring.valid(ok, 4, 8));
        QVERIFY(!ring.valid(wrong_slot, 4, 8));
        QVERIFY(!ring.valid(future, 4, 7));  // position 7 not seen yet
        QVERIFY(!ring.valid(negative, 4, 8));
        ring.grow(4);
        ring.assign(ok, 4);
        QCOMPARE(ring.held(), int64_t(3));
        QCOMPARE(ring.oldest(1), 6);
    }

    void visibilityRule() {
        // q sees k when k <= q and (k is a sink, or no window, or q - k < window).
        for (int window : {0, 1, 4})
            for (int sinks : {0, 2})
                for (int32_t q = 0; q < 12; ++q)
                    for (int32_t k = 0; k < 12; ++k) {
                        bool want = k <= q;
                        if (want && k >= sinks && window > 0) want = q - k <= window - 1;
                        QCOMPARE(SlotPositions::visible(q, k, window, sinks), want);
                    }
    }
};

QTEST_GUILESS_MAIN(TestSlotPositions)
#include "test_slot_positions.moc"
