// The cache-spec syntax at its edges: an empty part of a '+' spec is reported by its position,
// an error echoes at most about 200 bytes of a long spec, and a spill folder whose name holds
// ',' or '+' (or a quote) can be given quoted, and survives the canonical form. The typed side
// of the grammar: the presets, the base as an enum, and the specs the chat code builds by fields
// are what the same text parses to.
#include "engine/cache/cache_presets.h"
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

    // Every preset, with values for the parameters it requires, parses to its own typed spec with
    // those values, is shown under its own name, and survives the canonical text.
    void presetsParseToTheirTypedSpecs() {
        QCOMPARE(cache_presets().size(), size_t{8});
        for (const CachePreset& p : cache_presets()) {
            std::string text(p.name);
            CacheSpec want = p.spec;
            std::string sep = ":";
            for (std::string_view r : p.required) {
                const int v = r == "sinks" ? 2 : r == "window" ? 8 : 64;
                text += sep + std::string(r) + "=" + std::to_string(v);
                sep = ",";
                if (r == "sinks") want.sinks = v;
                if (r == "window") want.window = v;
                if (r == "max_len") want.max_len = v;
            }
            const CacheSpec got = parse_cache_spec(text);
            QVERIFY2(got == want, text.c_str());
            QCOMPARE(parse_cache_spec(to_string(got)), got);
            QCOMPARE(std::string(cache_preset_of(got).name), std::string(p.name));
            QVERIFY(find_cache_preset(p.name) == &p);
            // Every parameter the preset lists is taken, all at once.
            std::string all(p.name);
            sep = ":";
            for (std::string_view k : p.params) {
                const std::string v = k == "dtype" ? "f32" : k == "dir" ? "/tmp" : k == "nbits" ? "4" : k == "sinks" ? "2" : "64";
                all += sep + std::string(k) + "=" + v;
                sep = ",";
            }
            QVERIFY2(error_of([&] { parse_cache_spec(all); }).empty(), (all + ": " + error_of([&] { parse_cache_spec(all); })).c_str());
            // A required parameter left out is refused by name.
            if (!p.required.empty())
                QVERIFY2(contains(error_of([&] { parse_cache_spec(std::string(p.name)); }),
                                  "missing parameter " + std::string(p.required.front())),
                         text.c_str());
        }
        QVERIFY(find_cache_preset("fast") == nullptr);
    }

    // The base is an enum the parser sets, whatever else the spec combines.
    void baseIsTyped() {
        const struct {
            const char* spec;
            CacheBase base;
            const char* preset;
        } cases[] = {
            {"dynamic", CacheBase::Dynamic, "dynamic"},
            {"quantized:nbits=2", CacheBase::Dynamic, "quantized"},
            {"offloaded", CacheBase::Dynamic, "offloaded"},
            {"quantized+offloaded", CacheBase::Dynamic, "quantized"},
            {"static:max_len=9", CacheBase::Static, "static"},
            {"offloaded_static:max_len=9", CacheBase::Static, "offloaded_static"},
            {"static:max_len=9+quantized", CacheBase::Static, "static"},
            {"sliding_window:window=4+offloaded", CacheBase::SlidingWindow, "sliding_window"},
            {"sink:window=8,sinks=2+quantized:nbits=4,residual=8,group=8", CacheBase::Sink, "sink"},
            {"hybrid:max_len=64", CacheBase::Hybrid, "hybrid"},
        };
        for (const auto& c : cases) {
            const CacheSpec s = parse_cache_spec(c.spec);
            QVERIFY2(s.base == c.base, c.spec);
            QCOMPARE(std::string(cache_preset_of(s).name), std::string(c.preset));
            // The canonical text starts with the base's name unless the base is a plain dynamic one.
            if (c.base != CacheBase::Dynamic && std::string(c.preset) != "offloaded_static")
                QVERIFY2(to_string(s).rfind(std::string(cache_base_name(c.base)), 0) == 0, c.spec);
        }
    }

    // The bounded strategies a conversation that outgrew its context switches to are built by
    // fields; they must be exactly what their text parses to (the store keeps the text).
    void boundedStrategiesAreWhatTheirTextParsesTo() {
        QCOMPARE(CacheSpec::sink(256, 4), parse_cache_spec("sink:window=256,sinks=4"));
        QCOMPARE(CacheSpec::sliding_window(32), parse_cache_spec("sliding_window:window=32"));
        QCOMPARE(to_string(CacheSpec::sink(16, 4)), std::string("sink:window=16,sinks=4"));
        QCOMPARE(to_string(CacheSpec::sliding_window(16)), std::string("sliding_window:window=16"));
    }
};

QTEST_GUILESS_MAIN(TestCacheSpecText)
#include "test_cache_spec_text.moc"
