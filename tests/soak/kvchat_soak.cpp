// kvchat_soak: a seeded, model-based soak test (the way SQLite and Jepsen test: random operations
// against a simple model of the expected state). Each seed gets a fresh data folder and a tiny
// generated model (Gemma-3-shaped with sliding layers, or llama), then random steps through two
// drivers over one database:
//   - kvchat-cli processes: send, regenerate, switch strategy with a turn, save / use / rename /
//     delete prefixes; some stopped with SIGINT at a random moment, some killed with SIGKILL,
//     SIGTERM or SIGHUP, some run under a file size limit (a full disk without root);
//   - the session API the window uses (ChatSession, in this process): create, send,
//     stop at a random moment, regenerate, edit, switch strategy live, close, rename, remove,
//     save prefixes, and restart (the registry and its store destroyed and made again);
//   - and between them, damage: a snapshot file flipped, cut short or emptied, put in place by
//     rename (a file rewritten in place under a running kvchat is test_soak_regressions'
//     snapshotCutInPlaceAfterLoadingIsHarmless).
// After every step: no crash and no hang; every conversation's transcript, strategy and every
// prefix equal the model's; every answer of a lossless strategy is the greedy answer computed
// without a cache (`--no-cache`), a stopped one a prefix of it; no temporary or orphaned file is
// left; PRAGMA integrity_check says ok.
//
// A failure is "FAIL" with the seed and the step (one that looks like a bug fixed earlier says
// which: "regression of ..."), and the run goes on from the state the database holds; replay with --seed S --steps K (the operations of a step depend only on the seed
// and the step number; the moment a signal lands does not, so a replay may take another path).
//
// usage: kvchat_soak [--seed S] [--seeds N] [--steps K] [--minutes M] [--dir PATH] [--keep]
//                    [--cli PATH] [-v]
#include "engine/cache/cache_spec.h"
#include "engine/chat/conversation_cache.h"
#include "engine/chat/chat_session.h"
#include "engine/compute/backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/store/store.h"
#include "soak/soak_support.h"
#include "soak/soak_world.h"
#include "support/test_paths.h"
#include "support/tiny_model.h"

#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace kvchat;
using namespace kvchat::soak;

namespace {

// ---------------------------------------------------------------------------------------------
// Bugs the soak met before they were fixed (issue 25, and what it found itself): a failure that
// looks like one of them names it, to be read faster. Each has a regression test.
struct FixedBug {
    const char* id;
    const char* text;
};
const FixedBug kFixedBugs[] = {
    {"switch-reopened-crash",
     "a strategy switch on a conversation reopened from its snapshot crashed (use-after-free of a backend; test_strategy_switch)"},
    {"lossy-before-fill",
     "a quantized/sink/sliding cache was not bit-equal to dynamic before its residual/window filled (test_strategy_switch)"},
    {"signal-loses-answer", "SIGTERM/SIGHUP/SIGPIPE ended kvchat-cli without its answer, the message left unanswered (test_cli_chat)"},
    {"refused-leaves-message", "a refused turn left its message unanswered (test_soak_regressions refusedRegenerateKeepsTheAnswer)"},
    {"blank-creates-conversation", "a blank message created an empty conversation (test_cli_chat)"},
    {"refused-switch-recorded",
     "a switch with a turn (chat --cache) that was refused was recorded anyway (test_soak_regressions "
     "refusedSwitchOnOpenKeepsTheOldStrategy)"},
};
const char* fixed_text(const std::string& id) {
    for (const FixedBug& k : kFixedBugs)
        if (id == k.id) return k.text;
    return "?";
}

struct RunOptions {
    uint64_t seed = 1;
    int seeds = 1;
    int steps = 300;
    double minutes = 0;  // > 0: seeds until the time is up (steps per seed as given)
    std::string dir;
    bool keep = false;
    std::string cli = test::cli_path();
    int verbose = 0;
};

// ---------------------------------------------------------------------------------------------
// Random choices.
class Dice {
public:
    explicit Dice(uint64_t seed) : rng_(seed) {}
    int range(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }  // inclusive
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    template <class T>
    const T& pick(const std::vector<T>& v) {
        return v[static_cast<size_t>(range(0, static_cast<int>(v.size()) - 1))];
    }
    std::mt19937_64& engine() { return rng_; }

private:
    std::mt19937_64 rng_;
};

std::string words(Dice& d, int n) {
    static const std::vector<std::string> kWords = {"the", "cat", "sat", "on", "mat", "dog", "ran", "far", "a",
                                                    "big", "red", "sun", "is", "hot", "and", "we", "go", "home",
                                                    "why", "how", "tell", "me", "more", "about", "it", "42", "7"};
    static const std::vector<std::string> kOdd = {"héllo", "naïve", "日本", "🙂", "<start_of_turn>", "<bos>",
                                                  "\t", "new\nline", "  ", "[INST]", "<|im_end|>", "\\"};
    std::string s;
    for (int i = 0; i < n; ++i) {
        if (i) s += ' ';
        s += d.chance(0.06) ? d.pick(kOdd) : d.pick(kWords);
    }
    // Blank messages are a step of their own (cli_blank); a message meant to be sent has a word.
    if (s.find_first_not_of(" \t\n\r\f\v") == std::string::npos) s += "cat";
    return s;
}

std::string lossless_spec(Dice& d, const std::string& spill) {
    const std::vector<int> lens = {24, 48, 96, 160, 320, 1024};
    const int len = d.pick(lens);
    switch (d.range(0, 10)) {
        case 0: return "dynamic";
        case 1: return "static:max_len=" + std::to_string(len);
        case 2: return "offloaded";
        case 3: return "offloaded:dir=" + spill;
        case 4: return "offloaded_static:max_len=" + std::to_string(len);
        case 5: return "hybrid";
        case 6: return "hybrid:max_len=" + std::to_string(len);
        case 7: return "hybrid+offloaded";
        case 8: return "dynamic:dtype=f32";
        case 9: return "hybrid:max_len=" + std::to_string(len) + "+offloaded";
        default: return "static:max_len=" + std::to_string(len) + ",dtype=f32";
    }
}

std::string quantized_part(Dice& d) {
    const int group = d.pick(std::vector<int>{8, 16, 32});
    const int residual = group * d.range(1, 8);
    return "quantized:nbits=" + std::to_string(d.pick(std::vector<int>{2, 4, 8})) + ",residual=" + std::to_string(residual) +
           ",group=" + std::to_string(group);
}

std::string lossy_spec(Dice& d) {
    const int window = d.pick(std::vector<int>{6, 12, 40, 100, 300});
    const int sinks = d.range(1, std::min(4, window - 1));
    switch (d.range(0, 7)) {
        case 0: return quantized_part(d);
        case 1: return quantized_part(d) + "+offloaded";
        case 2: return "sliding_window:window=" + std::to_string(window);
        case 3: return "sink:window=" + std::to_string(window) + ",sinks=" + std::to_string(sinks);
        case 4: return "sink:window=" + std::to_string(window) + ",sinks=" + std::to_string(sinks) + "+" + quantized_part(d);
        case 5: return "sliding_window:window=" + std::to_string(window) + "+" + quantized_part(d);
        case 6: return "hybrid+" + quantized_part(d);
        default: return "dynamic:dtype=bf16";
    }
}

std::string any_spec(Dice& d, const std::string& spill) { return d.chance(0.6) ? lossless_spec(d, spill) : lossy_spec(d); }

bool is_prefix_of(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

std::string show(const std::string& s, size_t max = 80) {
    std::string out;
    for (char c : s.substr(0, max)) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (u < 0x20 || u == 0x7f) out += "\\x" + std::string(1, "0123456789abcdef"[u >> 4]) + "0123456789abcdef"[u & 15];
        else out += c;
    }
    return '"' + out + (s.size() > max ? "...\"" : "\"");
}

std::string show_ids(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size() && i < 24; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s + (ids.size() > 24 ? ",...]" : "]");
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\n\r\f\v") == std::string::npos; }

// ---------------------------------------------------------------------------------------------
// What one turn should do, and how what happened is judged.
struct TurnExpectation {
    std::string title;
    bool is_new = false;
    std::vector<Message> before;  // the conversation before the step (empty when new)
    std::vector<Message> base;    // what the answer follows (ends with the user message)
    std::string spec;             // the strategy the turn runs with
    int n = 0;
};

enum class Outcome { Missing, Unchanged, Unanswered, Answered, Partial, Other };
const char* outcome_name(Outcome o) {
    switch (o) {
        case Outcome::Missing: return "no conversation";
        case Outcome::Unchanged: return "unchanged";
        case Outcome::Unanswered: return "message left unanswered";
        case Outcome::Answered: return "answered";
        case Outcome::Partial: return "stopped answer kept";
        case Outcome::Other: return "a transcript the turn cannot give";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
class SeedRun {
public:
    SeedRun(const RunOptions& o, uint64_t seed, std::string dir, FILE* log)
        : o_(o), seed_(seed), dir_(std::move(dir)), log_(log) {}

    // Runs steps first..last; returns how many were done. A run that goes on after a crash
    // (first > 1) takes the state the database holds, as a restarted window would.
    int run(int first, int last) {
        setup();
        if (first > 1) {
            world_ = World::from_db(read_db(db_));
            killed();
            next_title_ = next_prefix_ = 1000 * first;
        }
        int done = 0;
        for (step_ = first; step_ <= last; ++step_) {
            Dice d(seed_ * 1000003ULL + static_cast<uint64_t>(step_));
            one_step(d);
            check_after_step();
            ++done;
            if (failures_ >= 3) {
                say("STOP seed %llu after %d failures", (unsigned long long)seed_, failures_);
                break;
            }
        }
        reg_.reset();
        store_.reset();
        say("RESULT steps=%d fail=%d cli=%d api=%d reference_answers=%zu", first - 1 + done, failures_, cli_runs_,
            api_calls_, ref_->computed());
        return done;
    }

    int failures() const { return failures_; }

private:
    // ---- output ----
    void say(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        va_list ap;
        va_start(ap, fmt);
        std::vfprintf(log_, fmt, ap);
        va_end(ap);
        std::fputc('\n', log_);
        std::fflush(log_);
    }
    void fail(const std::string& what) {
        ++failures_;
        say("FAIL seed=%llu step=%d op=%s: %s", (unsigned long long)seed_, step_, op_.c_str(), what.c_str());
        resync_ = true;
    }
    // A failure that looks like a bug fixed earlier: named, to be read faster.
    void regression(const std::string& id, const std::string& what) {
        fail("regression of " + id + " (" + fixed_text(id) + "): " + what);
    }
    void note(const std::string& what) {
        if (o_.verbose) say("  step %d %s: %s", step_, op_.c_str(), what.c_str());
    }

    // ---- setup ----
    void setup() {
        fs::create_directories(dir_);
        tmp_ = dir_ + "/tmp";
        spill_ = dir_ + "/spill";
        data_ = dir_ + "/data";
        fs::create_directories(tmp_);
        fs::create_directories(spill_);
        fs::create_directories(data_);
        ::setenv("TMPDIR", tmp_.c_str(), 1);
        db_ = data_ + "/kvchat.db";
        model_path_ = dir_ + "/model.gguf";
        test::TinyModelSpec spec = test::chat_sized_spec();
        spec.seed = static_cast<uint32_t>(seed_ % 1000 + 1);
        if (seed_ % 2 == 0) {
            spec.arch = "llama";
            spec.sliding_window = 0;
            spec.rope_base = 10000.0;
        }
        // A short context on some seeds, so refusals and full contexts come up.
        spec.n_ctx = seed_ % 3 == 0 ? 256 : 2048;
        test::write_tiny_gguf(spec, model_path_);
        model_ = Model::load(model_path_);
        backend_ = make_cpu_backend(1);
        ref_ = std::make_unique<Reference>(*model_, *backend_);
        say("SEED %llu: %s model (%d layers, context %d), data in %s", (unsigned long long)seed_, spec.arch.c_str(),
            spec.n_layer, spec.n_ctx, dir_.c_str());
    }

    ChatSession& reg() {
        if (!reg_) {
            store_ = std::make_unique<Store>(db_);
            reg_ = std::make_unique<ChatSession>(*store_, *model_, *backend_, 2);
            store_opened();  // opening the store removes what a killed program left
        }
        return *reg_;
    }

    // ---- the steps ----
    void one_step(Dice& d) {
        resync_ = false;
        const int r = d.range(0, 999);
        const bool cli = d.chance(0.5);
        if (r < 300) return cli ? cli_send(d, Signal::None) : api_send(d, false);
        if (r < 380) return cli ? cli_send(d, Signal::Interrupt) : api_send(d, true);
        if (r < 460) return cli ? cli_regenerate(d) : api_regenerate(d);
        if (r < 510) return api_edit(d);
        if (r < 600) return cli ? cli_switch(d) : api_switch(d);
        if (r < 650) return cli ? cli_prefix_save(d) : api_prefix_save(d);
        if (r < 670) return cli_prefix_change(d);
        if (r < 690) return cli_send(d, Signal::None, true);  // from a prefix
        if (r < 730) return api_restart();
        if (r < 760) return api_close(d);
        if (r < 810) return cli_send(d, Signal::Kill);
        if (r < 830) return cli_send(d, d.chance(0.5) ? Signal::Terminate : Signal::Hangup);
        if (r < 870) return cli_send(d, Signal::FullDisk);
        if (r < 920) return corrupt_snapshot(d);
        if (r < 940) return cli_blank(d);
        if (r < 960) return api_rename(d);
        if (r < 980) return api_remove(d);
        return cli_conversations();
    }

    // A conversation to talk to: an existing one (not too long), or a new title.
    struct Target {
        std::string title;
        bool is_new = false;
    };
    Target target(Dice& d, bool allow_new = true) {
        std::vector<std::string> ok;
        for (const ConversationModel& c : world_.conversations)
            if (ref_->prompt_tokens(c.messages) < 600) ok.push_back(c.title);
        if (ok.empty() || (allow_new && d.chance(world_.conversations.size() >= 6 ? 0.05 : 0.3))) {
            std::string t = d.chance(0.1) ? "chat é " + std::to_string(next_title_++) : "c" + std::to_string(next_title_++);
            return {t, true};
        }
        return {d.pick(ok), false};
    }

    enum class Signal { None, Interrupt, Kill, Terminate, Hangup, FullDisk };

    std::vector<std::string> cli_base() const {
        return {o_.cli, "--db", db_, "--model", model_path_, "--threads", "1"};
    }

    // opens_store: false for a command refused before it opens the database (a blank message), which
    // therefore sweeps nothing a killed program left.
    ProcessResult cli(std::vector<std::string> args, int signal = 0, int after_ms = 0, uint64_t fsize = 0,
                      bool opens_store = true) {
        ++cli_runs_;
        ProcessOptions p;
        p.args = cli_base();
        // The command comes first.
        p.args.insert(p.args.begin() + 1, args.front());
        p.args.insert(p.args.end(), args.begin() + 1, args.end());
        p.signal = signal;
        p.signal_after_ms = after_ms;
        p.file_size_limit = fsize;
        p.timeout_ms = 90000;
        p.env = {{"TMPDIR", tmp_}};
        ProcessResult r = run_process(p);
        if (o_.verbose > 1) {
            std::string line;
            for (const std::string& a : p.args) line += " " + show(a, 40);
            note("ran" + line + " -> " + r.status() + " err " + show(r.err, 300));
        }
        if (r.timed_out) fail("kvchat-cli hung (no end after 90 s): " + show(r.err, 400));
        if (r.term_signal != 0 && r.term_signal != signal && !(r.term_signal == SIGKILL && r.timed_out)) {
            // The data as the crash left it, and the command, to replay it under a debugger. Copied
            // by another process: closing a descriptor of the database here would drop the
            // session's SQLite locks on it (POSIX locks belong to the process), and the database
            // would be corrupted by the next writer.
            const std::string keep = dir_ + "/crash-step-" + std::to_string(step_);
            std::error_code ec;
            fs::create_directories(keep, ec);
            ProcessOptions copy;
            copy.args = {"/bin/cp", "-a", data_, keep + "/data"};
            run_process(copy);
            std::string line;
            for (const std::string& a : p.args) line += " '" + a + "'";
            crash_ = "kvchat-cli died of " + r.status() + "; stderr " + show(r.err, 600) + "; data left in " + keep +
                     " (command:" + line + ")";
        } else
            crash_.clear();
        // Opening the store (any command that got that far) removes what a killed run left.
        if (r.term_signal != 0 || r.timed_out) killed();
        else if (opens_store) store_opened();
        return r;
    }

    // Judges the conversation as stored after a turn; adopts it into the model when it is one of
    // `allowed`. Returns the outcome.
    Outcome judge_turn(const TurnExpectation& t, const DbView& db, std::set<Outcome> allowed, const std::string& context) {
        const DbConversation* got = db.conversation(t.title);
        Outcome out = Outcome::Other;
        std::vector<Message> msgs;
        if (got)
            for (const DbMessage& m : got->messages) msgs.push_back(message_of(m));
        std::string why;
        const bool answer_shaped = got && msgs.size() == t.base.size() + 1 &&
                                   std::equal(t.base.begin(), t.base.end(), msgs.begin()) && msgs.back().role == "assistant";
        if (!got) {
            out = Outcome::Missing;
        } else if (msgs == t.before && !(answer_shaped && allowed.count(Outcome::Answered))) {
            out = Outcome::Unchanged;
        } else if (msgs == t.base) {
            out = Outcome::Unanswered;
        } else if (answer_shaped) {
            out = Outcome::Answered;
            const Message& a = msgs.back();
            const SpecTraits tr = traits_of(t.spec);
            const ReferenceAnswer ref = ref_->answer(t.base, t.n, tr.capacity);
            // A lossy cache is exact until it loses a token, and stays lossy after that: cropped back
            // (an edit, a regenerate) it keeps the tokens it quantized or dropped while longer.
            const int64_t reached = std::max(high_water_[t.title], ref.prompt_tokens + t.n);
            const bool exact = tr.lossless || (tr.exact_until > 0 && reached <= tr.exact_until);
            if (ref.refused) {
                why = "answered, but the prompt (" + std::to_string(ref.prompt_tokens) + " tokens) and one new token do not fit " +
                      std::to_string(ref.limit);
            } else if (exact && !(a.ids == ref.ids && a.text == ref.text)) {
                if (is_prefix_of(a.ids, ref.ids) && ref.text.rfind(a.text, 0) == 0 && a.ids.size() < ref.ids.size()) {
                    out = Outcome::Partial;
                } else {
                    why = "answer differs from the no-cache greedy answer under " + t.spec + " (prompt " +
                          std::to_string(ref.prompt_tokens) + " tokens, -n " + std::to_string(t.n) + "): got " +
                          show_ids(a.ids) + " " + show(a.text) + ", want " + show_ids(ref.ids) + " " + show(ref.text) +
                          " (" + ref.stop_reason + ")";
                    if (!tr.lossless) {
                        regression("lossy-before-fill", context + ": " + why);
                        why.clear();
                    }
                }
            } else if (!exact && a.ids.size() > static_cast<size_t>(t.n)) {
                why = "a lossy answer longer than -n " + std::to_string(t.n);
            }
        }
        // A new conversation made, and nothing sent to it: only its opening (a prefix's messages,
        // a system message) or nothing.
        if (t.is_new && got && !t.base.empty() && std::equal(msgs.begin(), msgs.end(), t.base.begin(), t.base.end() - 1))
            out = Outcome::Unchanged;
        // What the conversation's cache may have held: the prompt prefilled (kept also when the turn
        // is taken back) and the answer's tokens.
        if (!t.base.empty())
            high_water_[t.title] = std::max(high_water_[t.title], ref_->prompt_tokens(t.base) + t.n);
        if (!why.empty()) {
            fail(context + ": " + why);
        } else if (!allowed.count(out)) {
            std::string dump;
            for (const Message& m : msgs) dump += " " + m.role + ":" + show(m.text, 40);
            fail(context + ": the conversation is " + outcome_name(out) + ", expected one of {" + [&] {
                std::string s;
                for (Outcome a : allowed) s += std::string(s.empty() ? "" : ", ") + outcome_name(a);
                return s;
            }() + "}; stored:" + dump);
        }
        adopt(t.title, db);
        return out;
    }

    // The model takes the conversation as stored (after its step was judged).
    void adopt(const std::string& title, const DbView& db) {
        const DbConversation* got = db.conversation(title);
        if (!got) {
            world_.remove_conversation(title);
            return;
        }
        ConversationModel* c = world_.conversation(title);
        if (!c) {
            world_.conversations.push_back({got->id, title, got->cache_spec, {}});
            c = &world_.conversations.back();
        }
        c->id = got->id;
        c->messages.clear();
        for (const DbMessage& m : got->messages) c->messages.push_back(message_of(m));
    }

    TurnExpectation expect_send(const Target& t, const std::string& text, int n, const std::string& spec,
                                const std::vector<Message>& opening) {
        TurnExpectation e;
        e.title = t.title;
        e.is_new = t.is_new;
        e.n = n;
        if (!t.is_new) {
            const ConversationModel* c = world_.conversation(t.title);
            e.before = c->messages;
            e.spec = spec.empty() ? c->spec : canonical_spec(spec);
        } else {
            e.spec = canonical_spec(spec);  // none given: what the registry stores for ""

        }
        e.base = t.is_new ? opening : e.before;
        e.base.push_back({"user", text, {}});
        return e;
    }

    // What a turn that runs to its end must give: refused (the conversation waits for an answer,
    // or the prompt does not fit) or answered.
    bool refusal_expected(const TurnExpectation& e, std::string& why) {
        if (!e.is_new && !e.before.empty() && e.before.back().role == "user") {
            why = "unanswered";
            return true;
        }
        const ReferenceAnswer ref = ref_->answer(e.base, e.n, traits_of(e.spec).capacity);
        if (ref.refused) {
            why = "does not fit";
            return true;
        }
        return false;
    }

    void cli_send(Dice& d, Signal sig, bool from_prefix = false) {
        Target t = target(d);
        std::vector<std::string> args = {"chat", "--conversation", t.title, "--greedy", "--json"};
        std::vector<Message> opening;
        std::string spec, prefix_used;
        if (from_prefix) {
            if (world_.prefixes.empty()) return cli_prefix_save(d);
            t = {"c" + std::to_string(next_title_++), true};
            args[2] = t.title;
            const PrefixModel& p = d.pick(world_.prefixes);
            args.insert(args.end(), {"--prefix", p.name});
            opening = p.messages;
            prefix_used = p.name;
        } else if (t.is_new && d.chance(0.3)) {
            const std::string sys = words(d, d.range(1, 8));
            args.insert(args.end(), {"--system", sys});
            opening.push_back({"system", sys, {}});
        }
        if (t.is_new && d.chance(0.6)) {
            spec = any_spec(d, spill_);
            args.insert(args.end(), {"--cache", spec});
        }
        const bool long_answer = sig != Signal::None && sig != Signal::FullDisk;
        const int n = long_answer ? d.range(24, 160) : d.range(1, 16);
        const std::string text = words(d, d.chance(0.1) ? d.range(40, 120) : d.range(1, 12));
        args.insert(args.end(), {"--message", text, "-n", std::to_string(n)});
        op_ = std::string("cli-send") + (from_prefix ? "-from-prefix" : "") +
              (sig == Signal::Interrupt   ? "-sigint"
               : sig == Signal::Kill      ? "-sigkill"
               : sig == Signal::Terminate ? "-sigterm"
               : sig == Signal::Hangup    ? "-sighup"
               : sig == Signal::FullDisk  ? "-fulldisk"
                                          : "") +
              " " + show(t.title) + (spec.empty() ? "" : " --cache " + spec);
        const TurnExpectation e = expect_send(t, text, n, spec, opening);
        if (!t.is_new) op_ += reopen_marker(t.title, e.spec, false);
        if (!prefix_used.empty()) op_ += prefix_marker(prefix_used, e.spec);
        else if (op_.find("[reopens") == std::string::npos) op_ += reused_prefix_marker(e);
        say("STEP %d %s", step_, op_.c_str());

        int signo = 0, after = 0;
        uint64_t fsize = 0;
        switch (sig) {
            case Signal::None: break;
            case Signal::Interrupt: signo = SIGINT; break;
            case Signal::Kill: signo = SIGKILL; break;
            case Signal::Terminate: signo = SIGTERM; break;
            case Signal::Hangup: signo = SIGHUP; break;
            case Signal::FullDisk: {
                std::error_code ec;
                const auto db_size = fs::exists(db_) ? fs::file_size(db_, ec) : 0;
                fsize = d.pick(std::vector<uint64_t>{1, 4096, 32768, db_size, db_size + 8192, db_size + 65536});
                if (fsize == 0) fsize = 1;
                break;
            }
        }
        if (signo) after = d.range(0, 250);
        const ProcessResult r = cli(args, signo, after, fsize);
        if (fsize) killed_this_step_ = true;  // no room to record a snapshot written: it stays until the next save
        const DbView db = read_db(db_);
        std::string why;
        const bool refuse = refusal_expected(e, why);
        const std::string ctx = "kvchat-cli " + r.status() + (r.signal_sent ? " (signal sent at " + std::to_string(after) + " ms)" : "");
        if (!crash_.empty()) return report_crash(), adopt(t.title, db);
        if (signo == SIGKILL) {
            judge_turn(e, db, {Outcome::Missing, Outcome::Unchanged, Outcome::Unanswered, Outcome::Answered}, ctx);
            return;
        }
        if (signo && r.term_signal == signo) {
            // Ended by the signal itself: it landed before kvchat-cli caught it (while loading), so
            // nothing was sent; a new conversation may have been made just before.
            const DbConversation* got = db.conversation(t.title);
            if (got && !got->messages.empty() && got->messages.size() == e.base.size() && got->messages.back().role == "user") {
                regression("signal-loses-answer", ctx);
                return adopt(t.title, db);
            }
            judge_turn(e, db, {Outcome::Missing, Outcome::Unchanged}, ctx);
            return;
        }
        const bool disk = sig == Signal::FullDisk;
        // A new conversation whose first turn did not happen is removed (under a full disk the
        // removal may find no room either).
        const std::set<Outcome> untouched = t.is_new && !disk ? std::set<Outcome>{Outcome::Missing}
                                                               : std::set<Outcome>{Outcome::Missing, Outcome::Unchanged};
        if (r.exit_code == 2) {
            if (!refuse && !disk) {
                fail("refused a turn that should be answered: " + show(r.err, 400));
                return adopt(t.title, db);
            }
            if (r.err.find("error") == std::string::npos) fail("exit 2 without an error message: " + show(r.err, 300));
            // A refused turn leaves the conversation as it was. Under a full disk the answer may be
            // saved and a later write (the snapshot's name, the conversation's time) fail: the error
            // is told, nothing is lost.
            std::set<Outcome> ok = untouched;
            if (disk) ok.insert({Outcome::Answered, Outcome::Unanswered});
            const Outcome out = judge_turn(
                e, db, ok,
                ctx + (disk ? " under a file size limit of " + std::to_string(fsize) + " bytes" : "") + ": " + show(r.err, 200));
            if (out == Outcome::Unanswered && !disk) regression("refused-leaves-message", ctx + ": " + show(r.err, 200));
            return;
        }
        if (signo && r.exit_code == 128 + signo) {
            // Ctrl-C, SIGTERM, SIGHUP: the answer stops and what was shown is kept; before the
            // first token the message is taken back ("stopped before the answer began").
            if (refuse) {
                fail("a turn that should be refused (" + why + ") was stopped instead: " + show(r.err, 300));
                return adopt(t.title, db);
            }
            std::set<Outcome> ok = untouched;
            ok.insert({Outcome::Answered, Outcome::Partial});
            const Outcome out = judge_turn(e, db, ok, ctx);
            if ((out == Outcome::Missing || out == Outcome::Unchanged) && r.err.find("stopped before the answer began") == std::string::npos)
                fail("stopped before the answer, without saying so: " + show(r.err, 300));
            if (out == Outcome::Answered || out == Outcome::Partial) {
                if (!t.is_new || !spec.empty()) check_spec(t.title, db, e.spec, ctx);
                else if (ConversationModel* c = world_.conversation(t.title)) c->spec = db.conversation(t.title)->cache_spec;
            }
            return;
        }
        if (r.exit_code != 0) {
            fail("unexpected " + r.status() + ": " + show(r.err, 400));
            return adopt(t.title, db);
        }
        if (refuse) {
            fail("answered a turn that should be refused (" + why + ")");
            return adopt(t.title, db);
        }
        std::set<Outcome> ok = {Outcome::Answered};
        if (r.signal_sent) ok.insert(Outcome::Partial);
        judge_turn(e, db, ok, ctx);
        if (!t.is_new || !spec.empty()) check_spec(t.title, db, e.spec, ctx);
        else if (ConversationModel* c = world_.conversation(t.title)) c->spec = db.conversation(t.title)->cache_spec;
    }

    void check_spec(const std::string& title, const DbView& db, const std::string& want, const std::string& ctx) {
        const DbConversation* got = db.conversation(title);
        ConversationModel* c = world_.conversation(title);
        if (!got || !c) return;
        if (got->cache_spec != want) fail(ctx + ": strategy is " + got->cache_spec + ", expected " + want);
        c->spec = got->cache_spec;
    }

    void cli_blank(Dice& d) {
        const Target t = target(d);
        const std::string text = d.pick(std::vector<std::string>{"", " ", "\t", "\n \n", "   "});
        op_ = "cli-blank " + show(t.title) + " " + show(text);
        say("STEP %d %s", step_, op_.c_str());
        const ProcessResult r = cli({"chat", "--conversation", t.title, "--message", text, "--greedy", "-n", "4"}, 0, 0, 0,
                                    /*opens_store=*/false);
        const DbView db = read_db(db_);
        if (!crash_.empty()) return report_crash(), adopt(t.title, db);
        if (r.exit_code != 2 || r.err.find("empty") == std::string::npos)
            fail("a blank message should be refused as empty (exit 2): " + r.status() + " " + show(r.err, 300));
        const DbConversation* got = db.conversation(t.title);
        if (t.is_new && got) {
            regression("blank-creates-conversation", "conversation " + show(t.title) + " now exists with " +
                                                    std::to_string(got->messages.size()) + " messages");
        } else if (!t.is_new) {
            TurnExpectation e;
            e.title = t.title;
            e.before = world_.conversation(t.title)->messages;
            e.base = e.before;
            judge_turn(e, db, {Outcome::Unchanged}, "blank message");
            return;
        }
        adopt(t.title, db);
    }

    void cli_regenerate(Dice& d) {
        if (world_.conversations.empty()) return cli_send(d, Signal::None);
        const Target t = target(d, false);
        // Every conversation may be too long to take another turn: then a new one is made.
        if (t.is_new) return cli_send(d, Signal::None);
        const ConversationModel& c = *world_.conversation(t.title);
        const int n = d.range(1, 16);
        op_ = "cli-regenerate " + show(t.title) + reopen_marker(t.title, c.spec, false);
        say("STEP %d %s", step_, op_.c_str());
        TurnExpectation e;
        e.title = t.title;
        e.before = c.messages;
        e.base = c.messages;
        if (!e.base.empty() && e.base.back().role == "assistant") e.base.pop_back();
        e.spec = c.spec;
        e.n = n;
        const ProcessResult r = cli({"chat", "--conversation", t.title, "--regenerate", "--greedy", "--json", "-n", std::to_string(n)});
        const DbView db = read_db(db_);
        if (!crash_.empty()) return report_crash(), adopt(t.title, db);
        const bool nothing = e.base.empty() || e.base.back().role != "user";
        const bool refuse = nothing || ref_->answer(e.base, n, traits_of(e.spec).capacity).refused;
        if (refuse) {
            if (r.exit_code != 2) fail("regenerate should be refused (" + std::string(nothing ? "no answer to regenerate" : "does not fit") + "): " + r.status());
            const Outcome out = judge_turn(e, db, {Outcome::Unchanged, Outcome::Unanswered}, "refused regenerate: " + show(r.err, 200));
            if (out == Outcome::Unanswered && e.before != e.base && !resync_)
                regression("refused-leaves-message", "regenerate was refused after it deleted the answer it was to replace (that "
                                                "answer is lost): " + show(r.err, 200));
            return;
        }
        if (r.exit_code != 0) {
            fail("regenerate failed: " + r.status() + " " + show(r.err, 400));
            return adopt(t.title, db);
        }
        judge_turn(e, db, {Outcome::Answered}, "regenerate");
    }

    void cli_switch(Dice& d) {
        if (world_.conversations.empty()) return cli_send(d, Signal::None);
        const Target t = target(d, false);
        if (t.is_new) return cli_send(d, Signal::None);
        const ConversationModel& c = *world_.conversation(t.title);
        const std::string spec = any_spec(d, spill_);
        const int n = d.range(1, 12);
        const std::string text = words(d, d.range(1, 8));
        op_ = "cli-switch " + show(t.title) + " " + c.spec + " -> " + spec + reopen_marker(t.title, spec, false);
        const TurnExpectation e = expect_send(t, text, n, spec, {});
        if (op_.find("[reopens") == std::string::npos) op_ += reused_prefix_marker(e);
        say("STEP %d %s", step_, op_.c_str());
        const ProcessResult r =
            cli({"chat", "--conversation", t.title, "--cache", spec, "--message", text, "--greedy", "--json", "-n", std::to_string(n)});
        const DbView db = read_db(db_);
        if (!crash_.empty()) return report_crash(), adopt(t.title, db);
        std::string why;
        const bool refuse = refusal_expected(e, why);
        if (r.exit_code == 2) {
            if (!refuse) fail("switch to " + spec + " with a turn failed: " + show(r.err, 400));
            const Outcome out = judge_turn(e, db, {Outcome::Unchanged, Outcome::Unanswered}, "refused (" + why + "): " + show(r.err, 200));
            if (out == Outcome::Unanswered && !resync_) regression("refused-leaves-message", show(r.err, 200));
            if (ConversationModel* m = world_.conversation(t.title)) {
                const std::string now = db.conversation(t.title)->cache_spec;
                if (now != m->spec && now == canonical_spec(spec) && !resync_)
                    regression("refused-switch-recorded", m->spec + " -> " + now + ": " + show(r.err, 200));
                m->spec = now;
            }
            return;
        }
        if (r.exit_code != 0) {
            fail("unexpected " + r.status() + ": " + show(r.err, 400));
            return adopt(t.title, db);
        }
        if (refuse) fail("answered a turn that should be refused (" + why + ")");
        judge_turn(e, db, {Outcome::Answered}, "after switching to " + spec);
        check_spec(t.title, db, canonical_spec(spec), "cli switch");
    }

    void cli_prefix_save(Dice& d) {
        const std::string name = "p" + std::to_string(next_prefix_++);
        std::vector<std::string> args = {"prefix", "save", name};
        PrefixModel want{name, {}};
        const bool from_conversation = !world_.conversations.empty() && d.chance(0.5);
        if (from_conversation) {
            const ConversationModel& c = d.pick(world_.conversations);
            if (c.messages.empty()) return;
            const int k = d.range(1, static_cast<int>(c.messages.size()));
            args.insert(args.end(), {"--conversation", c.title, "--messages", std::to_string(k)});
            for (int i = 0; i < k; ++i) want.messages.push_back({c.messages[static_cast<size_t>(i)].role, c.messages[static_cast<size_t>(i)].text, {}});
        } else {
            const std::string text = words(d, d.range(1, 30));
            args.insert(args.end(), {"--text", text});
            want.messages.push_back({"system", text, {}});
        }
        if (d.chance(0.3)) args.insert(args.end(), {"--cache", any_spec(d, spill_)});
        const bool kill = d.chance(0.1);
        op_ = "cli-prefix-save " + name + (from_conversation ? " from " + args[4] : "") + (kill ? " sigkill" : "");
        say("STEP %d %s", step_, op_.c_str());
        const ProcessResult r = cli(args, kill ? SIGKILL : 0, kill ? d.range(0, 150) : 0);
        const DbView db = read_db(db_);
        if (!crash_.empty()) return report_crash(), adopt_prefixes(db);
        const DbPrefix* got = db.prefix(name);
        if (kill && r.term_signal == SIGKILL) {
        } else if (r.exit_code == 2) note("prefix save refused: " + show(r.err, 300));
        else if (r.exit_code != 0) fail("prefix save: " + r.status() + " " + show(r.err, 300));
        else if (!got) fail("prefix save said yes, but there is no prefix " + name);
        if (got) {
            PrefixModel stored{name, {}};
            for (const DbMessage& m : got->messages) stored.messages.push_back({m.role, m.content, {}});
            if (stored.messages != want.messages) fail("prefix " + name + " holds other messages than it was saved from");
        }
        adopt_prefixes(db);
    }

    void adopt_prefixes(const DbView& db) {
        world_.prefixes.clear();
        for (const DbPrefix& p : db.prefixes) {
            PrefixModel m{p.name, {}};
            for (const DbMessage& msg : p.messages) m.messages.push_back({msg.role, msg.content, {}});
            world_.prefixes.push_back(std::move(m));
        }
    }

    void cli_prefix_change(Dice& d) {
        if (world_.prefixes.empty()) return cli_prefix_save(d);
        const PrefixModel p = d.pick(world_.prefixes);
        const bool rename = d.chance(0.5);
        const std::string to = "p" + std::to_string(next_prefix_++);
        op_ = rename ? "cli-prefix-rename " + p.name + " " + to : "cli-prefix-delete " + p.name;
        say("STEP %d %s", step_, op_.c_str());
        const ProcessResult r = rename ? cli({"prefix", "rename", p.name, to}) : cli({"prefix", "delete", p.name});
        const DbView db = read_db(db_);
        if (!crash_.empty()) return report_crash(), adopt_prefixes(db);
        if (r.exit_code != 0) fail("prefix " + std::string(rename ? "rename" : "delete") + ": " + r.status() + " " + show(r.err, 300));
        if (db.prefix(p.name)) fail("prefix " + p.name + " is still there");
        if (rename && (!db.prefix(to) || [&] {
                std::vector<Message> m;
                for (const DbMessage& x : db.prefix(to)->messages) m.push_back({x.role, x.content, {}});
                return m != p.messages;
            }()))
            fail("renamed prefix " + to + " missing or changed");
        adopt_prefixes(db);
    }

    void cli_conversations() {
        op_ = "cli-conversations";
        say("STEP %d %s", step_, op_.c_str());
        if (!fs::exists(db_)) return;
        const ProcessResult r = cli({"conversations", "--json"});
        if (!crash_.empty()) return report_crash();
        if (r.exit_code != 0) return fail("conversations: " + r.status() + " " + show(r.err, 300));
        size_t listed = 0;
        for (size_t at = 0; (at = r.out.find("\"title\"", at)) != std::string::npos; ++at) ++listed;
        if (listed != world_.conversations.size())
            fail("conversations --json lists " + std::to_string(listed) + " conversations, the model has " +
                 std::to_string(world_.conversations.size()));
    }

    // ---- the session API ----
    TurnOptions turn_options(int n) const {
        TurnOptions o;
        o.generation.max_new_tokens = n;
        o.generation.sampling.greedy = true;
        return o;
    }

    // Runs one API turn: returns "" when it returned, "cancelled", or the error's message.
    std::string api_turn(const std::function<TurnResult(const TurnCallbacks&)>& f, Dice& d, bool stop, int n, bool& stop_set) {
        ++api_calls_;
        std::atomic<bool> flag{false};
        TurnCallbacks cb;
        cb.progress.cancel = &flag;
        stop_set = false;
        if (stop) {
            const int at = d.range(-1, n);  // -1: while prefilling
            stop_at_ = at;
            auto pieces = std::make_shared<int>(0);
            cb.on_text = [&flag, &stop_set, at, pieces](std::string_view) {
                if (++*pieces > at && at >= 0) flag = true, stop_set = true;
            };
            if (at < 0)
                cb.progress.report = [&flag, &stop_set](std::string_view, int64_t, int64_t) { flag = true, stop_set = true; };
        }
        try {
            const TurnResult r = f(cb);
            if (o_.verbose > 1) {
                std::string notices;
                for (const std::string& x : r.notices) notices += " | " + x;
                note("session API turn (-n " + std::to_string(n) +
                     (stop ? ", stop after piece " + std::to_string(stop_at_) : "") + "): prompt " +
                     std::to_string(r.figures.prompt_tokens) + " tokens, " + std::to_string(r.figures.cached_tokens) +
                     " from the cache, answer " + show_ids(r.figures.token_ids) + " (" +
                     std::string(stop_reason_name(r.figures.stop_reason.value())) + ")" + notices);
            }
            return "";
        } catch (const Cancelled&) {
            return "cancelled";
        } catch (const Error& e) {
            return std::string("error: ") + e.what();
        } catch (const std::exception& e) {
            return std::string("exception: ") + e.what();
        }
    }

    void api_send(Dice& d, bool stop) {
        Target t = target(d);
        const int n = stop ? d.range(8, 60) : d.range(1, 16);
        const std::string text = words(d, d.chance(0.1) ? d.range(40, 120) : d.range(1, 12));
        std::string spec;
        std::vector<Message> opening;
        OpenOptions open;
        if (t.is_new) {
            if (d.chance(0.6)) spec = open.cache_spec = any_spec(d, spill_);
            if (!world_.prefixes.empty() && d.chance(0.25)) {
                const PrefixModel& p = d.pick(world_.prefixes);
                open.prefix = p.name;
                opening = p.messages;
            } else if (d.chance(0.3)) {
                open.system = words(d, d.range(1, 6));
                opening.push_back({"system", open.system, {}});
            }
        }
        op_ = std::string("api-send") + (stop ? "-stop" : "") + " " + show(t.title) + (spec.empty() ? "" : " " + spec) +
              (open.prefix.empty() ? "" : " prefix " + open.prefix) +
              (t.is_new ? "" : reopen_marker(t.title, world_.conversation(t.title)->spec, true)) +
              (open.prefix.empty() ? "" : prefix_marker(open.prefix, canonical_spec(spec))) +
              (open.prefix.empty() && (t.is_new || !resident(t.title))
                   ? reused_prefix_marker(expect_send(t, text, n, spec, opening))
                   : "");
        say("STEP %d %s", step_, op_.c_str());
        const TurnExpectation e = expect_send(t, text, n, spec, opening);
        std::string why;
        const bool refuse = refusal_expected(e, why);
        ChatSession& r = reg();
        int64_t id = 0;
        std::string err;
        bool stop_set = false;
        if (t.is_new) {
            try {
                ++api_calls_;
                id = r.create(t.title, open);
            } catch (const Error& ex) {
                err = std::string("error: ") + ex.what();
            }
        } else {
            id = world_.conversation(t.title)->id;
        }
        if (err.empty())
            err = api_turn([&](const TurnCallbacks& cb) { return r.send(id, text, turn_options(n), cb); }, d, stop, n, stop_set);
        const DbView db = read_db(db_);
        if (!err.empty() && err != "cancelled") {
            if (!refuse) fail("send failed: " + err);
            const Outcome out = judge_turn(e, db, {Outcome::Unchanged, Outcome::Missing, Outcome::Unanswered}, "refused (" + why + "): " + err);
            if (out == Outcome::Unanswered && !resync_) regression("refused-leaves-message", "session API: " + err);
        } else if (err == "cancelled") {
            if (!stop_set) fail("the turn was cancelled without a stop");
            judge_turn(e, db, {Outcome::Unchanged, Outcome::Missing}, "cancelled before the first token");
        } else {
            if (refuse) fail("answered a turn that should be refused (" + why + ")");
            std::set<Outcome> ok = {Outcome::Answered};
            if (stop_set) ok.insert(Outcome::Partial);
            judge_turn(e, db, ok, "session API send");
        }
        if (ConversationModel* c = world_.conversation(t.title)) {
            const DbConversation* got = db.conversation(t.title);
            if (t.is_new && !spec.empty() && got && got->cache_spec != canonical_spec(spec))
                fail("new conversation has strategy " + got->cache_spec + ", asked " + canonical_spec(spec));
            if (got) c->spec = got->cache_spec;
        }
    }

    const ConversationModel* pick_conversation(Dice& d) {
        if (world_.conversations.empty()) return nullptr;
        return &d.pick(world_.conversations);
    }

    void api_regenerate(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c) return api_send(d, false);
        const bool stop = d.chance(0.2);
        const int n = d.range(1, 16);
        op_ = std::string("api-regenerate") + (stop ? "-stop " : " ") + show(c->title) + reopen_marker(c->title, c->spec, true);
        say("STEP %d %s", step_, op_.c_str());
        TurnExpectation e;
        e.title = c->title;
        e.before = c->messages;
        e.base = c->messages;
        if (!e.base.empty() && e.base.back().role == "assistant") e.base.pop_back();
        e.spec = c->spec;
        e.n = n;
        const bool refuse = e.base.empty() || e.base.back().role != "user" || ref_->answer(e.base, n, traits_of(e.spec).capacity).refused;
        bool stop_set = false;
        const int64_t id = c->id;
        ChatSession& r = reg();
        const std::string err = api_turn([&](const TurnCallbacks& cb) { return r.regenerate(id, turn_options(n), cb); }, d, stop, n, stop_set);
        const DbView db = read_db(db_);
        if (!err.empty() && err != "cancelled") {
            if (!refuse) fail("regenerate failed: " + err);
            const Outcome out = judge_turn(e, db, {Outcome::Unchanged, Outcome::Unanswered}, "refused regenerate: " + err);
            if (out == Outcome::Unanswered && e.before != e.base && !resync_)
                regression("refused-leaves-message", "regenerate was refused after it deleted the answer it was to replace (that "
                                                "answer is lost): " + err);
        } else if (err == "cancelled") {
            judge_turn(e, db, {Outcome::Unchanged}, "regenerate cancelled before the first token");
        } else {
            if (refuse) fail("regenerated what should be refused");
            std::set<Outcome> ok = {Outcome::Answered};
            if (stop_set) ok.insert(Outcome::Partial);
            judge_turn(e, db, ok, "session API regenerate");
        }
    }

    void api_edit(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c || !c->has_user_message()) return api_send(d, false);
        std::vector<size_t> users;
        for (size_t i = 0; i < c->messages.size(); ++i)
            if (c->messages[i].role == "user") users.push_back(i);
        const size_t ordinal = d.pick(users);
        const std::string text = d.chance(0.05) ? std::string("  ") : words(d, d.range(1, 10));
        const bool stop = d.chance(0.2);
        const int n = d.range(1, 16);
        op_ = std::string("api-edit") + (stop ? "-stop " : " ") + show(c->title) + " message " + std::to_string(ordinal) +
              reopen_marker(c->title, c->spec, true);
        say("STEP %d %s", step_, op_.c_str());
        TurnExpectation e;
        e.title = c->title;
        e.before = c->messages;
        e.base.assign(c->messages.begin(), c->messages.begin() + static_cast<long>(ordinal));
        e.base.push_back({"user", text, {}});
        e.spec = c->spec;
        e.n = n;
        const bool refuse = blank(text) || ref_->answer(e.base, n, traits_of(e.spec).capacity).refused;
        bool stop_set = false;
        const int64_t id = c->id;
        ChatSession& r = reg();
        const std::string err =
            api_turn([&](const TurnCallbacks& cb) { return r.edit(id, ordinal, text, turn_options(n), cb); }, d, stop, n, stop_set);
        const DbView db = read_db(db_);
        if (!err.empty() && err != "cancelled") {
            if (!refuse) {
                const ReferenceAnswer ref = ref_->answer(e.base, n, traits_of(e.spec).capacity);
                fail("edit failed: " + err + " (the edited transcript renders as " + std::to_string(ref.prompt_tokens) +
                     " tokens; the strategy is " + e.spec + ")");
            }
            const Outcome out = judge_turn(e, db, {Outcome::Unchanged, Outcome::Unanswered}, "refused edit: " + err);
            if (out == Outcome::Unanswered && !resync_) regression("refused-leaves-message", "session API edit: " + err);
        } else if (err == "cancelled") {
            judge_turn(e, db, {Outcome::Unchanged}, "edit cancelled before the first token");
        } else {
            if (refuse) fail("edited what should be refused");
            std::set<Outcome> ok = {Outcome::Answered};
            if (stop_set) ok.insert(Outcome::Partial);
            judge_turn(e, db, ok, "session API edit");
        }
    }

    void api_switch(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c) return api_send(d, false);
        const std::string spec = any_spec(d, spill_);
        const std::string title = c->title, old = c->spec;
        op_ = "api-switch " + show(title) + " " + old + " -> " + spec + reopen_marker(title, spec, true);
        say("STEP %d %s", step_, op_.c_str());
        ChatSession& r = reg();
        std::string err;
        ++api_calls_;
        try {
            r.switch_strategy(c->id, spec);
        } catch (const Error& e) {
            err = e.what();
        }
        const DbView db = read_db(db_);
        const DbConversation* got = db.conversation(title);
        if (!got) return fail("conversation vanished in a switch");
        if (err.empty() && got->cache_spec != canonical_spec(spec))
            fail("switched, but the stored strategy is " + got->cache_spec + ", expected " + canonical_spec(spec));
        if (!err.empty()) {
            note("switch refused: " + err);
            if (got->cache_spec != old) fail("a refused switch changed the strategy to " + got->cache_spec + " (" + err + ")");
        }
        world_.conversation(title)->spec = got->cache_spec;
        TurnExpectation e;
        e.title = title;
        e.before = world_.conversation(title)->messages;
        judge_turn(e, db, {Outcome::Unchanged}, "switch");
    }

    void api_restart() {
        op_ = "api-restart";
        say("STEP %d %s", step_, op_.c_str());
        reg_.reset();
        store_.reset();
        snapshot_loaded_.clear();
        reg();
    }

    void api_close(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c) return;
        op_ = "api-close " + show(c->title);
        say("STEP %d %s", step_, op_.c_str());
        ++api_calls_;
        try {
            reg().close(c->id);
            snapshot_loaded_.erase(c->title);
        } catch (const Error& e) {
            fail(std::string("close: ") + e.what());
        }
    }

    void api_rename(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c) return;
        const std::string to = "r" + std::to_string(next_title_++);
        op_ = "api-rename " + show(c->title) + " -> " + to;
        say("STEP %d %s", step_, op_.c_str());
        const std::string from = c->title;
        ++api_calls_;
        try {
            reg().rename(c->id, to);
        } catch (const Error& e) {
            return fail(std::string("rename: ") + e.what());
        }
        world_.conversation(from)->title = to;
        high_water_[to] = high_water_[from];
        if (snapshot_loaded_.erase(from)) snapshot_loaded_.insert(to);
    }

    void api_remove(Dice& d) {
        const ConversationModel* c = pick_conversation(d);
        if (!c) return;
        op_ = "api-remove " + show(c->title);
        say("STEP %d %s", step_, op_.c_str());
        const std::string title = c->title;
        ++api_calls_;
        try {
            reg().remove(c->id);
        } catch (const Error& e) {
            return fail(std::string("remove: ") + e.what());
        }
        world_.remove_conversation(title);
        snapshot_loaded_.erase(title);
    }

    void api_prefix_save(Dice& d) {
        const std::string name = "p" + std::to_string(next_prefix_++);
        const std::string text = words(d, d.range(1, 30));
        const std::string spec = d.chance(0.3) ? any_spec(d, spill_) : "";
        op_ = "api-prefix-save " + name + (spec.empty() ? "" : " " + spec);
        say("STEP %d %s", step_, op_.c_str());
        std::vector<std::string> notices;
        ++api_calls_;
        try {
            reg().prefixes().save(name, text, spec, notices);
        } catch (const Error& e) {
            note(std::string("prefix save refused: ") + e.what());
        }
        const DbView db = read_db(db_);
        const DbPrefix* got = db.prefix(name);
        if (got && (got->messages.size() != 1 || got->messages[0].content != text || got->messages[0].role != "system"))
            fail("prefix " + name + " holds other messages than it was saved from");
        adopt_prefixes(db);
    }

    // ---- damage ----
    void corrupt_snapshot(Dice& d) {
        std::vector<std::string> files;
        std::error_code ec;
        for (const auto& f : fs::directory_iterator(data_ + "/snapshots", ec))
            if (f.is_regular_file() && f.path().filename().string()[0] != '.') files.push_back(f.path().string());
        std::sort(files.begin(), files.end());
        if (files.empty()) return cli_send(d, Signal::None);
        const std::string path = d.pick(files);
        const int how = d.range(0, 3);
        op_ = "corrupt " + fs::path(path).filename().string() + (how == 0 ? " flip" : how == 1 ? " cut" : how == 2 ? " empty" : " grow");
        say("STEP %d %s", step_, op_.c_str());
        // Damaged the way the product's own writes could leave it for a reader: a new file put
        // in its place (snapshots are replaced by rename, never rewritten in place, and a reader
        // keeps mapping the file it opened).
        std::string bytes;
        {
            std::ifstream in(path, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), {});
        }
        if (how == 0 && !bytes.empty()) {
            const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(d.engine());
            bytes[at] = static_cast<char>(bytes[at] ^ (1 << d.range(0, 7)));
        } else if (how == 1) {
            bytes.resize(bytes.size() / 2);
        } else if (how == 2) {
            bytes.clear();
        } else {
            bytes += "garbage after the end";
        }
        const std::string damaged = path + ".damaged";
        std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
        fs::rename(damaged, path, ec);
    }

    bool resident(const std::string& title) const {
        const ConversationModel* c = world_.conversation(title);
        return c && reg_ && reg_->telemetry(c->id).has_value();
    }

    // The strategy of the conversation's snapshot ("" when it has none or it cannot be read).
    std::string snapshot_strategy(const std::string& title) {
        const DbView db = read_db(db_);
        const DbConversation* c = db.conversation(title);
        if (!c || c->snapshot.empty()) return "";
        try {
            return load_cache_snapshot(data_ + "/snapshots/" + c->snapshot, *model_, *backend_).cache->spec_text();
        } catch (const std::exception&) {
            return "";
        }
    }

    // " [reopens ...]" when the step takes the conversation's cache from its snapshot and converts
    // it to another strategy (where switch-reopened-crash was); a CLI run always reopens, the registry when the
    // cache is not in memory.
    std::string reopen_marker(const std::string& title, const std::string& to_spec, bool via_api) {
        const ConversationModel* c = world_.conversation(title);
        std::string to = to_spec;
        try {
            to = canonical_spec(to_spec);
        } catch (const std::exception&) {
        }
        if (via_api && c && reg_ && reg_->telemetry(c->id).has_value()) {
            // In memory: converted when switched, or when another program switched it; where the
            // crash was, when that cache was read from a snapshot.
            if (!snapshot_loaded_.count(title)) return "";
            std::string in_memory;
            for (const ConversationSummary& s : reg_->list())
                if (s.id == c->id) in_memory = s.cache_spec;
            if (in_memory == to && in_memory == c->spec) return "";
            return " [reopens its snapshot of " + in_memory + " as " + to + " (read from the snapshot earlier)]";
        }
        const std::string was = snapshot_strategy(title);
        if (via_api && c) {
            // The session reads it from its snapshot now (converted to the stored strategy), then
            // converts it again for a switch.
            if (was.empty()) {
                snapshot_loaded_.erase(title);
                return "";
            }
            snapshot_loaded_.insert(title);
            if (was == c->spec && to == c->spec) return "";
            return " [reopens its snapshot of " + was + " as " + (was != c->spec ? c->spec : to) + "]";
        }
        if (was.empty() || was == to) return "";
        return " [reopens its snapshot of " + was + " as " + to + "]";
    }

    // The same for a new conversation started from a prefix whose saved cache has another strategy.
    std::string prefix_marker(const std::string& name, const std::string& to) {
        const DbView db = read_db(db_);
        const DbPrefix* p = db.prefix(name);
        if (!p || p->snapshot.empty()) return "";
        std::string was;
        try {
            was = load_cache_snapshot(data_ + "/snapshots/" + p->snapshot, *model_, *backend_).cache->spec_text();
        } catch (const std::exception&) {
            return "";
        }
        if (was == to) return "";
        return " [reopens its snapshot of " + was + " as " + to + " (the prefix's)]";
    }

    // The same when the prompt starts with a saved prefix's tokens: a conversation whose cache
    // holds nothing it can use (new, or its snapshot unusable or not matching) reuses the
    // prefix's cache without being asked.
    std::string reused_prefix_marker(const TurnExpectation& e) {
        const std::vector<int32_t> prompt = ref_->prompt(e.base);
        const DbView db = read_db(db_);
        for (const DbPrefix& p : db.prefixes)
            if (!p.tokens.empty() && is_prefix_of(p.tokens, prompt)) {
                const std::string m = prefix_marker(p.name, e.spec);
                if (!m.empty()) return m;
            }
        return "";
    }

    void report_crash() {
        if (op_.find("[reopens its snapshot") != std::string::npos) regression("switch-reopened-crash", crash_);
        else fail(crash_);
    }

    void killed() {
        killed_at_ = fs::file_time_type::clock::now();
        killed_this_step_ = true;
    }
    void store_opened() {
        store_opened_at_ = fs::file_time_type::clock::now();
        store_opened_step_ = step_;
    }

    // ---- after every step ----
    void check_after_step() {
        const DbView db = read_db(db_);
        if (!db.exists) {
            if (!world_.conversations.empty()) fail("the database is gone");
            return;
        }
        if (!db.error.empty()) {
            std::string own = "no session open";
            if (store_) {
                try {
                    own = "the session's connection says integrity_check " + store_->pragma("integrity_check");
                } catch (const std::exception& e) {
                    own = std::string("the session's connection fails too: ") + e.what();
                }
            }
            const DbView again = read_db(db_);
            ProcessOptions p;
            p.args = {o_.cli, "conversations", "--db", db_};
            const ProcessResult other = run_process(p);
            const std::string what = "reading the database: " + db.error + " (" + own + "; read again: " +
                                     (again.error.empty() ? "fine" : again.error) + "; kvchat-cli conversations: " +
                                     other.status() + " " + show(other.err, 300) + ")";
            fail(what);
        }
        if (db.integrity != "ok") fail("integrity_check: " + db.integrity);
        // Conversations: the same titles, strategies and messages (unless the step failed already:
        // the model then takes what the database holds).
        for (const ConversationModel& c : resync_ ? std::vector<ConversationModel>{} : world_.conversations) {
            const DbConversation* got = db.conversation(c.title);
            if (!got) {
                fail("conversation " + show(c.title) + " is missing");
                continue;
            }
            std::vector<Message> msgs;
            for (const DbMessage& m : got->messages) msgs.push_back(message_of(m));
            if (msgs != c.messages)
                fail("conversation " + show(c.title) + " holds " + std::to_string(msgs.size()) + " messages that differ from the model's " +
                     std::to_string(c.messages.size()));
            if (got->cache_spec != c.spec) fail("conversation " + show(c.title) + " has strategy " + got->cache_spec + ", model " + c.spec);
        }
        for (const DbConversation& c : db.conversations)
            if (!resync_ && !world_.conversation(c.title)) fail("unexpected conversation " + show(c.title));
        // Prefixes.
        if (!resync_ && db.prefixes.size() != world_.prefixes.size()) fail("prefix count differs");
        for (const PrefixModel& p : world_.prefixes)
            if (!db.prefix(p.name)) fail("prefix " + p.name + " is missing");
        // Files: nothing half-written, no snapshot without its row, no row without its snapshot.
        if (!db.error.empty()) return;
        std::error_code ec;
        for (const std::string& f : leftover_files(data_) + leftover_files(tmp_) + leftover_files(spill_)) {
            // A spill file lives from its mkstemp to its unlink a moment later (the session may be
            // making one on another thread now): only one still there after a pause was left.
            if (f.find("kvchat-spill-") != std::string::npos) {
                ::usleep(200000);
                if (!fs::exists(f, ec)) continue;
            }
            const auto written = fs::last_write_time(f, ec);
            if (ec) continue;
            if (written > killed_at_ + std::chrono::milliseconds(500))
                fail("left behind by a program that was not killed: " + f);
            else if (written + std::chrono::seconds(62) < store_opened_at_)
                fail("left by a killed program, over a minute old (" +
                     std::to_string(std::chrono::duration<double>(store_opened_at_ - written).count()) +
                     " s when the store was opened), and still there: " + f);
        }
        std::set<std::string> named, rows;
        // Snapshot files are named after their database: KEY.conversation-ID.kvcache.
        const std::string key = Store::file_key(fs::path(db_).filename().string()) + ".";
        for (const DbConversation& c : db.conversations) {
            rows.insert(key + Store::legacy_conversation_snapshot_name(c.id));
            if (!c.snapshot.empty()) named.insert(c.snapshot);
        }
        for (const DbPrefix& p : db.prefixes) {
            rows.insert(key + Store::legacy_prefix_snapshot_name(p.id));
            if (!p.snapshot.empty()) named.insert(p.snapshot);
        }
        for (const auto& f : fs::directory_iterator(data_ + "/snapshots", ec)) {
            const std::string name = f.path().filename().string();
            if (named.count(name) || name.find(".tmp-") != std::string::npos) continue;
            // A snapshot written for a row that was not told of it (killed in between, or no room
            // to record it) stays until the row's next save replaces it (reported: a prefix's may
            // never be saved again).
            if (rows.count(name) && killed_this_step_) orphans_allowed_[name] = std::numeric_limits<int>::max();
            // One named for an id above the highest handed out (its row's insert was rolled back
            // when its program was killed) is left for the row that takes that id: the store
            // cannot tell it from one another program is creating now.
            const auto id_of = [&](const char* stem) -> int64_t {
                const std::string full = key + stem;
                if (name.rfind(full, 0) != 0) return -1;
                return std::atoll(name.c_str() + full.size());
            };
            if ((id_of("conversation-") > db.last_conversation_id || id_of("prefix-") > db.last_prefix_id) && killed_this_step_)
                orphans_allowed_[name] = std::numeric_limits<int>::max();
            auto allowed = orphans_allowed_.find(name);
            if (allowed == orphans_allowed_.end() && killed_this_step_) allowed = orphans_allowed_.emplace(name, step_).first;
            if (allowed == orphans_allowed_.end())
                fail("snapshot " + name + " belongs to no conversation or prefix");
            else if (store_opened_step_ > allowed->second)
                fail("snapshot " + name + " of a deleted row, left by a killed program, is still there after the store was opened");
        }
        for (const std::string& n : named)
            if (!fs::exists(data_ + "/snapshots/" + n, ec)) fail("snapshot " + n + " named by a row is missing");
        killed_this_step_ = false;
        if (resync_) {
            world_ = World::from_db(db);
            resync_ = false;
        }
    }

    const RunOptions& o_;
    uint64_t seed_;
    std::string dir_, data_, tmp_, spill_, db_, model_path_;
    FILE* log_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Reference> ref_;
    std::unique_ptr<Store> store_;
    std::unique_ptr<ChatSession> reg_;
    World world_;
    int step_ = 0;
    std::string op_;
    std::string crash_;
    bool resync_ = false;
    std::set<std::string> snapshot_loaded_;  // the session's caches that were read from a snapshot
    // What a killed program may leave until the next store opens: its temporary files (written
    // before it was killed, and removed once a minute old) and snapshots whose rows it deleted.
    fs::file_time_type killed_at_ = fs::file_time_type::min();
    fs::file_time_type store_opened_at_ = fs::file_time_type::min();
    int store_opened_step_ = 0;
    std::map<std::string, int> orphans_allowed_;
    bool killed_this_step_ = false;  // snapshot name -> the step whose kill left it
    int failures_ = 0, cli_runs_ = 0, api_calls_ = 0;
    int stop_at_ = 0;  // (for -vv)
    // The most tokens each conversation (by title) may have had in its cache (see judge_turn).
    std::map<std::string, int64_t> high_water_;
    int next_title_ = 0, next_prefix_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Each seed runs in a child process, so a crash or a hang inside the session API is reported
// with its seed and step, and the next seed goes on.
struct SeedReport {
    int steps = 0;
    int failures = 0;
    std::vector<std::string> failure_lines;
    bool crashed = false;  // the driver's process died (steps: the step it died in)
};

// The session API driver's crash: its stack goes to the log (the parent prints it with the
// step), then the signal takes its course.
int g_log_fd = -1;
extern "C" void on_crash(int sig) {
    void* frames[48];
    const int n = ::backtrace(frames, 48);
    static const char head[] = "CRASH stack:\n";
    [[maybe_unused]] ssize_t w = ::write(g_log_fd, head, sizeof head - 1);
    ::backtrace_symbols_fd(frames, n, g_log_fd);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

SeedReport run_seed_in_child(const RunOptions& o, uint64_t seed, const std::string& dir, int first_step) {
    int fds[2];
    if (::pipe(fds) != 0) {
        std::perror("pipe");
        std::exit(2);
    }
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        FILE* log = ::fdopen(fds[1], "w");
        g_log_fd = fds[1];
        for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, on_crash);
        int code = 0;
        try {
            SeedRun run(o, seed, dir, log);
            run.run(first_step, o.steps);
            code = run.failures() > 0 ? 1 : 0;
        } catch (const std::exception& e) {
            std::fprintf(log, "FAIL seed=%llu: the soak stopped: %s\n", (unsigned long long)seed, e.what());
            code = 1;
        }
        std::fflush(log);
        ::_exit(code);
    }
    ::close(fds[1]);
    SeedReport rep;
    std::string buf, last_step = "(setup)";
    bool dead = false;
    auto last_output = std::chrono::steady_clock::now();
    std::vector<std::string> stack;
    auto handle = [&](const std::string& line) {
        if (line.rfind("CRASH stack:", 0) == 0 || !stack.empty()) {
            stack.push_back(line);
            return;
        }
        if (line.rfind("STEP ", 0) == 0) {
            last_step = line;
            if (o.verbose) std::printf("[seed %llu] %s\n", (unsigned long long)seed, line.c_str());
            return;
        }
        std::printf("[seed %llu] %s\n", (unsigned long long)seed, line.c_str());
        if (line.rfind("FAIL", 0) == 0) {
            ++rep.failures;
            rep.failure_lines.push_back(line);
        } else if (line.rfind("RESULT steps=", 0) == 0) {
            rep.steps = std::atoi(line.c_str() + 13);
        }
    };
    while (!dead) {
        pollfd p{fds[0], POLLIN, 0};
        const int n = ::poll(&p, 1, 1000);
        if (n > 0) {
            char chunk[4096];
            const ssize_t got = ::read(fds[0], chunk, sizeof chunk);
            if (got <= 0) break;
            buf.append(chunk, static_cast<size_t>(got));
            size_t nl;
            while ((nl = buf.find('\n')) != std::string::npos) {
                handle(buf.substr(0, nl));
                buf.erase(0, nl + 1);
            }
            last_output = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - last_output > std::chrono::minutes(5)) {
            // Nothing for five minutes: a hang (every CLI run has its own 90 s limit).
            std::printf("[seed %llu] FAIL seed=%llu: no progress for 5 minutes after %s (a hang in the session API)\n",
                        (unsigned long long)seed, (unsigned long long)seed, last_step.c_str());
            ++rep.failures;
            rep.failure_lines.push_back("hang after " + last_step);
            ::kill(pid, SIGKILL);
            dead = true;
        }
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const auto at = last_step.find(' ');
    const int last = std::atoi(last_step.c_str() + (at == std::string::npos ? 0 : at + 1));
    rep.steps = std::max(rep.steps, last);
    if (WIFEXITED(status) && WEXITSTATUS(status) > 1 && !dead) {
        const std::string what = "the soak process ended with status " + std::to_string(WEXITSTATUS(status)) + " after " + last_step;
        std::printf("[seed %llu] FAIL seed=%llu: %s\n", (unsigned long long)seed, (unsigned long long)seed, what.c_str());
        ++rep.failures;
        rep.failure_lines.push_back(what);
    }
    if (WIFSIGNALED(status) && !dead) {
        const int sig = WTERMSIG(status);
        const std::string what = "the soak process (session API driver) died of signal " + std::to_string(sig) + " (" +
                                 strsignal(sig) + ") during " + last_step;
        // The crash of a switch on a reopened snapshot was a bug of its own: the step says so.
        const std::string label = last_step.find("[reopens its snapshot") != std::string::npos
                                      ? std::string(" (regression of switch-reopened-crash? ") + fixed_text("switch-reopened-crash") + ")"
                                      : "";
        std::printf("[seed %llu] FAIL seed=%llu: %s%s\n", (unsigned long long)seed, (unsigned long long)seed, what.c_str(),
                    label.c_str());
        for (const std::string& l : stack) std::printf("[seed %llu]   %s\n", (unsigned long long)seed, l.c_str());
        ++rep.failures;
        rep.failure_lines.push_back(what + label);
        rep.crashed = rep.steps > 0;
    }
    std::fflush(stdout);
    return rep;
}

int usage() {
    std::fprintf(stderr,
                 "usage: kvchat_soak [--seed S] [--seeds N] [--steps K] [--minutes M] [--dir PATH] [--keep]\n"
                 "                   [--cli PATH] [-v|-vv]\n"
                 "  --seed S       first seed (default 1); seeds S, S+1, ... are run\n"
                 "  --seeds N      how many seeds (default 1)\n"
                 "  --steps K      steps per seed (default 300)\n"
                 "  --minutes M    run seeds until M minutes have passed (--seeds is then a minimum)\n"
                 "  --dir PATH     where the seeds' data folders go (default: a new folder in $TMPDIR)\n"
                 "  --keep         keep the data folders (default: removed after a seed without failures)\n"
                 );
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    RunOptions o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "kvchat_soak: %s needs a value\n", a.c_str());
                std::exit(usage());
            }
            return argv[++i];
        };
        if (a == "--seed") o.seed = std::stoull(value());
        else if (a == "--seeds") o.seeds = std::stoi(value());
        else if (a == "--steps") o.steps = std::stoi(value());
        else if (a == "--minutes") o.minutes = std::stod(value());
        else if (a == "--dir") o.dir = value();
        else if (a == "--cli") o.cli = value();
        else if (a == "--keep") o.keep = true;
        else if (a == "-v") o.verbose = 1;
        else if (a == "-vv") o.verbose = 2;
        else return usage();
    }
    const bool made_dir = o.dir.empty() && !o.keep;
    if (o.dir.empty()) {
        const char* tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/kvchat-soak-XXXXXX";
        if (!::mkdtemp(templ.data())) {
            std::perror("mkdtemp");
            return 2;
        }
        o.dir = templ;
    }
    // SIGPIPE from a child's pipe must not end the soak.
    ::signal(SIGPIPE, SIG_IGN);
    const auto start = std::chrono::steady_clock::now();
    const auto minutes_done = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60.0;
    };
    int seeds_run = 0, steps = 0, failures = 0, failed_seeds = 0;
    std::vector<std::string> failure_lines;
    for (uint64_t seed = o.seed;; ++seed) {
        if (seeds_run >= o.seeds && (o.minutes <= 0 || minutes_done() >= o.minutes)) break;
        const std::string dir = o.dir + "/seed-" + std::to_string(seed);
        // A crash of the session API driver ends its process; the seed goes on from the next step
        // in a new one, over the same data (a restart after a crash).
        SeedReport r;
        for (int first = 1, restarts = 0; first <= o.steps && restarts < 1000; ++restarts) {
            const SeedReport part = run_seed_in_child(o, seed, dir, first);
            r.failures += part.failures;
            for (const std::string& l : part.failure_lines) r.failure_lines.push_back(l);
            r.steps = part.steps;
            if (!part.crashed) break;
            first = part.steps + 1;
        }
        ++seeds_run;
        steps += r.steps;
        failures += r.failures;
        for (const std::string& l : r.failure_lines) failure_lines.push_back(l);
        if (r.failures > 0) ++failed_seeds;
        if (!o.keep && r.failures == 0) {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    }
    if (made_dir) {
        std::error_code ec;
        fs::remove(o.dir, ec);  // only when empty: every seed passed
    }
    std::printf("\nkvchat_soak: %d seeds (from %llu), %d steps in %.1f minutes; %d failures in %d seeds; data in %s\n",
                seeds_run, (unsigned long long)o.seed, steps, minutes_done(), failures, failed_seeds, o.dir.c_str());
    for (const std::string& l : failure_lines) std::printf("  %s\n", l.c_str());
    if (failures > 0) return 1;
    return 0;
}
