// CRC-32C of snapshot sections: the three-stream hardware version against a bitwise reference,
// at lengths around its 24 KiB stretches, and chained over pieces as the format allows.
#include "engine/cache/snapshot.h"

#include <QtTest>

#include <cstdint>
#include <random>
#include <vector>

namespace {

uint32_t reference(const uint8_t* p, size_t n, uint32_t crc = 0) {
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

}  // namespace

class TestCrc32c : public QObject {
    Q_OBJECT
private slots:
    void checkValue() { QCOMPARE(kvchat::crc32c("123456789", 9), 0xE3069283u); }

    void matchesBitwiseReference() {
        std::mt19937 rng(5);
        std::vector<uint8_t> buf(3 * 8192 * 7 + 100);
        for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{3 * 8192 - 1}, size_t{3 * 8192},
                         size_t{3 * 8192 + 1}, size_t{3 * 8192 * 2 + 13}, buf.size()})
            for (size_t off : {size_t{0}, size_t{3}}) {
                if (off + n > buf.size()) continue;
                QCOMPARE(kvchat::crc32c(buf.data() + off, n), reference(buf.data() + off, n));
            }
        // Chained: the CRC of a whole equals the CRC of its tail continued from its head's.
        for (size_t cut : {size_t{5}, size_t{8192}, size_t{3 * 8192 + 9}}) {
            const uint32_t head = kvchat::crc32c(buf.data(), cut);
            QCOMPARE(kvchat::crc32c(buf.data() + cut, buf.size() - cut, head), reference(buf.data(), buf.size()));
        }
    }
};

QTEST_GUILESS_MAIN(TestCrc32c)
#include "test_crc32c.moc"
