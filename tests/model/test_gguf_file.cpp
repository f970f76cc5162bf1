// GgufFile: the default model's known shape; round trips through the test writer for every
// metadata type, GGUF v2 and v3 and several alignments; and refusal of malformed files, each with
// a message naming the problem (every truncation, absurd lengths, unknown types, bad dimensions,
// bad offsets and alignments, duplicates, and the inputs the fuzzer once crashed on).
#include "engine/common/sha256.h"
#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model_path.h"
#include "support/gguf_writer.h"
#include "support/test_paths.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <fstream>
#include <map>
#include <unistd.h>

using kvchat::GgufArray;
using kvchat::GgufFile;
using kvchat::GgufType;
using kvchat::GgufValue;
using kvchat::TensorType;
using namespace kvchat::test;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// The message of the kvchat::Error that opening `path` throws; a null QString when it opens.
// Any other exception escapes and fails the test.
QString refusal(const std::string& path) {
    try {
        GgufFile::open(path);
    } catch (const kvchat::Error& e) {
        return QString::fromStdString(e.what());
    }
    return QString();
}

std::string pattern(size_t n, uint8_t seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(seed + i * 7));
    return s;
}

// Resident set size in bytes, from /proc/self/statm.
size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    size_t total = 0, resident = 0;
    statm >> total >> resident;
    return resident * size_t(sysconf(_SC_PAGESIZE));
}

// Address ranges where the file at `path` is mapped into this process, from /proc/self/maps.
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(const std::string& path) {
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path) != 0) continue;
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) out.emplace_back(lo, hi);
    }
    return out;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
    if (a.type != b.type || a.v.index() != b.v.index()) return false;
    if (a.type != GgufType::ARRAY) return a.v == b.v;
    const GgufArray& x = *std::get<std::shared_ptr<GgufArray>>(a.v);
    const GgufArray& y = *std::get<std::shared_ptr<GgufArray>>(b.v);
    if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
        if (!same_value(x.items[i], y.items[i])) return false;
    return true;
}

// Metadata of every value type, nested arrays included. Floats are exactly representable in
// float32 so that the values read back compare exactly.
std::vector<std::pair<std::string, GgufValue>> every_type_metadata() {
    std::vector<GgufValue> nested;
    for (uint64_t row = 0; row < 3; ++row)
        nested.push_back(gguf_array(GgufType::UINT16, {gguf_uint(GgufType::UINT16, row), gguf_uint(GgufType::UINT16, 65535 - row)}));
    return {
        {"general.architecture", gguf_string("tiny")},
        {"test.u8", gguf_uint(GgufType::UINT8, 200)},
        {"test.i8", gguf_int(GgufType::INT8, -100)},
        {"test.u16", gguf_uint(GgufType::UINT16, 60000)},
        {"test.i16", gguf_int(GgufType::INT16, -30000)},
        {"test.u32", gguf_uint(GgufType::UINT32, 4000000000u)},
        {"test.i32", gguf_int(GgufType::INT32, -2000000000)},
        {"test.f32", gguf_float(GgufType::FLOAT32, 1.5)},
        {"test.bool_true", gguf_bool(true)},
        {"test.bool_false", gguf_bool(false)},
        {"test.string", gguf_string("h\xc3\xa9llo, world")},
        {"test.empty_string", gguf_string("")},
        {"test.u64", gguf_uint(GgufType::UINT64, (uint64_t(1) << 63) + 5)},
        {"test.i64", gguf_int(GgufType::INT64, -(int64_t(1) << 62))},
        {"test.f64", gguf_float(GgufType::FLOAT64, 3.141592653589793)},
        {"test.strings", gguf_array(GgufType::STRING, {gguf_string("<pad>"), gguf_string(""), gguf_string("\xe2\x96\x81the")})},
        {"test.floats", gguf_array(GgufType::FLOAT32, {gguf_float(GgufType::FLOAT32, -0.25), gguf_float(GgufType::FLOAT32, 1e10f)})},
        {"test.ints", gguf_array(GgufType::INT32, {gguf_int(GgufType::INT32, 1), gguf_int(GgufType::INT32, -3), gguf_int(GgufType::INT32, 6)})},
        {"test.bools", gguf_array(GgufType::BOOL, {gguf_bool(false), gguf_bool(true)})},
        {"test.u64s", gguf_array(GgufType::UINT64, {gguf_uint(GgufType::UINT64, ~uint64_t(0))})},
        {"test.f64s", gguf_array(GgufType::FLOAT64, {gguf_float(GgufType::FLOAT64, 0.1)})},
        {"test.empty", gguf_array(GgufType::UINT8, {})},
        {"test.nested", gguf_array(GgufType::ARRAY, nested)},
    };
}

// Tensors of several types. Byte sizes follow the GGML layouts: F32 4 bytes, F16 2 bytes,
// Q8_0 34 bytes per 32 elements, Q4_K 144 bytes per 256 elements.
std::vector<GgufTensorSpec> some_tensors() {
    return {
        {"token_embd.weight", uint32_t(TensorType::F32), {4, 3}, pattern(4 * 3 * 4, 1), {}},
        {"blk.0.attn_q.weight", uint32_t(TensorType::Q8_0), {64, 2}, pattern(2 * 2 * 34, 2), {}},
        {"output_norm.weight", uint32_t(TensorType::F16), {5}, pattern(5 * 2, 3), {}},
        {"blk.0.ffn_up.weight", uint32_t(TensorType::Q4_K), {256, 1, 2, 1}, pattern(2 * 144, 4), {}},
        {"blk.0.attn_k.weight", uint32_t(TensorType::BF16), {2, 3, 4}, pattern(24 * 2, 5), {}},
    };
}

// A small valid file that the bad-input cases start from.
GgufWriter small_writer(uint32_t version = 3) {
    GgufWriter w(version);
    w.add_string("general.architecture", "tiny");
    w.add_uint32("tiny.block_count", 1);
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a", "b"});
    w.add_float32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f});
    w.add_tensor({"a", uint32_t(TensorType::F32), {8, 2}, pattern(64, 9), {}});
    w.add_tensor({"b", uint32_t(TensorType::Q8_0), {32}, pattern(34, 8), {}});
    return w;
}

std::string with_version(std::string bytes, uint32_t v) {
    std::memcpy(bytes.data() + 4, &v, 4);
    return bytes;
}

std::string sha256_hex(const std::string& bytes, size_t n) {
    kvchat::Sha256 sha;
    sha.update(bytes.data(), n);
    return sha.hex_digest();
}

}  // namespace

class TestGgufFile : public QObject {
    Q_OBJECT
private slots:
    void defaultModel() {
        const std::string path = kvchat::resolve_model_path("");
        if (!QFileInfo::exists(QString::fromStdString(path)))
            QFAIL(qPrintable("default model missing at " + QString::fromStdString(path) +
                             " (run packaging/kvchat.sh model)"));

        const size_t rss_before = resident_bytes();
        std::unique_ptr<GgufFile> f = GgufFile::open(path);
        const size_t rss_after = resident_bytes();

        QCOMPARE(f->path(), path);
        QVERIFY(f->version() == 2 || f->version() == 3);
        QCOMPARE(f->get_string("general.architecture"), std::string("gemma3"));
        QCOMPARE(f->get_uint("gemma3.block_count"), uint64_t(18));
        QCOMPARE(f->get_uint("gemma3.embedding_length"), uint64_t(640));
        QCOMPARE(f->get_uint("gemma3.attention.head_count"), uint64_t(4));
        QCOMPARE(f->get_uint("gemma3.attention.head_count_kv"), uint64_t(1));
        QCOMPARE(f->get_uint("gemma3.attention.sliding_window"), uint64_t(512));
        const GgufArray& tokens = f->get_array("tokenizer.ggml.tokens");
        QCOMPARE(tokens.elem_type, GgufType::STRING);
        QCOMPARE(tokens.items.size(), size_t(262144));
        QVERIFY(std::holds_alternative<std::string>(tokens.items[262143].v));

        QCOMPARE(f->tensors().size(), size_t(236));
        std::map<TensorType, int> per_type;
        for (const kvchat::TensorView& t : f->tensors()) ++per_type[t.type];
        QCOMPARE(per_type[TensorType::Q5_0], 81);
        QCOMPARE(per_type[TensorType::Q4_K], 27);
        QCOMPARE(per_type[TensorType::Q8_0], 10);
        QCOMPARE(per_type[TensorType::Q6_K], 9);
        QCOMPARE(per_type[TensorType::F32], 109);
        QCOMPARE(per_type.size(), size_t(5));

        const kvchat::TensorView* embd = f->tensor("token_embd.weight");
        QVERIFY(embd);
        QCOMPARE(embd->type, TensorType::Q8_0);
        QCOMPARE(embd->n_dims, 2);
        QCOMPARE(embd->ne, (std::array<int64_t, 4>{640, 262144, 1, 1}));
        QCOMPARE(embd->nbytes, size_t(262144) * (640 / 32) * 34);
        QVERIFY(f->tensor("no.such.tensor") == nullptr);

        // Every tensor lies inside the file's mapping: the weights are used in place. The file
        // keeps GGUF's default alignment of 32 bytes, so each tensor starts on one.
        const auto maps = mappings_of(path);
        QVERIFY(!maps.empty());
        const uint64_t alignment = f->get_uint("general.alignment", 32);
        for (const kvchat::TensorView& t : f->tensors()) {
            QCOMPARE(reinterpret_cast<uintptr_t>(t.data) % alignment, uintptr_t(0));
            const auto lo = reinterpret_cast<uintptr_t>(t.data);
            bool inside = false;
            for (const auto& [a, b] : maps) inside = inside || (lo >= a && lo + t.nbytes <= b);
            QVERIFY2(inside, t.name.c_str());
        }
        // Nothing copied: the resident growth is the metadata, not the ~250 MB of weights. The
        // metadata values are held as declared (one GgufValue each), and the three vocabulary
        // arrays alone hold 3 x 262144 of them; beyond those, ~20 MB.
        const size_t vocabulary_values = size_t(3) * 262144 * sizeof(GgufValue);
        const size_t growth = rss_after > rss_before ? rss_after - rss_before : 0;
        qInfo("resident growth on open: %.1f MB (bound %.1f MB)", growth / 1e6, (vocabulary_values + 20e6) / 1e6);
        QVERIFY(growth < vocabulary_values + size_t(20e6));

        QCOMPARE(f->fingerprint().size(), size_t(64));
        QCOMPARE(GgufFile::open(path)->fingerprint(), f->fingerprint());
    }

    void roundTrip_data() {
        QTest::addColumn<uint32_t>("version");
        QTest::addColumn<uint32_t>("alignment");
        QTest::newRow("v3 align 32") << 3u << 32u;
        QTest::newRow("v2 align 32") << 2u << 32u;
        QTest::newRow("v3 align 64") << 3u << 64u;
        QTest::newRow("v3 align 8") << 3u << 8u;
        QTest::newRow("v2 align 4096") << 2u << 4096u;
    }
    void roundTrip() {
        QFETCH(uint32_t, version);
        QFETCH(uint32_t, alignment);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/tiny.gguf").toStdString();
        GgufWriter w(version, alignment);
        const auto metadata = every_type_metadata();
        for (const auto& [key, value] : metadata) w.add(key, value);
        const auto tensors = some_tensors();
        for (const auto& t : tensors) w.add_tensor(t);
        const std::string bytes = w.bytes();
        write_bytes(path, bytes);

        const std::unique_ptr<GgufFile> f = GgufFile::open(path);
        QCOMPARE(f->version(), version);
        QCOMPARE(f->file_size(), bytes.size());
        // The writer adds general.alignment at the end when it is not the default.
        const size_t expected_pairs = metadata.size() + (alignment != 32 ? 1 : 0);
        QCOMPARE(f->metadata().size(), expected_pairs);
        for (size_t i = 0; i < metadata.size(); ++i) {
            QCOMPARE(f->metadata()[i].first, metadata[i].first);
            QVERIFY2(same_value(f->metadata()[i].second, metadata[i].second), metadata[i].first.c_str());
            QVERIFY(f->find(metadata[i].first) == &f->metadata()[i].second);
        }
        if (alignment != 32) QCOMPARE(f->get_uint("general.alignment"), uint64_t(alignment));

        QCOMPARE(f->tensors().size(), tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            const kvchat::TensorView* t = f->tensor(tensors[i].name);
            QVERIFY(t);
            QCOMPARE(t, &f->tensors()[i]);
            QCOMPARE(uint32_t(t->type), tensors[i].type);
            QCOMPARE(t->n_dims, int(tensors[i].ne.size()));
            for (int d = 0; d < 4; ++d)
                QCOMPARE(t->ne[d], d < t->n_dims ? tensors[i].ne[d] : int64_t(1));
            QCOMPARE(t->nbytes, tensors[i].data.size());
            QVERIFY(std::memcmp(t->data, tensors[i].data.data(), t->nbytes) == 0);
            // The mapping starts on a page boundary, so an aligned file offset is an aligned address.
            QCOMPARE(reinterpret_cast<uintptr_t>(t->data) % alignment, uintptr_t(0));
        }
        QCOMPARE(f->fingerprint(), sha256_hex(bytes, w.table_end()));
    }

    void typedGetters() {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/tiny.gguf").toStdString();
        GgufWriter w;
        for (const auto& [key, value] : every_type_metadata()) w.add(key, value);
        w.write(path);
        const std::unique_ptr<GgufFile> f = GgufFile::open(path);

        QCOMPARE(f->get_uint("test.u8"), uint64_t(200));
        QCOMPARE(f->get_uint("test.u16"), uint64_t(60000));
        QCOMPARE(f->get_uint("test.u32"), uint64_t(4000000000u));
        QCOMPARE(f->get_uint("test.u64"), (uint64_t(1) << 63) + 5);
        QCOMPARE(f->get_float("test.f32"), 1.5);
        QCOMPARE(f->get_float("test.f64"), 3.141592653589793);
        QCOMPARE(f->get_float("test.i32"), -2000000000.0);  // integers are numbers too
        QCOMPARE(f->get_bool("test.bool_true"), true);
        QCOMPARE(f->get_bool("test.bool_false"), false);
        QCOMPARE(f->get_string("test.string"), std::string("h\xc3\xa9llo, world"));
        QCOMPARE(f->get_array("test.strings").items.size(), size_t(3));
        QCOMPARE(std::get<std::string>(f->get_array("test.strings").items[2].v), std::string("\xe2\x96\x81the"));
        QCOMPARE(f->get_array("test.nested").elem_type, GgufType::ARRAY);

        // Fallbacks apply to absent keys only.
        QCOMPARE(f->get_uint("absent", 7), uint64_t(7));
        QCOMPARE(f->get_float("absent", 0.5), 0.5);
        QCOMPARE(f->get_bool("absent", true), true);
        QCOMPARE(f->get_string("absent", "x"), std::string("x"));
        QCOMPARE(f->get_uint("test.u8", 7), uint64_t(200));
        QVERIFY(f->find("absent") == nullptr);

        const auto message = [&](auto&& call) {
            try {
                call();
            } catch (const kvchat::Error& e) {
                return QString::fromStdString(e.what());
            }
            return QString();
        };
        QVERIFY(message([&] { f->get_uint("absent"); }).contains("'absent' is missing"));
        QVERIFY(message([&] { f->get_array("absent"); }).contains("'absent' is missing"));
        QVERIFY(message([&] { f->get_uint("test.i8"); }).contains("'test.i8' is negative"));
        QVERIFY(message([&] { f->get_uint("test.string"); }).contains("'test.string' is a string"));
        QVERIFY(message([&] { f->get_uint("test.string", 1); }).contains("'test.string' is a string"));
        QVERIFY(message([&] { f->get_float("test.bool_true"); }).contains("'test.bool_true' is a bool"));
        QVERIFY(message([&] { f->get_bool("test.u8"); }).contains("'test.u8' is a uint8"));
        QVERIFY(message([&] { f->get_string("test.strings"); }).contains("'test.strings' is a array"));
        QVERIFY(message([&] { f->get_array("test.f64"); }).contains("'test.f64' is a float64"));
        QVERIFY(message([&] { f->get_uint("absent"); }).contains(QString::fromStdString(path)));
    }

    void fingerprintCoversDescriptionNotData() {
        const std::string base = small_writer().bytes();
        GgufWriter other_value = small_writer();
        other_value.add_uint32("tiny.extra", 1);
        std::string other_data = base;
        other_data.back() = char(other_data.back() ^ 0xff);  // the last tensor's last byte

        QTemporaryDir dir;
        const auto fp = [&](const std::string& bytes) {
            const std::string path = (dir.path() + "/f.gguf").toStdString();
            write_bytes(path, bytes);
            return GgufFile::open(path)->fingerprint();
        };
        QVERIFY(fp(base) != fp(other_value.bytes()));
        QCOMPARE(fp(other_data), fp(base));
        QCOMPARE(fp(base), sha256_hex(base, small_writer().table_end()));
    }

    void everyTruncationIsRefused_data() {
        QTest::addColumn<uint32_t>("version");
        QTest::newRow("v3") << 3u;
        QTest::newRow("v2") << 2u;
    }
    void everyTruncationIsRefused() {
        QFETCH(uint32_t, version);
        const std::string bytes = small_writer(version).bytes();
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/cut.gguf").toStdString();
        write_bytes(path, bytes);
        QVERIFY(refusal(path).isNull());  // the whole file is fine
        for (size_t n = 0; n < bytes.size(); ++n) {
            write_bytes(path, bytes.substr(0, n));
            const QString why = refusal(path);
            QVERIFY2(why.contains("truncated"), qPrintable(QString("prefix of %1 bytes: '%2'").arg(n).arg(why)));
        }
    }

    void refusesBadFiles_data() {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("expected");
        const auto row = [](const char* name, const std::string& bytes, const char* expected) {
            QTest::newRow(name) << QByteArray::fromStdString(bytes) << QString(expected);
        };
        const auto plus = [](const std::function<void(GgufWriter&)>& change) {
            GgufWriter w = small_writer();
            change(w);
            return w.bytes();
        };
        const auto only_tensor = [](GgufTensorSpec t) {
            GgufWriter w;
            w.add_string("general.architecture", "tiny");
            w.add_tensor(std::move(t));
            return w.bytes();
        };
        const uint32_t f32 = uint32_t(TensorType::F32);
        const uint64_t huge = uint64_t(1) << 62;

        std::string wrong_magic = small_writer().bytes();
        wrong_magic[3] = 'X';
        row("wrong magic", wrong_magic, "not a GGUF file (wrong magic)");
        row("text file", "hello, this is not a model", "not a GGUF file (wrong magic)");
        row("empty file", "", "truncated");
        row("version 1", with_version(small_writer().bytes(), 1), "unsupported GGUF version 1");
        row("version 4", with_version(small_writer().bytes(), 4), "unsupported GGUF version 4");
        row("big-endian", with_version(small_writer().bytes(), 0x03000000), "big-endian");
        row("metadata count 2^62", "GGUF" + le32(3) + le64(0) + le64(huge), "metadata count 4611686018427387904");
        row("tensor count 2^62", "GGUF" + le32(3) + le64(huge) + le64(0), "tensor count 4611686018427387904");

        row("string length 2^62", plus([&](GgufWriter& w) { w.add_raw("bad.string", 8, le64(huge) + "abc"); }),
            "string length 4611686018427387904 of value of key 'bad.string'");
        row("key length 2^62", "GGUF" + le32(3) + le64(0) + le64(1) + le64(huge) + "key" + std::string(16, '\0'),
            "string length 4611686018427387904 of metadata key");
        row("key longer than 65535", plus([](GgufWriter& w) { w.add_uint32(std::string(70000, 'k'), 1); }),
            "longer than 65535 bytes");
        row("array count 2^62",
            plus([&](GgufWriter& w) { w.add_raw("bad.array", 9, le32(uint32_t(GgufType::UINT8)) + le64(huge)); }),
            "array count 4611686018427387904 of uint8 in key 'bad.array'");
        row("array of 2^62 strings",
            plus([&](GgufWriter& w) { w.add_raw("bad.array", 9, le32(uint32_t(GgufType::STRING)) + le64(huge)); }),
            "array count 4611686018427387904 of string");
        // An array of 2^40 arrays, each claiming 2^40 elements: refused before anything is allocated.
        std::string count_bomb = le32(uint32_t(GgufType::ARRAY)) + le64(uint64_t(1) << 40);
        for (int i = 0; i < 4; ++i) count_bomb += le32(uint32_t(GgufType::UINT64)) + le64(uint64_t(1) << 40);
        row("nested array count bomb", plus([&](GgufWriter& w) { w.add_raw("bomb", 9, count_bomb); }),
            "array count 1099511627776 of array in key 'bomb'");
        // Arrays of one array each, a thousand deep: refused before the recursion gets deep.
        std::string depth_bomb;
        for (int i = 0; i < 1000; ++i) depth_bomb += le32(uint32_t(GgufType::ARRAY)) + le64(1);
        depth_bomb += le32(uint32_t(GgufType::UINT8)) + le64(0);
        row("nested array depth bomb", plus([&](GgufWriter& w) { w.add_raw("bomb", 9, depth_bomb); }),
            "arrays nested deeper than 8 levels in key 'bomb'");
        row("unknown value type 13", plus([](GgufWriter& w) { w.add_raw("bad.type", 13, le32(0)); }),
            "unknown metadata value type 13 for key 'bad.type'");
        row("unknown array element type 13",
            plus([](GgufWriter& w) { w.add_raw("bad.elems", 9, le32(13) + le64(1) + le32(0)); }),
            "unknown metadata value type 13 for the elements of array 'bad.elems'");
        row("bool 2", plus([](GgufWriter& w) { w.add_raw("bad.bool", 7, std::string(1, '\x02')); }),
            "invalid bool 2 for key 'bad.bool'");
        row("duplicate key", plus([](GgufWriter& w) { w.add_uint32("tiny.block_count", 2); }),
            "duplicate metadata key 'tiny.block_count'");

        row("alignment 0", plus([](GgufWriter& w) { w.add_uint32("general.alignment", 0); }),
            "general.alignment 0 is not a power of two");
        row("alignment 3", plus([](GgufWriter& w) { w.add_uint32("general.alignment", 3); }),
            "general.alignment 3 is not a power of two");
        row("alignment 2^40", plus([](GgufWriter& w) { w.add("general.alignment", gguf_uint(GgufType::UINT64, uint64_t(1) << 40)); }),
            "general.alignment 1099511627776 is absurdly large");
        row("alignment string", plus([](GgufWriter& w) { w.add_string("general.alignment", "32"); }),
            "general.alignment is a string, not an integer");

        row("unknown tensor type 99", only_tensor({"blk.0.bad", 99, {32}, pattern(128, 1), {}}),
            "tensor 'blk.0.bad' has unknown or unsupported tensor type id 99");
        row("n_dims 5", only_tensor({"five", f32, {1, 1, 1, 1, 1}, pattern(4, 1), {}}), "tensor 'five': n_dims 5");
        row("ne zero", only_tensor({"flat", f32, {4, 0}, "", {}}), "tensor 'flat': dimension ne[1] = 0 is not positive");
        row("ne negative", only_tensor({"neg", f32, {-4}, "", {}}), "tensor 'neg': dimension ne[0] = -4 is not positive");
        row("ne product overflow", only_tensor({"big", f32, {int64_t(1) << 32, int64_t(1) << 32}, pattern(4, 1), {}}),
            "tensor 'big': the element count overflows");
        row("byte size overflow", only_tensor({"wide", f32, {int64_t(1) << 62}, pattern(4, 1), {}}),
            "tensor 'wide': the byte size overflows");
        row("ne[0] not a multiple of the block",
            only_tensor({"q", uint32_t(TensorType::Q8_0), {33}, pattern(68, 1), {}}),
            "tensor 'q': ne[0] = 33 is not a multiple of the block size 32");
        row("offset past the end", only_tensor({"far", f32, {8}, pattern(32, 1), uint64_t(1) << 20}),
            "tensor 'far': data at offset 1048576 (32 bytes) extends past the end of the file");
        row("offset wrapping around", only_tensor({"wrap", f32, {8}, pattern(32, 1), ~uint64_t(31)}),
            "tensor 'wrap': data at offset 18446744073709551584 (32 bytes) extends past the end of the file");
        row("data longer than the file", only_tensor({"long", f32, {64}, pattern(32, 1), {}}),
            "tensor 'long': data at offset 0 (256 bytes) extends past the end of the file");
        row("misaligned offset", plus([](GgufWriter& w) { w.add_tensor({"c", f32, {2}, pattern(8, 1), 8}); }),
            "tensor 'c': data offset 8 is not a multiple of the alignment 32");
        row("overlapping data", plus([](GgufWriter& w) { w.add_tensor({"c", f32, {8}, pattern(32, 1), 32}); }),
            "the data of tensors 'a' and 'c' overlap");
        row("duplicate tensor name", plus([](GgufWriter& w) { w.add_tensor({"a", f32, {8}, pattern(32, 1), {}}); }),
            "duplicate tensor name 'a'");
        row("tensor name longer than 64", only_tensor({std::string(65, 'n'), f32, {8}, pattern(32, 1), {}}),
            "is longer than 64 bytes");
    }
    void refusesBadFiles() {
        QFETCH(QByteArray, content);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/bad.gguf").toStdString();
        write_bytes(path, content.toStdString());
        const QString why = refusal(path);
        QVERIFY2(!why.isNull(), "a bad file was accepted");
        QVERIFY2(why.contains(expected), qPrintable(why));
        QVERIFY2(why.contains(QString::fromStdString(path)), qPrintable(why));
    }

    void refusesWhatIsNotAFile() {
        QTemporaryDir dir;
        QVERIFY(refusal((dir.path() + "/missing.gguf").toStdString()).contains("No such file"));
        QVERIFY(refusal(dir.path().toStdString()).contains("not a regular file"));
    }

    // Inputs the fuzzer found (tests/data/gguf_regressions) and its seed corpus: each must be
    // refused cleanly or opened, never crash.
    void fuzzFindings() {
        const QDir regressions(QString::fromStdString(data_path("gguf_regressions")));
        const QStringList bad = regressions.entryList(QDir::Files);
        for (const QString& name : bad) {
            const QString why = refusal(regressions.filePath(name).toStdString());
            QVERIFY2(!why.isNull(), qPrintable(name + " was accepted"));
            QVERIFY2(why.contains(regressions.filePath(name)), qPrintable(why));
        }
        // cleanPath: tests/data itself may not exist, and the kernel will not resolve "data/..".
        const QDir corpus(QDir::cleanPath(QString::fromStdString(data_path("../fuzz/corpus/gguf"))));
        const QStringList seeds = corpus.entryList(QDir::Files);
        QVERIFY(!seeds.isEmpty());
        for (const QString& name : seeds) QVERIFY2(refusal(corpus.filePath(name).toStdString()).isNull(), qPrintable(name));
    }
};

QTEST_GUILESS_MAIN(TestGgufFile)
#include "test_gguf_file.moc"
