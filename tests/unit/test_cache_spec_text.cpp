// The cache-spec syntax at its edges: an empty part of a '+' spec is reported by its position,
// an error echoes at most about 200 bytes of a long spec, and a spill folder whose name holds
// ',' or '+' (or a quote) can be given quoted, and survives the canonical form.
#include "engine/cache/cache_spec.h"
#include "engine/error.h"

#include <QtTest>

#include <functional>

using namespace kvchat;

namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return {};
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

class TestCacheSpecText : public QObject {
    Q_OBJECT
private slots:
    void emptyPartNamedByPosition() {
        const struct {
            const char* spec;
            const char* says;
        } cases[] = {
            {"+offloaded", "part 1 is empty (nothing before the first '+')"},
            {"dynamic+", "part 2 is empty (nothing after the last '+')"},
            {"quantized++offloaded", "part 2 is empty (nothing between two '+')"},
            {"quantized+offloaded+", "part 3 is empty"},
        };
        for (const auto& c : cases) {
            const std::string err = error_of([&] { parse_cache_spec(c.spec); });
            QVERIFY2(contains(err, c.says), (std::string(c.spec) + " -> " + err).c_str());
            QVERIFY2(!contains(err, "''"), err.c_str());
        }
    }

    void longSpecIsCutInMessages() {
        const std::string huge(100000, 'x');
        for (const std::string& spec : {huge, "dynamic+" + huge, "static:max_len=" + huge, "quantized:" + huge + "=1",
                                        "quantized:nbits=4," + huge}) {
            const std::string err = error_of([&] { parse_cache_spec(spec); });
            QVERIFY2(!err.empty(), spec.substr(0, 40).c_str());
            QVERIFY2(err.size() < 700, std::to_string(err.size()).c_str());
        }
        // A cut keeps whole UTF-8 characters.
        std::string accents;
        for (int i = 0; i < 150; ++i) accents += "\xc3\xa9";  // é
        const std::string err = error_of([&] { parse_cache_spec(accents); });
        QVERIFY2(contains(err, "bytes)"), err.c_str());
        const size_t dots = err.find("...");
        QVERIFY(dots != std::string::npos);
        QVERIFY((static_cast<unsigned char>(err[dots - 1]) & 0xC0) != 0xC0);  // not a lead byte cut off
    }

    void quotedSpillFolder() {
        for (const std::string dir : {"/tmp/a,b", "/tmp/x+y", "/tmp/q\"uote", "/tmp/back\\slash", "/tmp/all ,+\"\\ of them"}) {
            std::string quoted = "\"";
            for (char c : dir) {
                if (c == '"' || c == '\\') quoted += '\\';
                quoted += c;
            }
            quoted += '"';
            for (const std::string& spec : {"offloaded:dir=" + quoted, "quantized:nbits=4+offloaded:dir=" + quoted,
                                            "offloaded_static:dir=" + quoted + ",max_len=64"}) {
                const CacheSpec s = parse_cache_spec(spec);
                QCOMPARE(s.offload_dir, dir);
                QVERIFY(s.offloaded);
                // The canonical text parses back to the same folder.
                QCOMPARE(parse_cache_spec(to_string(s)).offload_dir, dir);
                QCOMPARE(to_string(parse_cache_spec(to_string(s))), to_string(s));
            }
            // A list of specs (bench --cache A,B) keeps a quoted folder in one piece.
            const auto list = split_spec_list("dynamic,offloaded:dir=" + quoted + ",quantized:nbits=4,residual=128");
            QCOMPARE(list.size(), size_t(3));
            QCOMPARE(parse_cache_spec(list[1]).offload_dir, dir);
        }
        // A plain folder stays unquoted in the canonical form.
        QCOMPARE(to_string(parse_cache_spec("offloaded:dir=/tmp/plain")), std::string("offloaded:dir=/tmp/plain"));
        QVERIFY(contains(error_of([] { parse_cache_spec("offloaded:dir=\"/tmp/open"); }), "no closing quote"));
        QVERIFY(contains(error_of([] { parse_cache_spec("offloaded:dir=\"/tmp/a\"b"); }), "after its closing quote"));
        QVERIFY(contains(error_of([] { parse_cache_spec("offloaded:dir=\"\""); }), "dir is empty"));
    }
};

QTEST_GUILESS_MAIN(TestCacheSpecText)
#include "test_cache_spec_text.moc"
