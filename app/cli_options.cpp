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
    "--history-tokens", "--only", "--messages", "--simd", "--device"};
const std::set<std::string> kRepeatedOptions = {"--stop"};
const std::set<std::string> kFlagOptions = {"--greedy", "--no-cache", "--json", "--regenerate", "--bandwidth"};
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
    SamplerConfig s;
    s.greedy = o.flag("--greedy");
    s.temperature = static_cast<float>(o.number("--temp", s.temperature));
    s.top_k = static_cast<int>(o.integer("--top-k", s.top_k, 0, 1 << 30));
    s.top_p = static_cast<float>(o.number("--top-p", s.top_p));
    s.min_p = static_cast<float>(o.number("--min-p", s.min_p));
    s.repetition_penalty = static_cast<float>(o.number("--repeat-penalty", s.repetition_penalty));
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    s.seed = static_cast<uint64_t>(o.integer("--seed", static_cast<long long>(now & 0x7fffffff), 0, 1LL << 62));
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
    return l;
}

double rss_mib() {
    std::ifstream f("/proc/self/statm");
    long long size = 0, resident = 0;
    f >> size >> resident;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

}  // namespace kvchat::cli
