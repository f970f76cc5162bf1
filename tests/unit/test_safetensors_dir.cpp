// SafetensorsDir: folders written by the test writer (single file and sharded) read back with
// their config, tensors in GGUF dimension order, data in place and the fingerprint; malformed
// headers and folders refused with a message naming the file and the problem.
#include "engine/common/sha256.h"
#include "engine/error.h"
#include "engine/model/safetensors_dir.h"
#include "support/safetensors_writer.h"
#include "support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <functional>

using kvchat::SafetensorsDir;
using kvchat::TensorType;
using namespace kvchat::test;

namespace {

std::string pattern(size_t n, uint8_t seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(seed + i * 11));
    return s;
}

const char* kConfig = R"({"model_type": "gemma3_text", "hidden_size": 8, "num_hidden_layers": 2, "rope_theta": 10000.0})";

std::vector<SafetensorsTensorSpec> some_tensors() {
    return {
        {"model.embed_tokens.weight", "F32", {3, 4}, pattern(3 * 4 * 4, 1)},
        {"model.norm.weight", "F16", {8}, pattern(8 * 2, 2)},
        {"model.layers.0.mlp.up_proj.weight", "BF16", {6, 8}, pattern(6 * 8 * 2, 3)},
        {"model.layers.0.four_d", "F32", {2, 3, 1, 5}, pattern(2 * 3 * 5 * 4, 4)},
        {"model.layers.1.scalar", "F32", {}, pattern(4, 5)},
    };
}

TensorType type_of(const std::string& dtype) {
    return dtype == "F32" ? TensorType::F32 : dtype == "F16" ? TensorType::F16 : TensorType::BF16;
}

// The 8-byte length plus the JSON header at the start of a .safetensors file's bytes.
size_t header_size(const std::string& file) {
    uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    return size_t(8 + n);
}

QString refusal(const std::string& folder) {
    try {
        SafetensorsDir::open(folder);
    } catch (const kvchat::Error& e) {
        return QString::fromStdString(e.what());
    }
    return QString();
}

std::string read_all(const std::string& path) {
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly)) return {};
    return f.readAll().toStdString();
}

}  // namespace

class TestSafetensorsDir : public QObject {
    Q_OBJECT
private slots:
    void roundTrip_data() {
        QTest::addColumn<int>("shards");
        QTest::newRow("single file") << 1;
        QTest::newRow("two shards") << 2;
        QTest::newRow("five shards") << 5;
    }
    void roundTrip() {
        QFETCH(int, shards);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        const auto tensors = some_tensors();
        const std::vector<std::string> files = write_safetensors_folder(folder, kConfig, tensors, shards);
        QCOMPARE(int(files.size()), shards);

        const std::unique_ptr<SafetensorsDir> d = SafetensorsDir::open(folder);
        QCOMPARE(d->path(), folder);
        QCOMPARE(d->config()["model_type"].get<std::string>(), std::string("gemma3_text"));
        QCOMPARE(d->config()["hidden_size"].get<int>(), 8);
        QCOMPARE(d->config()["rope_theta"].get<double>(), 10000.0);

        QCOMPARE(d->shard_paths().size(), files.size());
        kvchat::Sha256 sha;
        sha.update(kConfig, std::strlen(kConfig));
        for (size_t i = 0; i < files.size(); ++i) {
            QCOMPARE(d->shard_paths()[i], folder + "/" + files[i]);
            const std::string bytes = read_all(folder + "/" + files[i]);
            sha.update(bytes.data(), header_size(bytes));
        }
        QCOMPARE(d->fingerprint(), sha.hex_digest());

        QCOMPARE(d->tensors().size(), tensors.size());
        for (const SafetensorsTensorSpec& spec : tensors) {
            const kvchat::TensorView* t = d->tensor(spec.name);
            QVERIFY2(t, spec.name.c_str());
            QCOMPARE(t->name, spec.name);
            QCOMPARE(t->type, type_of(spec.dtype));
            QCOMPARE(t->n_dims, int(spec.shape.size()));
            // GGUF order: ne[0] is the last (fastest-varying) safetensors dimension.
            for (int k = 0; k < 4; ++k)
                QCOMPARE(t->ne[k], k < t->n_dims ? spec.shape[spec.shape.size() - 1 - size_t(k)] : int64_t(1));
            QCOMPARE(t->nbytes, spec.data.size());
            QVERIFY(std::memcmp(t->data, spec.data.data(), t->nbytes) == 0);
        }
        QVERIFY(d->tensor("missing") == nullptr);
        QVERIFY(d->tokenizer_model_path().empty());
        QVERIFY(d->tokenizer_config_path().empty());
    }

    void findsTokenizerFiles() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        write_safetensors_folder(folder, kConfig, some_tensors());
        write_file(folder + "/tokenizer.model", "sentencepiece bytes");
        write_file(folder + "/tokenizer_config.json", "{}");
        const std::unique_ptr<SafetensorsDir> d = SafetensorsDir::open(folder);
        QCOMPARE(d->tokenizer_model_path(), folder + "/tokenizer.model");
        QCOMPARE(d->tokenizer_config_path(), folder + "/tokenizer_config.json");
    }

    void fingerprintFollowsConfigAndHeaders() {
        QTemporaryDir a, b, c;
        write_safetensors_folder(a.path().toStdString(), kConfig, some_tensors());
        write_safetensors_folder(b.path().toStdString(), R"({"hidden_size": 9})", some_tensors());
        auto other_data = some_tensors();
        other_data[0].data[0] = char(other_data[0].data[0] ^ 1);
        write_safetensors_folder(c.path().toStdString(), kConfig, other_data);
        const std::string fa = SafetensorsDir::open(a.path().toStdString())->fingerprint();
        QVERIFY(fa != SafetensorsDir::open(b.path().toStdString())->fingerprint());
        QCOMPARE(SafetensorsDir::open(c.path().toStdString())->fingerprint(), fa);  // data is not hashed
    }

    void everyTruncationIsRefused() {
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        write_safetensors_folder(folder, kConfig, some_tensors());
        const std::string bytes = read_all(folder + "/model.safetensors");
        QVERIFY(refusal(folder).isNull());
        for (size_t n = 0; n < bytes.size(); ++n) {
            write_file(folder + "/model.safetensors", bytes.substr(0, n));
            const QString why = refusal(folder);
            QVERIFY2(why.contains("truncated"), qPrintable(QString("prefix of %1 bytes: '%2'").arg(n).arg(why)));
        }
    }

    void refusesBadFiles_data() {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("expected");
        const auto row = [](const char* name, const std::string& bytes, const char* expected) {
            QTest::newRow(name) << QByteArray::fromStdString(bytes) << QString(expected);
        };
        const auto header = [](const std::string& json, size_t data_bytes) {
            return safetensors_bytes_raw(json, pattern(data_bytes, 7));
        };
        std::string huge_length(8, '\0');
        const uint64_t n = uint64_t(1) << 62;
        std::memcpy(huge_length.data(), &n, 8);

        row("empty", "", "truncated: 0 bytes");
        row("shorter than the length", std::string("\x10\x00\x00", 3), "truncated: 3 bytes");
        row("header length 2^62", huge_length + "{}", "header length 4611686018427387904 is larger than");
        row("header length past the end", safetensors_bytes_raw("{}", "").substr(0, 8) + "{", "header length 2");
        row("header too short", safetensors_bytes_raw("", "xx"), "header length 0 is too short");
        row("not JSON", header("{\"a\": ", 0), "not valid JSON");
        row("not an object", header("[1, 2]", 0), "not a JSON object");
        row("nesting bomb", header(std::string(10000, '[') + std::string(10000, ']'), 0), "JSON nested deeper");
        row("dtype I64", header(R"({"t.ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16),
            "tensor 't.ids' has dtype I64; only F32, F16 and BF16");
        row("dtype F8_E4M3", header(R"({"t.f8": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2),
            "tensor 't.f8' has dtype F8_E4M3");
        row("dtype missing", header(R"({"t": {"shape": [2], "data_offsets": [0, 8]}})", 8), "tensor 't': dtype missing");
        row("five dimensions",
            header(R"({"t5": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}})", 4),
            "tensor 't5' has 5 dimensions");
        row("zero dimension", header(R"({"z": {"dtype": "F32", "shape": [4, 0], "data_offsets": [0, 0]}})", 0),
            "tensor 'z': dimension 0 in its shape is not a positive integer");
        row("negative dimension", header(R"({"m": {"dtype": "F32", "shape": [-3], "data_offsets": [0, 12]}})", 12),
            "tensor 'm': dimension -3 in its shape is not a positive integer");
        row("fractional dimension", header(R"({"f": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
            "tensor 'f': dimension 1.5");
        row("shape product overflow",
            header(R"({"o": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4),
            "tensor 'o': the element count of shape [4294967296,4294967296] overflows");
        row("byte size overflow",
            header(R"({"o": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 4]}})", 4),
            "tensor 'o': the byte size");
        row("size mismatch", header(R"({"s": {"dtype": "F16", "shape": [3, 2], "data_offsets": [0, 24]}})", 24),
            "tensor 's': data_offsets cover 24 bytes but shape [3, 2] of F16 needs 12");
        row("offsets past the end", header(R"({"p": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
            "tensor 'p': data_offsets [0, 16] lie outside the data section of 8 bytes");
        row("offsets reversed", header(R"({"r": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8),
            "tensor 'r': data_offsets [8, 4] lie outside");
        row("offsets not a pair", header(R"({"q": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
            "tensor 'q': data_offsets is not a pair");
        row("overlap",
            header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16),
            "the data of tensors 'a' and 'b' overlap");
        row("duplicate tensor",
            header(R"({"d": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "d": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
            "duplicate JSON key 'd'");
        row("metadata not an object", header(R"({"__metadata__": 3})", 0), "__metadata__ is not an object");
    }
    void refusesBadFiles() {
        QFETCH(QByteArray, content);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        write_file(folder + "/config.json", kConfig);
        write_file(folder + "/model.safetensors", content.toStdString());
        const QString why = refusal(folder);
        QVERIFY2(!why.isNull(), "a bad file was accepted");
        QVERIFY2(why.contains(expected), qPrintable(why));
        QVERIFY2(why.contains(QString::fromStdString(folder + "/model.safetensors")), qPrintable(why));
        // The in-memory parser the fuzzer drives gives the same verdict.
        const std::string bytes = content.toStdString();
        QVERIFY_THROWS_EXCEPTION(kvchat::Error, kvchat::parse_safetensors_header(
                                                    reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem"));
    }

    void refusesBadFolders_data() {
        QTest::addColumn<QString>("case_name");
        QTest::addColumn<QString>("expected");
        QTest::newRow("not a folder") << "not a folder" << "not a folder";
        QTest::newRow("no config") << "no config" << "config.json is missing";
        QTest::newRow("config not JSON") << "config not JSON" << "config.json': not valid JSON";
        QTest::newRow("config an array") << "config an array" << "config.json': not a JSON object";
        QTest::newRow("no weights") << "no weights" << "has neither model.safetensors nor model.safetensors.index.json";
        QTest::newRow("index escapes the folder") << "index escapes the folder" << "shard name '../model.safetensors'";
        QTest::newRow("index without weight_map") << "index without weight_map" << "weight_map missing";
        QTest::newRow("index names a missing shard") << "index names a missing shard" << "No such file";
        QTest::newRow("index misplaces a tensor") << "index misplaces a tensor"
                                                  << "tensor 'model.norm.weight' is here, but model.safetensors.index.json places it in b.safetensors";
        QTest::newRow("shard holds an unlisted tensor") << "shard holds an unlisted tensor"
                                                        << "tensor 'model.norm.weight' is here, but model.safetensors.index.json does not list it";
        QTest::newRow("index lists a missing tensor") << "index lists a missing tensor"
                                                      << "b.safetensors': does not hold tensor 'model.extra'";
        QTest::newRow("tensor in two shards") << "tensor in two shards"
                                              << "tensor 'model.embed_tokens.weight' is here, but model.safetensors.index.json places it in a.safetensors";
    }
    void refusesBadFolders() {
        QFETCH(QString, case_name);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        const std::string folder = dir.path().toStdString();
        const auto t = some_tensors();
        const std::vector<SafetensorsTensorSpec> first(t.begin(), t.begin() + 2), rest(t.begin() + 2, t.end());
        const auto index = [&](const std::string& weight_map) {
            write_file(folder + "/model.safetensors.index.json", R"({"metadata": {}, "weight_map": )" + weight_map + "}");
        };
        std::string open_path = folder;
        if (case_name == "not a folder") {
            write_file(folder + "/file", "x");
            open_path = folder + "/file";
        } else if (case_name == "no config") {
            write_file(folder + "/model.safetensors", safetensors_bytes(t));
        } else if (case_name == "config not JSON") {
            write_safetensors_folder(folder, "{\"hidden_size\": ", t);
        } else if (case_name == "config an array") {
            write_safetensors_folder(folder, "[]", t);
        } else if (case_name == "no weights") {
            write_file(folder + "/config.json", kConfig);
        } else {
            write_file(folder + "/config.json", kConfig);
            write_file(folder + "/a.safetensors", safetensors_bytes(first));
            write_file(folder + "/b.safetensors", safetensors_bytes(rest));
            if (case_name == "index escapes the folder")
                index(R"({"model.embed_tokens.weight": "../model.safetensors"})");
            else if (case_name == "index without weight_map")
                write_file(folder + "/model.safetensors.index.json", R"({"metadata": {}})");
            else if (case_name == "index names a missing shard")
                index(R"({"model.embed_tokens.weight": "c.safetensors"})");
            else if (case_name == "index misplaces a tensor")
                index(R"({"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors",
                          "model.layers.0.mlp.up_proj.weight": "b.safetensors", "model.layers.0.four_d": "b.safetensors",
                          "model.layers.1.scalar": "b.safetensors"})");
            else if (case_name == "shard holds an unlisted tensor")
                index(R"({"model.embed_tokens.weight": "a.safetensors",
                          "model.layers.0.mlp.up_proj.weight": "b.safetensors", "model.layers.0.four_d": "b.safetensors",
                          "model.layers.1.scalar": "b.safetensors"})");
            else if (case_name == "index lists a missing tensor")
                index(R"({"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "a.safetensors",
                          "model.layers.0.mlp.up_proj.weight": "b.safetensors", "model.layers.0.four_d": "b.safetensors",
                          "model.layers.1.scalar": "b.safetensors", "model.extra": "b.safetensors"})");
            else if (case_name == "tensor in two shards") {
                write_file(folder + "/b.safetensors", safetensors_bytes(t));
                index(R"({"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "a.safetensors",
                          "model.layers.0.mlp.up_proj.weight": "b.safetensors"})");
            }
        }
        const QString why = refusal(open_path);
        QVERIFY2(!why.isNull(), "a bad folder was accepted");
        QVERIFY2(why.contains(expected), qPrintable(why));
        QVERIFY2(why.contains(QString::fromStdString(folder)), qPrintable(why));
    }
};

QTEST_GUILESS_MAIN(TestSafetensorsDir)
#include "test_safetensors_dir.moc"
