#include "app/cli_options.h"

#include "engine/compute/device.h"
#include "engine/error.h"
#include "engine/model/model_path.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace kvchat::cli {

namespace {
const std::set<std::string> kValueOptions = {
    "--model", "--threads", "--text", "--prompt", "-n", "--temp", "--top-k", "--top-p", "--min-p", "--seed",
    "--repeat-penalty", "--prompt-tokens", "--gen-tokens", "--runs", "--cache", "--context", "--db",
    "--conversation", "--prefix", "--message", "--system", "--policy", "--turns", "--prefix-tokens",
    "--history-tokens", "--only", "--messages", "--simd", "--device", "--budget",
    "--at", "--select", "--title", "--host", "--port", "--api-key", "--max-queue", "--max-body", "--cors"};
const std::set<std::string> kRepeatedOptions = {"--stop"};
const std::set<std::string> kFlagOptions = {"--greedy", "--no-cache", "--json", "--regenerate", "--bandwidth", "--log-text"};
}  // namespace

Options parse(const std::vector<std::string>& args) {
    Options o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (kValueOptions.count(a) || kRepeatedOptions.count(a)) {
            if (i + 1 >= args.size()) throw Error(a + " needs a value");
            if (kRepeatedOptions.count(a))
                o.repeated[a].push_back(args[++i]);
            else
                o.values[a] = args[++i];
        } else if (kFlagOptions.count(a)) {
            o.flags.insert(a);
        } else if (!a.empty() && a[0] == '-') {
            throw Error("unknown option '" + a + "' (see --help)");
        } else if (o.command.empty()) {
            o.command = a;
        } else {
            o.positional.push_back(a);
        }
    }
    return o;
}

std::string Options::str(const std::string& name, const std::string& fallback) const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
}

long long Options::integer(const std::string& name, long long fallback, long long lo, long long hi) const {
    auto it = values.find(name);
    if (it == values.end()) return fallback;
    size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != it->second.size() || it->second.empty())
        throw Error(name + " expects a whole number, got '" + it->second + "'");
    if (v < lo || v > hi) throw Error(name + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return v;
}

double Options::number(const std::string& name, double fallback) const {
    auto it = values.find(name);
    if (it == values.end()) return fallback;
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != it->second.size() || it->second.empty()) throw Error(name + " expects a number, got '" + it->second + "'");
    return v;
}

SamplerConfig sampling_options(const Options& o) {
    SamplerConfig base;
    base.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count() & 0x7fffffff);
    return sampling_options(o, base);
}

SamplerConfig sampling_options(const Options& o, const SamplerConfig& base) {
    SamplerConfig s = base;
    s.greedy = o.flag("--greedy");
    s.temperature = static_cast<float>(o.number("--temp", s.temperature));
    s.top_k = static_cast<int>(o.integer("--top-k", s.top_k, 0, 1 << 30));
    s.top_p = static_cast<float>(o.number("--top-p", s.top_p));
    s.min_p = static_cast<float>(o.number("--min-p", s.min_p));
    // --greedy is the plain argmax the cache tests and llama.cpp's greedy comparisons mean: a chat's
    // saved repetition penalty is not applied unless asked for.
    if (s.greedy) s.repetition_penalty = 1.0f;
    s.repetition_penalty = static_cast<float>(o.number("--repeat-penalty", s.repetition_penalty));
    s.seed = static_cast<uint64_t>(o.integer("--seed", static_cast<long long>(base.seed), 0, 1LL << 62));
    if (s.greedy && (o.has("--temp") || o.has("--top-k") || o.has("--top-p") || o.has("--min-p")))
        throw Error("--greedy cannot be combined with --temp, --top-k, --top-p or --min-p");
    validate(s);
    return s;
}

Loaded load_model(const Options& o) {
    const std::string path = find_model(o.str("--model"));
    const int threads = static_cast<int>(o.integer("--threads", 0, 0, 1024));
    Loaded l;
    const std::string device = o.str("--device", "cpu");
    const auto d = parse_device(device);
    if (!d) throw Error("--device must be cpu, cuda or cuda:N, got '" + device + "'");
    l.model = Model::load(path);
    OpenedBackend b = open_backend(*d, threads);
    // A GPU that cannot be used is not an error: the command runs on the CPU and says why.
    if (!b.notice.empty()) std::fprintf(stderr, "kvchat-cli: %s\n", b.notice.c_str());
    l.backend = std::move(b.backend);
    // The weights go onto the device now (a GPU uploads them; the CPU uses the file in place), so
    // no command's first timing includes the upload.
    l.model->weights_on(*l.backend);
    return l;
}

double rss_mib() {
    std::ifstream f("/proc/self/statm");
    long long size = 0, resident = 0;
    f >> size >> resident;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

std::string process_escapes(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\' || i + 1 >= text.size()) {
            out += text[i];
            continue;
        }
        const char e = text[i + 1];
        char c = 0;
        switch (e) {
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'a': c = '\a'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'v': c = '\v'; break;
            case '0': c = '\0'; break;
            case '\'': case '"': case '\\': c = e; break;
            case 'x':
                if (i + 3 < text.size() && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
                    out += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
                    i += 3;
                    continue;
                }
                [[fallthrough]];
            default:
                out += '\\';  // not an escape: the backslash stays
                continue;
        }
        out += c;
        ++i;
    }
    return out;
}

std::string escape_controls(std::string_view text, std::string_view keep, bool backslash) {
    std::string out;
    out.reserve(text.size());
    char buf[8];
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\\' && backslash) {
            out += "\\\\";
        } else if ((c < 0x20 || c == 0x7F) && keep.find(static_cast<char>(c)) == std::string_view::npos) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
            // A C1 control in UTF-8 (U+0080..U+009F): terminals act on some of them (CSI, OSC).
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(text[i + 1]));
            out += buf;
            ++i;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::string tsv_field(std::string_view text) {
    std::string out;
    for (char c : escape_controls(text, "\t\n\r")) switch (c) {
            case '\t': out += "\\t"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            default: out += c;
        }
    return out;
}

}  // namespace kvchat::cli
