// kvchat-cli chat / conversations / prefix / chat-bench: persistent conversations from the
// terminal. The store is opened before the model is loaded, so a bad --db fails fast.
#include "app/cli_chat.h"

#include "engine/chat/chat_settings.h"
#include "engine/chat/conversation_cache.h"
#include "engine/chat/chat_session.h"
#include "engine/common/quoted.h"
#include "engine/common/regular_file.h"
#include "engine/common/utf8.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"
#include "engine/store/store.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>

namespace kvchat::cli {

namespace {

using nlohmann::json;

// Ctrl-C, SIGTERM and SIGHUP stop the answer being generated; the partial answer is kept.
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
std::atomic<int> g_output_errno{0};
extern "C" void on_stop_signal(int sig) {
    g_signal.store(sig);
    g_stop.store(true);
}

void catch_interrupts() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// SIGTERM and SIGHUP end the program; Ctrl-C in the interactive session stops only the answer.
bool terminating() {
    const int sig = g_signal.load();
    return sig == SIGTERM || sig == SIGHUP;
}

}  // namespace

const std::atomic<bool>& stop_on_interrupt() {
    catch_interrupts();
    return g_stop;
}

int stop_signal() { return g_signal.load(); }

int stopped_exit_status() {
    const int sig = g_signal.load();
    return sig ? 128 + sig : kInterruptedExit;
}

void write_answer_piece(std::string_view piece) {
    if (g_output_errno.load()) return;
    errno = 0;
    const bool ok = std::fwrite(piece.data(), 1, piece.size(), stdout) == piece.size() && std::fflush(stdout) == 0;
    if (!ok) {
        g_output_errno.store(errno ? errno : EIO);
        g_stop.store(true);
    }
}

int output_error() { return g_output_errno.load(); }

namespace {

// The error of an answer cut short because standard output failed.
Error output_failed(const std::string& kept) {
    return Error("cannot write the answer to standard output (" + std::string(std::strerror(output_error())) +
                 "); it was stopped there" + kept);
}

void note(const std::string& s) {
    std::fprintf(stderr, "kvchat-cli: note: %s\n", escape_controls(s, "\n\t", false).c_str());
}

}  // namespace

std::string db_path(const Options& o) { return o.str("--db", Store::default_path()); }

// The database of a command that only reads or changes what is saved: a mistyped --db must not
// create folders and an empty database.
std::string existing_db_path(const Options& o) {
    const std::string path = db_path(o);
    bool exists = false;
    try {
        exists = regular_file_exists(path);
    } catch (const Error& e) {
        throw Error(std::string("database ") + e.what());
    }
    if (!exists)
        throw Error("database " + in_quotes(path) + " does not exist (nothing has been saved there yet; "
                    "kvchat-cli chat creates it)");
    return path;
}

namespace {

// The settings' turn options (the fallback rule included) under the conversation's own settings,
// with the command line's answer length, sampling and policy, which win over both.
TurnOptions turn_options(const ChatSettings& settings, const ConversationSettings& own, const Options& o) {
    TurnOptions t = settings.turn_options(o.str("--cache"), own);
    // A chat samples as the window does (the settings' chat sampling, 0.7/40/0.9/0.05/1.1 unless changed),
    // not as generate's text completion.
    t.generation.max_new_tokens = static_cast<int>(o.integer("-n", t.generation.max_new_tokens, 1, 1 << 20));
    t.generation.sampling = sampling_options(o, t.generation.sampling);
    if (o.has("--policy")) t.policy = parse_context_policy(o.str("--policy"));
    return t;
}

// The figures as the command prints them: a figure the turn has none of prints as 0 (a turn
// that answered always has its time to first token; a decode speed needs two tokens).
double ttft_ms(const TurnResult& r) { return r.figures.ttft_ms.value_or(0.0); }
double decode_tok_s(const TurnResult& r) { return r.figures.tokens_per_second.value_or(0.0); }
std::string_view stop_reason_of(const TurnResult& r) {
    return stop_reason_name(r.figures.stop_reason.value_or(StopReason::MaxNewTokens));
}

json turn_json(const TurnResult& r, const std::string& conversation) {
    const AnswerFigures& f = r.figures;
    json j;
    j["conversation"] = conversation;
    j["text"] = r.text;
    j["tokens"] = f.token_ids;
    j["prompt_tokens"] = f.prompt_tokens;
    j["prefill_tokens"] = f.computed_tokens;
    j["cached_tokens"] = f.cached_tokens;
    j["ttft_ms"] = ttft_ms(r);
    j["decode_tok_s"] = decode_tok_s(r);
    j["kv_bytes"] = r.kv_bytes;
    j["stop_reason"] = stop_reason_of(r);
    // The reused tokens at the model's measured batch prefill speed (null: not measurable).
    j["prefill_saved_ms"] = f.prefill_saved_ms ? json(*f.prefill_saved_ms) : json(nullptr);
    j["notices"] = r.notices;
    return j;
}

void print_turn_footer(const TurnResult& r) {
    std::fprintf(stderr, "[%lld tokens prefilled, %lld reused, ttft %.1f ms, decode %.1f tok/s, cache %.1f MiB, stop: %s]\n",
                 static_cast<long long>(r.figures.computed_tokens), static_cast<long long>(r.figures.cached_tokens),
                 ttft_ms(r), decode_tok_s(r), static_cast<double>(r.kv_bytes) / (1024.0 * 1024.0),
                 std::string(stop_reason_of(r)).c_str());
}

void print_piece(std::string_view piece) { write_answer_piece(piece); }

// The conversation `chat` created, removed again when the command ends without having stored a
// message in it (a blank or refused first message, Ctrl-C before the first token, an interactive
// session left at once): a conversation nobody wrote to is not kept.
struct CreatedConversation {
    ChatSession* reg = nullptr;
    int64_t id = 0;
    size_t opening = 0;  // messages it was created with (a system prompt, a prefix's messages)
    ~CreatedConversation() {
        if (!reg) return;
        try {
            if (reg->messages(id).size() <= opening) reg->remove(id);
        } catch (const std::exception&) {
            // An empty conversation left behind costs nothing but a line in the list.
        }
    }
};

int interactive(ChatSession& reg, const std::string& title, const TurnOptions& t) {
    std::fprintf(stderr,
                 "conversation '%s' (%s format). Type a message and press Enter; /regenerate replaces the last "
                 "answer, /quit or end of input leaves. Ctrl-C stops an answer.\n",
                 escape_controls(title).c_str(), std::string(chat_format_name(reg.chat_template().format())).c_str());
    std::string line;
    while (!terminating()) {
        std::fputs("> ", stderr);
        std::fflush(stderr);
        if (!std::getline(std::cin, line)) break;
        if (line == "/quit") break;
        if (is_blank_text(line)) continue;  // a blank line sends nothing
        if (terminating()) break;
        g_stop = false;
        if (terminating()) g_stop = true;  // SIGTERM or SIGHUP between the check and the reset
        try {
            const TurnResult r = line == "/regenerate" ? reg.regenerate(title, t, print_piece, &g_stop)
                                                       : reg.send(title, line, t, print_piece, &g_stop);
            std::printf("\n");
            for (const std::string& n : r.notices) note(n);
            print_turn_footer(r);
        } catch (const Cancelled&) {
            note("stopped before the answer began; the message was not sent");
        } catch (const Error& e) {
            std::fprintf(stderr, "kvchat-cli: error: %s\n", escape_controls(e.what(), "\n\t", false).c_str());
        }
        if (output_error()) throw output_failed(" and is kept in conversation " + in_quotes(title));
    }
    return terminating() ? stopped_exit_status() : 0;
}

// Loads the model with the window's settings as defaults (threads, device); options given on the
// command line win.
Loaded load_model_with_settings(const Options& o, const ChatSettings& settings) {
    Options with_settings = o;
    if (!o.has("--threads") && settings.threads > 0) with_settings.values["--threads"] = std::to_string(settings.threads);
    if (!o.has("--device")) with_settings.values["--device"] = settings.device;
    return load_model(with_settings);
}

}  // namespace

int cmd_chat(const Options& o) {
    if (!o.has("--conversation")) throw Error("chat needs --conversation NAME");
    const std::string title = o.str("--conversation");
    const bool regenerate = o.flag("--regenerate");
    if (regenerate && o.has("--message")) throw Error("give --message or --regenerate, not both");
    // Refused before anything is opened or created (the engine refuses it too).
    if (o.has("--message") && is_blank_text(o.str("--message")))
        throw Error("the message is empty (only white space): nothing was sent");
    Store store(db_path(o));
    // Settings the window writes are the defaults here too; options on the command line win.
    const ChatSettings settings = ChatSettings::load(store);
    for (const std::string& n : settings.notices) note(n);
    Loaded l = load_model_with_settings(o, settings);
    ChatSession reg(store, *l.model, *l.backend, static_cast<size_t>(settings.resident_caches));
    OpenOptions open;
    open.cache_spec = o.str("--cache");
    open.prefix = o.str("--prefix");
    open.system = o.str("--system");
    const bool existed = store.find_conversation(title).has_value();
    reg.open(title, open);
    // The conversation's own sampling, answer limit and context length (the window's chat panel sets them).
    const TurnOptions t = turn_options(settings, reg.conversation_settings(reg.id_of(title)), o);
    CreatedConversation created;
    if (!existed) {
        created.id = reg.id_of(title);
        created.opening = reg.messages(created.id).size();
        created.reg = &reg;
    }
    catch_interrupts();
    if (!o.has("--message") && !regenerate) return interactive(reg, title, t);

    const bool as_json = o.flag("--json");
    const auto on_text = as_json ? std::function<void(std::string_view)>() : print_piece;
    TurnResult r;
    try {
        r = regenerate ? reg.regenerate(title, t, on_text, &g_stop) : reg.send(title, o.str("--message"), t, on_text, &g_stop);
    } catch (const Cancelled&) {
        // Ctrl-C (or SIGTERM, SIGHUP) before the first token: the turn is taken back, the
        // conversation is as it was.
        note(existed ? "stopped before the answer began; the conversation is unchanged"
                     : "stopped before the answer began; the conversation was not created");
        return stopped_exit_status();
    }
    if (output_error()) throw output_failed(" and is kept in conversation " + in_quotes(title));
    if (as_json) {
        json j = turn_json(r, title);
        const SamplerConfig& sc = t.generation.sampling;
        j["sampling"] = {{"greedy", sc.greedy},       {"temperature", sc.temperature}, {"top_k", sc.top_k},
                         {"top_p", sc.top_p},         {"min_p", sc.min_p},             {"repeat_penalty", sc.repetition_penalty},
                         {"seed", sc.seed},           {"max_new_tokens", t.generation.max_new_tokens},
                         {"context_length", t.context_length > 0 ? json(t.context_length) : json(nullptr)}};
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::printf("\n");
        for (const std::string& n : r.notices) note(n);
        print_turn_footer(r);
    }
    return stop_signal() ? stopped_exit_status() : 0;
}

int cmd_branch(const Options& o) {
    if (!o.has("--conversation")) throw Error("branch needs --conversation NAME (the conversation to branch)");
    if (!o.has("--at")) throw Error("branch needs --at N (how many of the conversation's first messages it copies)");
    if (!o.has("--title")) throw Error("branch needs --title NEW (the new conversation's name)");
    const long long at = o.integer("--at", 0, std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max());
    const std::string name = o.str("--conversation");
    Store store(existing_db_path(o));
    const auto parent = store.find_conversation(name);
    if (!parent) throw Error("there is no conversation named " + in_quotes(name));
    const size_t count = store.list_messages(parent->id).size();
    if (at < 1 || static_cast<unsigned long long>(at) > count)
        throw Error("--at must be 1 to " + std::to_string(count) + " (conversation " + in_quotes(parent->title) +
                    " has " + std::to_string(count) + " message" + (count == 1 ? "" : "s") + "), got " +
                    std::to_string(at));
    const ChatSettings settings = ChatSettings::load(store);
    for (const std::string& n : settings.notices) note(n);
    Loaded l = load_model_with_settings(o, settings);
    ChatSession reg(store, *l.model, *l.backend, static_cast<size_t>(settings.resident_caches));
    const int64_t id = reg.branch(parent->id, static_cast<size_t>(at), o.str("--title"));
    for (const std::string& n : reg.take_notices()) note(n);
    const std::string title = store.find_conversation_by_id(id)->title;
    const auto telemetry = reg.telemetry(id);
    const int64_t tokens = telemetry ? telemetry->tokens : 0;
    if (o.flag("--json")) {
        json j;
        j["conversation"] = title;
        j["parent"] = parent->title;
        j["messages"] = at;
        j["cached_tokens"] = tokens;
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::printf("branch '%s' of '%s': %lld message%s, %lld tokens of cache reused\n", escape_controls(title).c_str(),
                    escape_controls(parent->title).c_str(), at, at == 1 ? "" : "s", static_cast<long long>(tokens));
    }
    return 0;
}

int cmd_conversations(const Options& o) {
    Store store(existing_db_path(o), Store::Access::ReadOnly);
    const auto list = store.list_conversation_overviews();
    if (o.flag("--json")) {
        json a = json::array();
        for (const ConversationOverview& v : list) {
            const ConversationRecord& c = v.conversation;
            a.push_back({{"title", c.title},
                         {"messages", v.message_count},
                         {"cache", c.cache_spec},
                         {"snapshot", !c.snapshot.empty()},
                         {"unanswered", v.last_unanswered},
                         {"updated_ms", c.updated_ms}});
        }
        std::printf("%s\n", a.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
        return 0;
    }
    if (list.empty()) std::fprintf(stderr, "no conversations in %s\n", store.path().c_str());
    for (const ConversationOverview& v : list) {
        const ConversationRecord& c = v.conversation;
        std::printf("%s\t%lld messages\t%s%s%s\n", tsv_field(c.title).c_str(), static_cast<long long>(v.message_count),
                    tsv_field(c.cache_spec).c_str(), c.snapshot.empty() ? "" : "\tcache saved",
                    v.last_unanswered ? "\tunanswered" : "");
    }
    return 0;
}

namespace {

// The first messages of a saved conversation for `prefix save|edit --conversation CONV
// [--messages N]`: all of them unless --messages says how many.
std::vector<ChatMessage> opening_of(const Store& store, const Options& o) {
    const std::string title = o.str("--conversation");
    const auto c = store.find_conversation(title);
    if (!c) throw Error("there is no conversation named '" + title + "'");
    const auto msgs = store.list_messages(c->id);
    if (msgs.empty()) throw Error("conversation '" + c->title + "' has no messages to save as a prefix");
    size_t n = msgs.size();
    if (o.has("--messages")) {
        const long long want = o.integer("--messages", 0, std::numeric_limits<long long>::min(),
                                         std::numeric_limits<long long>::max());
        if (want < 1)
            throw Error("--messages must be at least 1 (how many of the conversation's first messages the prefix "
                        "holds), got " + std::to_string(want));
        if (static_cast<unsigned long long>(want) > msgs.size())
            throw Error("conversation '" + c->title + "' has " + std::to_string(msgs.size()) + " message" +
                        (msgs.size() == 1 ? "" : "s") + "; --messages " + std::to_string(want) + " asks for more");
        n = static_cast<size_t>(want);
    }
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < n; ++i) out.push_back({msgs[i].role, msgs[i].content});
    return out;
}

}  // namespace

int cmd_prefix(const Options& o) {
    if (o.positional.empty())
        throw Error("prefix needs an action: save NAME (--text TEXT | --conversation NAME [--messages N]) | list | "
                    "rename OLD NEW | edit NAME (--text TEXT | --conversation NAME [--messages N]) | delete NAME");
    const std::string& action = o.positional[0];
    auto need_words = [&](size_t n, const char* usage) {
        if (o.positional.size() != n + 1) throw Error(std::string("usage: kvchat-cli prefix ") + usage);
    };
    // Listing only reads: it works on a database that cannot be written.
    Store store(action == "save" ? db_path(o) : existing_db_path(o),
                action == "list" ? Store::Access::ReadOnly : Store::Access::ReadWrite);
    if (action == "list") {
        need_words(0, "list");
        const auto list = store.list_prefixes();
        if (o.flag("--json")) {
            json a = json::array();
            for (const PrefixRecord& p : list) {
                json roles = json::array();
                for (const PrefixMessage& m : p.messages) roles.push_back(std::string(role_name(m.role)));
                a.push_back({{"name", p.name},
                             {"text", p.text},
                             {"messages", p.messages.size()},
                             {"roles", roles},
                             {"tokens", p.tokens.size()},
                             {"cache", p.cache_spec},
                             {"snapshot", !p.snapshot.empty()},
                             {"use_count", p.use_count}});
            }
            std::printf("%s\n", a.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
        } else {
            if (list.empty()) std::fprintf(stderr, "no saved prefixes in %s\n", store.path().c_str());
            for (const PrefixRecord& p : list)
                std::printf("%s\t%zu message%s\t%zu tokens\t%s\tused %lld times\n", tsv_field(p.name).c_str(),
                            p.messages.size(), p.messages.size() == 1 ? "" : "s", p.tokens.size(),
                            tsv_field(p.cache_spec).c_str(),
                            static_cast<long long>(p.use_count));
        }
        return 0;
    }
    if (action == "rename") {
        need_words(2, "rename OLD NEW");
        const auto p = store.find_prefix(o.positional[1]);
        if (!p) throw Error("there is no prefix named '" + o.positional[1] + "'");
        if (store.find_prefix(o.positional[2])) throw Error("a prefix named '" + o.positional[2] + "' already exists");
        store.rename_prefix(p->id, o.positional[2]);
        return 0;
    }
    if (action == "delete") {
        need_words(1, "delete NAME");
        const auto p = store.find_prefix(o.positional[1]);
        if (!p) throw Error("there is no prefix named '" + o.positional[1] + "'");
        ChatSession(store, nullptr, nullptr).remove_prefix(p->id);
        return 0;
    }
    if (action == "save" || action == "edit") {
        const std::string usage = action + " NAME (--text TEXT | --conversation NAME [--messages N])";
        need_words(1, usage.c_str());
        const bool from_text = o.has("--text"), from_conversation = o.has("--conversation");
        if (from_text == from_conversation)
            throw Error("prefix " + action + " needs --text TEXT or --conversation NAME (one of them)");
        if (o.has("--messages") && !from_conversation)
            throw Error("--messages counts the messages taken from --conversation NAME");
        if (from_text && is_blank_text(o.str("--text")))
            throw Error("the prefix text is empty (only white space): give --text the text to keep");
        // Everything the user can get wrong is checked before the model loads.
        const std::string& name = o.positional[1];
        if (action == "save" && store.find_prefix(name)) throw Error("a prefix named '" + name + "' already exists");
        if (action == "edit" && !store.find_prefix(name)) throw Error("there is no prefix named '" + name + "'");
        const std::vector<ChatMessage> opening = from_conversation ? opening_of(store, o) : std::vector<ChatMessage>{};
        Loaded l = load_model(o);
        const ChatTemplate tmpl = ChatTemplate::for_model(*l.model);
        PrefixLibrary lib(store, *l.model, *l.backend, tmpl);
        std::vector<std::string> notices;
        PrefixRecord p;
        if (action == "save")
            p = from_text ? lib.save(name, o.str("--text"), o.str("--cache"), notices)
                          : lib.save_messages(name, opening, o.str("--cache"), notices);
        else
            p = from_text ? lib.edit(name, o.str("--text"), notices) : lib.edit_messages(name, opening, notices);
        for (const std::string& n : notices) note(n);
        if (o.flag("--json"))
            std::printf("%s\n", json({{"name", p.name},
                                      {"messages", p.messages.size()},
                                      {"tokens", p.tokens.size()},
                                      {"snapshot", !p.snapshot.empty()}})
                                    .dump(-1, ' ', false, json::error_handler_t::replace)
                                    .c_str());
        else
            std::printf("saved prefix '%s' (%zu message%s, %zu tokens)\n", p.name.c_str(), p.messages.size(),
                        p.messages.size() == 1 ? "" : "s", p.tokens.size());
        return 0;
    }
    throw Error("unknown prefix action '" + action + "' (save, list, rename, edit, delete)");
}

namespace {

// Reference text for the benchmark's long prompts: repeated until it has the tokens asked for.
const char* kBenchParagraph =
    "The history of the printing press begins in the fifteenth century. Johannes Gutenberg combined movable "
    "metal type, oil-based inks and a wooden press adapted from those used for wine and olive oil. ";

std::string text_of_tokens(const Tokenizer& tok, int64_t tokens) {
    std::string text;
    while (static_cast<int64_t>(tok.encode(text, false).size()) < tokens) text += kBenchParagraph;
    return text;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_chat_bench(const Options& o) {
    // The figures as lines of text on standard output; with --json one object there instead (and
    // the lines on standard error, as progress).
    const bool as_json = o.flag("--json");
    FILE* const lines = as_json ? stderr : stdout;
    const int turns = static_cast<int>(o.integer("--turns", 10, 2, 100));
    const int64_t prefix_tokens = o.integer("--prefix-tokens", 2000, 16, 1 << 20);
    const int64_t history_tokens = o.integer("--history-tokens", 4000, 64, 1 << 20);
    namespace fs = std::filesystem;
    // Ctrl-C, a plain kill or a hang-up stops the benchmark at the next turn through an exception, so the
    // folder below is removed as on every other error path. Caught before the folder exists, so no
    // signal can land between the two.
    catch_interrupts();
    const char* tmp = std::getenv("TMPDIR");
    std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/kvchat-chat-bench-XXXXXX";
    if (!mkdtemp(dir_template.data()))
        throw Error("cannot create a temporary folder for the benchmark database in " +
                    in_quotes(dir_template.substr(0, dir_template.rfind('/'))) + ": " + std::strerror(errno));
    const std::string dir = dir_template;
    const auto check_interrupted = [] {
        if (g_stop) throw Error("chat-bench was interrupted");
    };
    struct RemoveDir {
        std::string d;
        ~RemoveDir() {
            std::error_code ec;
            std::filesystem::remove_all(d, ec);
        }
    } cleanup{dir};
    const std::string db = dir + "/bench.db";

    Loaded l = load_model(o);
    const Model& m = *l.model;
    TurnOptions t;
    t.generation.max_new_tokens = static_cast<int>(o.integer("-n", 24, 1, 4096));
    t.generation.sampling.greedy = true;
    json out;
    out["model"] = m.path();
    out["threads"] = l.backend->pool().size();

    const std::string only = o.str("--only");
    if (!only.empty() && only != "turns" && only != "prefix" && only != "reopen")
        throw Error("--only takes turns, prefix or reopen");
    auto part = [&](const char* name) { return only.empty() || only == name; };
    // The reopen part's shape: history added in chunks of this many tokens, then this many questions.
    const int64_t chunk_tokens = std::min<int64_t>(800, history_tokens / 4);
    constexpr int kRepeats = 5;
    const char* topics[] = {"rivers", "bridges", "bread", "clocks", "maps", "bees", "glass", "kites", "salt", "ink"};
    auto message = [&](int i) {
        return std::string("Question ") + std::to_string(i + 1) + ": tell me one surprising fact about " +
               topics[i % 10] + ", in one short sentence please.";
    };

    // Each part must fit in the model's context; a part that cannot is refused now, not after minutes of work.
    // The estimates count the text's tokens, the answers' limit and a generous 24 tokens of chat markup per turn.
    {
        const int64_t ctx = m.config().n_ctx_train;
        const int64_t n = t.generation.max_new_tokens;
        const auto refuse = [&](const std::string& what, int64_t needed) {
            throw Error(what + " needs about " + std::to_string(needed) + " tokens but the model's context holds " +
                        std::to_string(ctx) + "; ask for less (see kvchat-cli help)");
        };
        if (part("turns")) {
            int64_t needed = 0;
            for (int i = 0; i < turns; ++i)
                needed += static_cast<int64_t>(m.tokenizer().encode(message(i), false).size()) + 24 + n;
            if (needed > ctx)
                refuse("--turns " + std::to_string(turns) + " with -n " + std::to_string(n), needed);
        }
        if (part("prefix") && prefix_tokens + 64 + n > ctx)
            refuse("--prefix-tokens " + std::to_string(prefix_tokens) + " with -n " + std::to_string(n),
                   prefix_tokens + 64 + n);
        // The history is filled in chunks of up to 800 tokens (the last may overshoot by one chunk), then
        // five short questions are asked.
        const int64_t history_needed = history_tokens + chunk_tokens + kRepeats * (24 + 16 + n);
        if (part("reopen") && history_needed > ctx)
            refuse("--history-tokens " + std::to_string(history_tokens) + " with -n " + std::to_string(n), history_needed);
    }

    // 1. Ten turns of similar length, with the conversation's cache and recomputed from scratch.
    // The cached series is run three times (three conversations) and each turn's best time kept,
    // so a busy machine's hiccups do not decide the ratio.
    if (part("turns")) {
        Store store(db);
        ChatSession reg(store, m, *l.backend);
        Conversation scratch(m, *l.backend, reg.chat_template(), default_cache_spec());
        std::vector<double> best(static_cast<size_t>(turns), 1e300);
        json hist = json::array(), prefilled = json::array(), without = json::array();
        for (int run = 0; run < 3; ++run) {
            const std::string title = "turns-" + std::to_string(run);
            reg.open(title);
            for (int i = 0; i < turns; ++i) {
                check_interrupted();
                const TurnResult a = reg.send(title, message(i), t);
                best[static_cast<size_t>(i)] = std::min(best[static_cast<size_t>(i)], ttft_ms(a));
                if (run == 0) {
                    hist.push_back(a.figures.prompt_tokens);
                    prefilled.push_back(a.figures.computed_tokens);
                }
            }
        }
        for (int i = 0; i < turns; ++i) {
            check_interrupted();
            scratch.release_cache();  // from scratch: the whole history is prefilled again
            const TurnResult b = scratch.send(message(i), t);
            without.push_back(ttft_ms(b));
            std::fprintf(lines, "turn %2d: %5lld tokens in context, ttft %.1f ms with the cache (%lld prefilled), "
                                 "%.1f ms from scratch\n",
                         i + 1, hist[static_cast<size_t>(i)].get<long long>(), best[static_cast<size_t>(i)],
                         prefilled[static_cast<size_t>(i)].get<long long>(), ttft_ms(b));
        }
        out["turns"] = {{"context_tokens", hist},
                        {"prefill_tokens_cached", prefilled},
                        {"ttft_ms_cached_best_of_3", best},
                        {"ttft_ms_from_scratch", without},
                        {"ratio_last_first_cached", best.back() / best.front()},
                        {"ratio_last_first_from_scratch", without.back().get<double>() / without.front().get<double>()}};
    }

    // 2. A conversation started from a saved prefix against a cold start with the same text.
    if (part("prefix")) {
        Store store(db);
        ChatSession reg(store, m, *l.backend);
        const std::string text =
            "You answer questions about the reference text below.\n" + text_of_tokens(m.tokenizer(), prefix_tokens);
        std::vector<std::string> notices;
        const PrefixRecord p = reg.prefixes().save("bench-prefix", text, "", notices);
        for (const std::string& n : notices) note(n);
        const std::string question = "Who combined movable metal type with a press?";
        Conversation cold(m, *l.backend, reg.chat_template(), default_cache_spec());
        cold.append(Role::System, text);
        check_interrupted();
        const TurnResult c = cold.send(question, t);
        check_interrupted();
        const auto t0 = std::chrono::steady_clock::now();
        OpenOptions opts;
        opts.prefix = "bench-prefix";
        reg.open("from-prefix", opts);
        const double open_ms = ms_since(t0);
        const TurnResult w = reg.send("from-prefix", question, t);
        out["prefix"] = {{"prefix_tokens", p.tokens.size()},
                         {"ttft_ms_cold", ttft_ms(c)},
                         {"ttft_ms_from_prefix", ttft_ms(w) + open_ms},
                         {"prefix_load_ms", open_ms},
                         {"prefill_tokens_from_prefix", w.figures.computed_tokens},
                         {"same_answer", c.text == w.text},
                         {"ratio", (ttft_ms(w) + open_ms) / ttft_ms(c)}};
        std::fprintf(lines, "prefix of %zu tokens: cold ttft %.1f ms, from the saved prefix %.1f ms (load %.1f ms)\n",
                     p.tokens.size(), ttft_ms(c), ttft_ms(w) + open_ms, open_ms);
    }

    // 3. Reopening a long conversation after a restart, against a turn of a live session. Two
    // conversations get the same history; then, five times in turn, the live one (its registry
    // kept) takes a turn and the other is reopened (a new store and registry, the model kept
    // loaded) and takes the same turn. Alternating keeps the machine's drift out of the ratio;
    // each side's best is kept, as for the turns.
    if (part("reopen")) {
        const std::string chunk = text_of_tokens(m.tokenizer(), chunk_tokens);
        double live_ms = 1e300, reopen_ms = 1e300;
        int64_t context = 0, prefilled = 0;
        TurnOptions brief = t;
        brief.generation.max_new_tokens = 8;
        Store live_store(db);
        ChatSession live(live_store, m, *l.backend);
        // (The live registry keeps "reopened" too but never touches it again: its snapshot is
        // saved after every turn.)
        for (const char* title : {"live", "reopened"}) {
            live.open(title);
            int64_t held = 0;
            for (int k = 1; held < history_tokens; ++k) {
                check_interrupted();
                const TurnResult r = live.send(title, "Part " + std::to_string(k) + " of my notes:\n" + chunk, brief);
                held = r.figures.prompt_tokens + r.figures.generated_tokens;
            }
        }
        for (int i = 0; i < kRepeats; ++i) {
            check_interrupted();
            const std::string message = "Summarise part " + std::to_string(i + 1) + " in one sentence.";
            live_ms = std::min(live_ms, ttft_ms(live.send("live", message, t)));
            Store store(db);  // the restart
            ChatSession reg(store, m, *l.backend);
            const auto t0 = std::chrono::steady_clock::now();
            reg.open("reopened");
            const double open_ms = ms_since(t0);
            const TurnResult r = reg.send("reopened", message, t);
            for (const std::string& n : r.notices) note(n);
            reopen_ms = std::min(reopen_ms, ttft_ms(r) + open_ms);
            context = r.figures.prompt_tokens;
            prefilled = r.figures.computed_tokens;
        }
        out["reopen"] = {{"context_tokens", context},
                         {"ttft_ms_live_best_of_5", live_ms},
                         {"ttft_ms_after_reopen_best_of_5", reopen_ms},
                         {"prefill_tokens_after_reopen", prefilled},
                         {"ratio", reopen_ms / live_ms}};
        std::fprintf(lines, "reopening a %lld-token conversation: ttft %.1f ms (snapshot load included), live %.1f ms (best of %d each, alternating)\n",
                     static_cast<long long>(context), reopen_ms, live_ms, kRepeats);
    }
    if (as_json) {
        std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else if (out.contains("turns")) {
        const json& tr = out["turns"];
        std::printf("turn %d / turn 1 time to first token: %.2fx with the cache, %.2fx from scratch\n", turns,
                    tr["ratio_last_first_cached"].get<double>(), tr["ratio_last_first_from_scratch"].get<double>());
    }
    if (!as_json && out.contains("prefix"))
        std::printf("from the saved prefix / cold: %.3fx (%s answer)\n", out["prefix"]["ratio"].get<double>(),
                    out["prefix"]["same_answer"].get<bool>() ? "the same" : "a different");
    if (!as_json && out.contains("reopen"))
        std::printf("reopened / live: %.2fx\n", out["reopen"]["ratio"].get<double>());
    return 0;
}

}  // namespace kvchat::cli
