// kvchat-cli: the terminal face of the engine.
#include "app/cli_chat.h"
#include "app/cli_storage.h"
#include "app/cli_options.h"
#include "engine/compute/logit_select.h"
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/compute/read_bandwidth.h"
#include "engine/compute/tensor_type.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"
#include "engine/cache/cache_factory.h"
#include "engine/cache/cache_presets.h"
#include "engine/cache/cache_spec.h"
#include "engine/cache/convert.h"
#include "engine/cache/telemetry_json.h"
#include "engine/chat/chat_template.h"
#include "engine/generate/comparison.h"
#include "engine/generate/generator.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;
using namespace kvchat::cli;

const char* kUsageText =
    "kvchat-cli " KVCHAT_VERSION " - local chat with a persistent KV cache\n"
    "\n"
    "usage: kvchat-cli [--version] [--help] COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  info       what the model file holds\n"
    "  tokenize   --text TEXT: the token ids the prompt gets (JSON array, BOS included when the model adds it)\n"
    "  template   --messages FILE.json: the exact prompt text the model's chat template gives a JSON array\n"
    "             of {\"role\", \"content\"} messages, with the generation prompt (a GGUF's metadata is enough)\n"
    "  generate   --prompt TEXT [-n N] [--greedy | --temp T --top-k K --top-p P --min-p M\n"
    "             --repeat-penalty R --seed S] [--stop STR]... [--no-cache] [--cache SPEC] [--json]\n"
    "             continue a prompt; --json prints one object with text, tokens, timings and the\n"
    "             cache's telemetry; --stop reads \\n, \\t, \\\\, \\xHH (as llama.cpp): --stop \"\\n\\n\"\n"
    "  bench      [--prompt-tokens 512] [--gen-tokens 128] [--runs 3] [--json]\n"
    "             prefill and decode tokens per second (median, min and max of the runs), the bytes a\n"
    "             decoded token reads and the share of the memory bandwidth that makes (the bandwidth\n"
    "             read just before and after each run's decode: it moves on a shared host)\n"
    "  bench      --bandwidth [--json]: the memory's streaming read bandwidth with the compute threads\n"
    "  bench      --cache SPEC[,SPEC...] [--context N[,N...]] [--gen-tokens 32] [--json]\n"
    "             one row per strategy and context: KV bytes, prefill and decode speed, the greedy\n"
    "             tokens' agreement with dynamic, and the time to convert a dynamic cache to it\n"
    "  chat       [--db PATH] --conversation NAME [--prefix NAME] [--cache SPEC] [--system TEXT]\n"
    "             [--policy refuse|sink|sliding] [--message TEXT | --regenerate] [-n N] [--greedy | sampling options]\n"
    "             [--json]  send one message to a persistent conversation (created if new) and print the\n"
    "             reply (--regenerate: answer its last message again, or the one a crash left unanswered);\n"
    "             without --message, an interactive session (/regenerate, /quit; Ctrl-C stops an answer)\n"
    "  branch     [--db PATH] --conversation NAME --at N --title NEW [--json]  a new conversation holding the\n"
    "             first N messages of NAME, whose cache is NAME's up to them: its first turn prefills only\n"
    "             what is new (chat --conversation NEW)\n"
    "  conversations [--db PATH] [--json]   list the saved conversations (tab-separated; a tab, newline or\n"
    "             backslash in a title is written \\t, \\n, \\\\; \"unanswered\" marks one whose last message has no answer)\n"
    "  versions   [--db PATH] --conversation NAME [--at N [--select K]] [--json]: the places where\n"
    "             regenerate or edit kept earlier versions (message N: version K of M shown); --at N\n"
    "             lists message N's versions, --select K shows version K (the next turn answers it)\n"
    "  prefix     [--db PATH] save NAME (--text TEXT | --conversation NAME [--messages N]) [--cache SPEC] |\n"
    "             list | rename OLD NEW | edit NAME (--text TEXT | --conversation NAME [--messages N]) |\n"
    "             delete NAME: the library of reusable prefixes (a system prompt, or the first N\n"
    "             messages of a conversation, default all)\n"
    "  storage    [--db PATH] [--json]: every conversation and prefix with its saved cache (tokens,\n"
    "             strategy, bytes on disk, checkpoints), and the total against the budget |\n"
    "             prune [--budget BYTES]: remove the least recently used caches until they fit now |\n"
    "             budget BYTES|default: the budget for all saved caches (default 2G, less on a nearly\n"
    "             full disk) | drop (--conversation NAME | --prefix NAME): remove one saved cache\n"
    "  chat-bench [--turns 10] [--prefix-tokens 2000] [--history-tokens 4000] [--only turns|prefix|reopen]\n"
    "             [--json]: time to first token over turns, from a saved prefix, and after reopening\n"
    "  serve      [--db PATH] [--host 127.0.0.1] [--port 8080] [--cache SPEC] [--api-key KEY] [--max-queue 4]\n"
    "             [--max-body BYTES] [--cors ORIGIN] [--log-text]: a local OpenAI-compatible API server\n"
    "             (/v1/chat/completions, /v1/completions, /v1/models, /health) over the conversations of\n"
    "             the database; default model: the chat model. Any host but 127.0.0.1/localhost needs\n"
    "             --api-key; --port 0 picks a free port (printed); Ctrl-C stops\n"
    "\n"
    "cache strategies (--cache; combine with +, e.g. quantized:nbits=4+offloaded):\n"
    "%PRESETS%"
    "  dtype=f16|bf16|f32 on any part: the full-precision format (default f16, as llama.cpp)\n"
    "\n"
    "options for every command:\n"
    "  --model PATH    GGUF file or Hugging Face folder (default: $KVCHAT_MODEL, else\n"
    "                  ${XDG_DATA_HOME:-~/.local/share}/kvchat/models/gemma-3-270m-q4_k_m.gguf)\n"
    "  --threads N     compute threads (default: one per core)\n"
    "  --device D      cpu (default), cuda or cuda:N: where the model computes; a GPU that cannot\n"
    "                  be used is named with the reason, and the CPU is used\n"
    "  --simd LEVEL    avx2, avx512-vnni or amx: compute at most at this SIMD level (default:\n"
    "                  each kernel family's fastest on this CPU; every level gives the same bits)\n"
    "  --version       print the version and exit\n"
    "  --help          print this help and exit\n";

// The help: kUsageText with the engine's presets in place of %PRESETS%, their forms joined by
// " | " in lines of at most 92 columns.
std::string usage() {
    std::string presets, line;
    for (const kvchat::CachePreset& p : kvchat::cache_presets()) {
        const std::string form(p.usage);
        if (!line.empty() && line.size() + 3 + form.size() > 92) {
            presets += line + "\n";
            line.clear();
        }
        line += (line.empty() ? "  " : " | ") + form;
    }
    presets += line + "\n";
    std::string text = kUsageText;
    const size_t at = text.find("%PRESETS%");
    return text.replace(at, std::string_view("%PRESETS%").size(), presets);
}

int fail(const std::string& msg) {
    // Messages quote titles, names and paths the user or a database gave: no control character
    // reaches the terminal.
    std::fprintf(stderr, "kvchat-cli: error: %s\n", kvchat::cli::escape_controls(msg, "\n\t", false).c_str());
    return 2;
}

int cmd_info(const Options& o) {
    const std::string path = kvchat::find_model(o.str("--model"));
    // Loaded as generate loads it (every tensor, hyper-parameter and token id checked), so info
    // never calls a file valid that generate refuses.
    const auto model = kvchat::Model::load(path);
    const kvchat::ModelConfig& c = model->config();
    if (c.source == "gguf") {
        const kvchat::GgufHeader h = kvchat::read_gguf_header(path);
        std::printf("model: %s\nformat: GGUF v%u\ntensors: %llu\nmetadata: %llu\nsize: %llu bytes\n", path.c_str(),
                    h.version, static_cast<unsigned long long>(h.tensor_count),
                    static_cast<unsigned long long>(h.metadata_count), static_cast<unsigned long long>(h.file_size));
    } else {
        std::printf("model: %s\nformat: Hugging Face folder (safetensors)\nsize: %llu bytes of tensors\n", path.c_str(),
                    static_cast<unsigned long long>(model->file_bytes()));
    }
    std::printf("architecture: %s\nlayers: %d\ncontext: %d tokens\nvocabulary: %d tokens\n", c.arch_name.c_str(),
                c.n_layer, c.n_ctx_train, c.n_vocab);
    return 0;
}

int cmd_tokenize(const Options& o) {
    if (!o.has("--text")) throw kvchat::Error("tokenize needs --text TEXT");
    const std::string path = kvchat::find_model(o.str("--model"));
    auto model = kvchat::Model::load(path);
    const auto ids = model->tokenizer().encode(o.str("--text"), true);
    std::printf("%s\n", json(ids).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
}

int cmd_template(const Options& o) {
    if (!o.has("--messages")) throw kvchat::Error("template needs --messages FILE.json");
    const std::string file = o.str("--messages");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw kvchat::Error("cannot read " + file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<kvchat::ChatMessage> messages = kvchat::parse_chat_messages(text);
    if (messages.empty()) throw kvchat::Error(file + " holds no messages");
    // A GGUF's metadata is read alone, so a template renders whatever vocabulary the file has.
    const std::string path = kvchat::find_model(o.str("--model"));
    std::unique_ptr<kvchat::Model> model;
    std::optional<kvchat::ChatTemplate> t;
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
        t = kvchat::ChatTemplate::text_from_gguf(*kvchat::GgufFile::open(path));
    } else {
        model = kvchat::Model::load(path);
        t = kvchat::ChatTemplate::for_model(*model);
    }
    if (!t->notice().empty()) std::fprintf(stderr, "kvchat-cli: %s\n", t->notice().c_str());
    if (const std::string refused = t->refusal(messages); !refused.empty())
        throw kvchat::Error("the model's chat template refuses these messages: " + refused);
    const std::string prompt = t->render_text(messages, true);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
}

int cmd_generate(const Options& o) {
    if (!o.has("--prompt")) throw kvchat::Error("generate needs --prompt TEXT");
    const std::string prompt = o.str("--prompt");
    if (prompt.empty()) throw kvchat::Error("the prompt is empty: give --prompt some text");
    kvchat::GenerationConfig g;
    g.max_new_tokens = static_cast<int>(o.integer("-n", 128, 0, 1 << 24));
    g.sampling = sampling_options(o);
    if (o.repeated.count("--stop"))
        for (const std::string& stop : o.repeated.at("--stop")) {
            g.stop_strings.push_back(process_escapes(stop));
            if (g.stop_strings.back().empty()) throw kvchat::Error("--stop needs a non-empty string");
        }
    g.use_cache = !o.flag("--no-cache");
    const bool as_json = o.flag("--json");

    Loaded l = load_model(o);
    const auto ids = l.model->tokenizer().encode(prompt, true);
    auto cache = l.model->make_cache(*l.backend, o.str("--cache", "dynamic"));
    kvchat::Generator gen(*l.model, *l.backend);
    std::function<void(std::string_view)> stream;
    if (!as_json) stream = kvchat::cli::write_answer_piece;
    const kvchat::GenerationResult r = gen.generate(*cache, ids, g, stream, &kvchat::cli::stop_on_interrupt());
    if (const int err = kvchat::cli::output_error())
        throw kvchat::Error("cannot write to standard output (" + std::string(std::strerror(err)) +
                            "); generation was stopped there");
    if (as_json) {
        json j;
        j["text"] = r.text;
        j["tokens"] = r.tokens;
        j["prompt_tokens"] = r.prompt_tokens;
        j["prefill_tokens"] = r.prefill_tokens;
        j["ttft_ms"] = r.ttft_ms;
        j["prefill_tok_s"] = r.prefill_tok_s();
        j["decode_tok_s"] = r.decode_tok_s();
        j["kv_bytes"] = cache->bytes();
        j["cache"] = kvchat::telemetry_json(cache->telemetry());
        j["stop_reason"] = stop_reason_name(r.stop_reason);
        j["seed"] = g.sampling.seed;
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::printf("\n");
        std::fprintf(stderr, "[%lld prompt tokens, ttft %.1f ms, prefill %.1f tok/s, decode %.1f tok/s, stop: %s]\n",
                     static_cast<long long>(r.prompt_tokens), r.ttft_ms, r.prefill_tok_s(), r.decode_tok_s(),
                     std::string(stop_reason_name(r.stop_reason)).c_str());
    }
    if (r.stop_reason == kvchat::StopReason::Stopped) {
        // Ctrl-C, SIGTERM or SIGHUP: nothing is left to save, so end now; freeing the model and
        // its 262,144-piece tokenizer would add a tenth of a second or more.
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(kvchat::cli::stopped_exit_status());
    }
    return 0;
}

std::vector<int> int_list(const std::string& name, const std::string& text) {
    std::vector<int> out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = text.find(',', at);
        const std::string piece = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(piece, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (piece.empty() || used != piece.size() || v < 1 || v > (1 << 24))
            throw kvchat::Error(name + " expects whole numbers separated by commas, got '" + piece + "'");
        out.push_back(static_cast<int>(v));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

// One row per strategy and context: KV bytes, prefill and decode speed, the greedy tokens'
// agreement with `dynamic`, and how long converting a dynamic cache of that context takes.
int cmd_bench_caches(const Options& o) {
    std::vector<std::string> specs = kvchat::split_spec_list(o.str("--cache", "dynamic"));
    for (std::string& s : specs) s = kvchat::to_string(kvchat::parse_cache_spec(s));
    const std::vector<int> contexts = int_list("--context", o.str("--context", "1024"));
    const int gen_tokens = static_cast<int>(o.integer("--gen-tokens", 32, 1, 1 << 20));
    Loaded l = load_model(o);
    const kvchat::Model& m = *l.model;
    json rows = json::array();
    // Every strategy must hold the longest context and the tokens generated after it: find out now
    // rather than after minutes of prefill (a static max_len too small, a slow tier without room).
    for (int ctx : contexts)
        if (ctx + gen_tokens > m.config().n_ctx_train)
            throw kvchat::Error("--context " + std::to_string(ctx) + " + --gen-tokens exceed the model's context of " +
                                std::to_string(m.config().n_ctx_train));
    const int longest = *std::max_element(contexts.begin(), contexts.end());
    for (const std::string& spec : specs) {
        try {
            m.make_cache(*l.backend, spec)->check_room(longest + gen_tokens - 1);
        } catch (const kvchat::Error& e) {
            throw kvchat::Error("--cache " + spec + " at --context " + std::to_string(longest) + " with --gen-tokens " +
                                std::to_string(gen_tokens) + ": " + e.what());
        }
    }
    if (!o.flag("--json"))
        std::printf("%-58s %7s %10s %6s %10s %10s %6s %6s %9s\n", "strategy", "context", "KV MiB", "xdyn", "prefill/s",
                    "decode/s", "xdyn", "agree", "conv ms");
    for (int ctx : contexts) {
        // The same rows the window's comparison view shows (engine/generate/comparison.h).
        kvchat::ComparisonOptions copt;
        copt.gen_tokens = gen_tokens;
        const std::vector<kvchat::ComparisonRow> result =
            kvchat::compare_strategies(m, *l.backend, kvchat::benchmark_prompt(m, ctx), specs, copt);
        for (const kvchat::ComparisonRow& r : result) {
            json row = {{"strategy", r.strategy}, {"context", ctx}, {"kv_bytes", r.kv_bytes},
                        {"kv_ratio", r.kv_ratio}, {"peak_kv_bytes", r.peak_kv_bytes}, {"ttft_ms", r.ttft_ms},
                        {"prefill_tok_s", r.prefill_tok_s}, {"decode_tok_s", r.decode_tok_s},
                        {"decode_ratio", r.decode_ratio}, {"agreement", r.agreement},
                        {"first_divergence", r.first_divergence}, {"tokens", r.tokens}, {"convert_ms", r.convert_ms},
                        {"cache", kvchat::telemetry_json(r.telemetry)}};
            if (o.flag("--json")) {
                rows.push_back(row);
            } else {
                // No conversion for dynamic itself: "-" rather than a time of 0.
                char conv[32] = "-";
                if (r.strategy != "dynamic") std::snprintf(conv, sizeof conv, "%.1f", r.convert_ms);
                std::printf("%-58s %7d %10.2f %6.3f %10.1f %10.2f %6.3f %6.3f %9s\n", r.strategy.c_str(), ctx,
                            r.kv_bytes / (1024.0 * 1024.0), r.kv_ratio, r.prefill_tok_s, r.decode_tok_s, r.decode_ratio,
                            r.agreement, conv);
                std::fflush(stdout);
            }
        }
    }
    if (o.flag("--json")) std::printf("%s\n", rows.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
}

// Bytes of the weights one decoded token reads: every layer matrix and the output head (the
// embedding lookup reads one row; norms are a few KiB).
double weight_bytes_per_token(const kvchat::Model& m) {
    auto bytes = [](const kvchat::WeightMatrix& w) {
        return w.data ? static_cast<double>(kvchat::row_bytes(w.type, w.cols)) * static_cast<double>(w.rows) : 0.0;
    };
    double sum = bytes(m.output());
    for (int i = 0; i < m.config().n_layer; ++i) {
        const kvchat::LayerWeights& l = m.layer(i);
        for (const kvchat::WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) sum += bytes(*w);
    }
    return sum;
}

// Page faults of this process so far: minor (a page mapped again) and major (read from disk).
std::pair<long, long> page_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return {u.ru_minflt, u.ru_majflt};
}

struct Spread {
    double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    return {med, v.front(), v.back()};
}

int cmd_bench_bandwidth(const Options& o) {
    kvchat::ThreadPool pool(static_cast<int>(o.integer("--threads", 0, 0, 1024)));
    const double gbs = kvchat::memory_read_gbs(pool);
    if (o.flag("--json")) {
        std::printf("%s\n", json{{"threads", pool.size()}, {"read_gbs", gbs}, {"buffer_mib", 1024}}.dump().c_str());
    } else {
        std::printf("memory read bandwidth: %.1f GB/s (%d threads streaming a 1 GiB buffer, best of 3)\n", gbs, pool.size());
    }
    return 0;
}

int cmd_bench(const Options& o) {
    if (o.flag("--bandwidth")) return cmd_bench_bandwidth(o);
    if (o.has("--cache") || o.has("--context")) return cmd_bench_caches(o);
    const int prompt_tokens = static_cast<int>(o.integer("--prompt-tokens", 512, 1, 1 << 20));
    const int gen_tokens = static_cast<int>(o.integer("--gen-tokens", 128, 1, 1 << 20));
    const int runs = static_cast<int>(o.integer("--runs", 3, 1, 100));
    const double rss0 = rss_mib();
    Loaded l = load_model(o);
    const double rss_loaded = rss_mib();
    const kvchat::Model& m = *l.model;
    std::string text;
    std::vector<int32_t> ids;
    while (static_cast<int>(ids.size()) < prompt_tokens) {
        text += kvchat::benchmark_text();
        ids = m.tokenizer().encode(text, true);
    }
    ids.resize(static_cast<size_t>(prompt_tokens));
    if (prompt_tokens + gen_tokens > m.config().n_ctx_train)
        throw kvchat::Error("--prompt-tokens + --gen-tokens exceed the model's context of " +
                            std::to_string(m.config().n_ctx_train));

    std::vector<double> prefill, decode;
    // The memory's read bandwidth just before and just after each counted run's decode.
    std::vector<double> bandwidth_runs;
    std::optional<kvchat::BandwidthProbe> probe(std::in_place, l.backend->pool());
    std::vector<float> logits;
    double kv_read = 0.0;  // mean bytes of keys and values a decode step reads (all layers)
    long minor_faults = 0, major_faults = 0;  // during the counted decode loops
    for (int r = 0; r <= runs; ++r) {  // run 0 warms up (page faults, caches) and is not counted
        auto cache = m.make_default_cache(*l.backend);
        auto t0 = std::chrono::steady_clock::now();
        m.forward(*l.backend, *cache, ids.data(), static_cast<int64_t>(ids.size()), kvchat::Logits::Last, logits);
        auto t1 = std::chrono::steady_clock::now();
        const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
        const double bw_before = r > 0 ? probe->measure() : 0.0;
        t1 = std::chrono::steady_clock::now();
        // Attention reads every key and value the cache holds; it grows by one token a step.
        const double kv_first = static_cast<double>(cache->bytes());
        const auto faults0 = page_faults();
        for (int i = 0; i < gen_tokens; ++i) {
            const int32_t next = static_cast<int32_t>(kvchat::first_max_index(logits.data(), static_cast<int64_t>(logits.size())));
            m.forward(*l.backend, *cache, &next, 1, kvchat::Logits::Last, logits);
        }
        auto t2 = std::chrono::steady_clock::now();
        const auto faults1 = page_faults();
        kv_read = 0.5 * (kv_first + static_cast<double>(cache->bytes()));
        if (r == 0) continue;
        bandwidth_runs.push_back(0.5 * (bw_before + probe->measure()));
        minor_faults += faults1.first - faults0.first;
        major_faults += faults1.second - faults0.second;
        prefill.push_back(prompt_tokens / prefill_s);
        decode.push_back(gen_tokens / std::chrono::duration<double>(t2 - t1).count());
    }
    probe.reset();  // (its pages are not the engine's resident memory)
    const Spread p = spread(prefill), d = spread(decode);
    const double weights = weight_bytes_per_token(m);
    const double per_token = weights + kv_read;
    const double achieved = per_token * d.median / 1e9;
    // Each run's share against the bandwidth read beside it.
    std::vector<double> fractions;
    for (size_t i = 0; i < decode.size(); ++i)
        fractions.push_back(bandwidth_runs[i] > 0 ? per_token * decode[i] / 1e9 / bandwidth_runs[i] : 0.0);
    const Spread f = spread(fractions);
    const double bandwidth = spread(bandwidth_runs).median;
    const double rss_end = rss_mib();
    json j;
    j["model"] = m.path();
    j["threads"] = l.backend->pool().size();
    j["device"] = l.backend->name();
    j["simd"] = kvchat::simd_level();
    j["simd_families"] = kvchat::simd_family_levels();
    j["prompt_tokens"] = prompt_tokens;
    j["gen_tokens"] = gen_tokens;
    j["runs"] = runs;
    j["prefill_tok_s"] = p.median;
    j["prefill_min_tok_s"] = p.min;
    j["prefill_max_tok_s"] = p.max;
    j["prefill_runs_tok_s"] = prefill;
    j["decode_tok_s"] = d.median;
    j["decode_min_tok_s"] = d.min;
    j["decode_max_tok_s"] = d.max;
    j["decode_runs_tok_s"] = decode;
    // Decode should fault no page in: a fault here means the weights' pages were dropped and
    // mapped (minor) or read (major) again, and the step waited for it.
    j["decode_page_faults_minor"] = minor_faults;
    j["decode_page_faults_major"] = major_faults;
    j["decode_weight_bytes_per_token"] = weights;
    j["decode_kv_bytes_per_token"] = kv_read;
    j["memory_read_gbs"] = bandwidth;
    j["memory_read_gbs_runs"] = bandwidth_runs;
    j["decode_read_gbs"] = achieved;
    j["decode_bandwidth_fraction"] = f.median;
    j["decode_bandwidth_fraction_min"] = f.min;
    j["decode_bandwidth_fraction_max"] = f.max;
    j["decode_bandwidth_fraction_runs"] = fractions;
    j["model_file_mib"] = static_cast<double>(m.file_bytes()) / (1024.0 * 1024.0);
    j["rss_before_load_mib"] = rss0;
    j["rss_after_load_mib"] = rss_loaded;
    j["rss_after_bench_mib"] = rss_end;
    if (o.flag("--json")) {
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::printf("model      %s\nthreads    %d (%s)\n"
                    "prefill    %.1f tok/s  (%d tokens; median of %d runs, min %.1f, max %.1f)\n"
                    "decode     %.1f tok/s  (%d tokens; median of %d runs, min %.1f, max %.1f)\n"
                    "bandwidth  a decoded token reads %.1f MB (weights %.1f, keys and values %.2f): %.1f GB/s at the\n"
                    "           median; %.0f%% (runs %.0f-%.0f%%) of what this machine streamed from memory with %d\n"
                    "           threads just before and after each run (median %.1f GB/s)\n"
                    "memory     %.0f MiB resident after load, %.0f MiB after the runs (model file %.0f MiB)\n"
                    "kernels    %s\n",
                    m.path().c_str(), l.backend->pool().size(), kvchat::simd_level(), p.median, prompt_tokens, runs, p.min,
                    p.max, d.median, gen_tokens, runs, d.min, d.max, per_token / 1e6, weights / 1e6, kv_read / 1e6, achieved,
                    100.0 * f.median, 100.0 * f.min, 100.0 * f.max, l.backend->pool().size(), bandwidth, rss_loaded,
                    rss_end, j["model_file_mib"].get<double>(),
                    j["simd_families"].get<std::string>().empty() ? "(one level for all)" : j["simd_families"].get<std::string>().c_str());
    }
    return 0;
}

}  // namespace

namespace {
int run_command(const std::vector<std::string>& args);
}  // namespace

int main(int argc, char** argv) {
    // A file size limit (ulimit -f) would otherwise kill the process with SIGXFSZ when a spill
    // file reaches it; ignored, the write fails with EFBIG and the cache reports a clear error.
    std::signal(SIGXFSZ, SIG_IGN);
    // A reader that goes away (`| head`) must not kill a chat mid-answer and lose the answer
    // shown: the write fails with EPIPE instead, and the command stops as by Ctrl-C.
    std::signal(SIGPIPE, SIG_IGN);
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (const std::string& a : args) {
        if (a == "--help" || a == "-h") {
            std::fputs(usage().c_str(), stdout);
            return 0;
        }
        if (a == "--version") {
            std::printf("kvchat-cli %s\n", KVCHAT_VERSION);
            return 0;
        }
    }
    int status = 0;
    try {
        status = run_command(args);
    } catch (const kvchat::Error& e) {
        return fail(e.what());
    } catch (const std::bad_alloc&) {
        return fail("out of memory");
    } catch (const std::exception& e) {
        // Anything else (a library's own exception): still a message and exit 2, never an abort.
        return fail(std::string("unexpected error: ") + e.what());
    } catch (...) {
        return fail("unexpected error");
    }
    // What is still buffered must reach its reader: a full disk or a closed pipe is an error,
    // not a silent loss of the output.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
        return fail(std::string("cannot write to standard output (") + std::strerror(errno ? errno : EIO) + ")");
    return status;
}

namespace {

int run_command(const std::vector<std::string>& args) {
    {
        const Options o = parse(args);
        if (!o.positional.empty() && o.command != "prefix" && o.command != "storage")
            return fail("unexpected argument '" + o.positional[0] + "' (see --help)");
        if (o.command.empty()) {
            std::fputs(usage().c_str(), stderr);
            return 2;
        }
        // A lower SIMD level than the CPU's, for every command (matmul and attention kernels both
        // follow it; the bits are the same): to measure the AVX2 path on an AVX-512 machine, or
        // to keep off a level a CPU lists but faults on.
        if (o.has("--simd")) {
            try {
                kvchat::force_simd_level(o.str("--simd", "auto").c_str());
            } catch (const kvchat::Error& e) {
                return fail(std::string("--simd: ") + e.what());
            }
        }
        if (o.command == "info") return cmd_info(o);
        if (o.command == "tokenize") return cmd_tokenize(o);
        if (o.command == "template") return cmd_template(o);
        if (o.command == "generate") return cmd_generate(o);
        if (o.command == "bench") return cmd_bench(o);
        if (o.command == "chat") return kvchat::cli::cmd_chat(o);
        if (o.command == "branch") return kvchat::cli::cmd_branch(o);
        if (o.command == "conversations") return kvchat::cli::cmd_conversations(o);
        if (o.command == "versions") return kvchat::cli::cmd_versions(o);
        if (o.command == "prefix") return kvchat::cli::cmd_prefix(o);
        if (o.command == "chat-bench") return kvchat::cli::cmd_chat_bench(o);
        if (o.command == "storage") return kvchat::cli::cmd_storage(o);
        if (o.command == "serve") return kvchat::cli::cmd_serve(o);
        return fail("unknown command '" + o.command + "' (see --help)");
    }
}

}  // namespace
