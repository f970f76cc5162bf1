#include "engine/chat/chat_template.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <initializer_list>

#include "engine/error.h"
#include "engine/format/gguf_file.h"

#include <nlohmann/json.hpp>

namespace kvchat {

namespace {

// The markers whose ids end a reply or begin a turn, for every family: an answer read from a file
// may not contain them (see answer_ids_from_file).
constexpr std::string_view kTurnMarkers[] = {
    "<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>", "<|im_sep|>", "[INST]", "[/INST]",
    "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|eom_id|>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"};

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// Python's str methods as the templates call them.
std::string_view lstrip_newlines(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
std::string_view rstrip_newlines(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}
std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }
std::string_view after_last(std::string_view s, std::string_view sep) {  // s.split(sep)[-1]
    const size_t at = s.rfind(sep);
    return at == std::string_view::npos ? s : s.substr(at + sep.size());
}
std::string_view before_first(std::string_view s, std::string_view sep) {  // s.split(sep)[0]
    return s.substr(0, std::min(s.size(), s.find(sep)));
}

// The length of the Python whitespace character (str.isspace) that starts s, or 0.
size_t space_at(std::string_view s) {
    if (s.empty()) return 0;
    const auto c = static_cast<unsigned char>(s[0]);
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
    auto cp = [&](size_t n) -> uint32_t {
        if (s.size() < n) return 0;
        uint32_t v = c & (n == 2 ? 0x1F : 0x0F);
        for (size_t i = 1; i < n; ++i) v = (v << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
        return v;
    };
    if ((c & 0xE0) == 0xC0) {
        const uint32_t v = cp(2);
        return v == 0x85 || v == 0xA0 ? 2 : 0;
    }
    if ((c & 0xF0) == 0xE0) {
        const uint32_t v = cp(3);
        const bool space = v == 0x1680 || (v >= 0x2000 && v <= 0x200A) || v == 0x2028 || v == 0x2029 ||
                           v == 0x202F || v == 0x205F || v == 0x3000;
        return space ? 3 : 0;
    }
    return 0;
}
// The length of the Python whitespace character that ends s, or 0.
size_t space_before_end(std::string_view s) {
    for (size_t n = 1; n <= 3 && n <= s.size(); ++n)
        if (space_at(s.substr(s.size() - n)) == n) return n;
    return 0;
}
// Jinja's trim filter: str.strip(), Unicode whitespace included.
std::string python_strip(std::string_view s) {
    while (size_t n = space_at(s)) s.remove_prefix(n);
    while (size_t n = space_before_end(s)) s.remove_suffix(n);
    return std::string(s);
}

// The text of a Jinja string literal starting at `from` (just after its opening quote), escapes
// resolved; stops at the closing quote. Empty when the literal does not end.
std::string literal_text(std::string_view jinja, size_t from, char quote, size_t* end = nullptr) {
    std::string out;
    for (size_t i = from; i < jinja.size(); ++i) {
        const char c = jinja[i];
        if (c == quote) {
            if (end) *end = i;
            return out;
        }
        if (c == '\\' && i + 1 < jinja.size()) {
            const char e = jinja[++i];
            out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
            out += c;
        }
    }
    if (end) *end = std::string_view::npos;
    return {};
}

// A ChatML template's default system turn: the text of a literal '<|im_start|>system\n...<|im_end|>'.
std::string chatml_default_system(std::string_view jinja) {
    constexpr std::string_view kOpen = "<|im_start|>system";
    for (size_t at = jinja.find(kOpen); at != std::string_view::npos; at = jinja.find(kOpen, at + 1)) {
        if (at == 0 || (jinja[at - 1] != '\'' && jinja[at - 1] != '"')) continue;
        size_t end = 0;
        const std::string text = literal_text(jinja, at, jinja[at - 1], &end);
        constexpr std::string_view kHead = "<|im_start|>system\n", kTail = "<|im_end|>";
        const size_t close = text.find(kTail);
        if (end == std::string_view::npos || text.rfind(kHead, 0) != 0 || close == std::string::npos) continue;
        std::string body = text.substr(kHead.size(), close - kHead.size());
        if (!body.empty()) return body;
    }
    return {};
}

// The string literal that follows `key` in the template (e.g. `strftime_now(` → "%d %b %Y").
std::string literal_after(std::string_view jinja, std::string_view key) {
    size_t at = jinja.find(key);
    if (at == std::string_view::npos) return {};
    at += key.size();
    while (at < jinja.size() && jinja[at] == ' ') ++at;
    if (at >= jinja.size() || (jinja[at] != '"' && jinja[at] != '\'')) return {};
    return literal_text(jinja, at + 1, jinja[at]);
}

// strftime for the specifiers date templates use, in English whatever the process locale is
// (a Qt application sets the user's locale; Jinja's Python renders month names in the C locale).
std::string format_date(std::string_view format, int year, int month, int day) {
    static constexpr const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                              "July",    "August",   "September", "October", "November", "December"};
    static constexpr const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
    const std::chrono::year_month_day ymd{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                          std::chrono::day{static_cast<unsigned>(day)}};
    const unsigned weekday = std::chrono::weekday{std::chrono::sys_days{ymd}}.c_encoding();
    const std::string month_name = kMonths[(month - 1) % 12];
    const std::string day_name = kDays[weekday % 7];
    auto two = [](int v) { return std::string(v < 10 ? "0" : "") + std::to_string(v); };
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%' || i + 1 == format.size()) {
            out += format[i];
            continue;
        }
        switch (const char f = format[++i]) {
            case 'd': out += two(day); break;
            case 'e': out += (day < 10 ? " " : "") + std::to_string(day); break;
            case 'm': out += two(month); break;
            case 'Y': out += std::to_string(year); break;
            case 'y': out += two(year % 100); break;
            case 'b': out += month_name.substr(0, 3); break;
            case 'B': out += month_name; break;
            case 'a': out += day_name.substr(0, 3); break;
            case 'A': out += day_name; break;
            case '%': out += '%'; break;
            default: out += '%'; out += f; break;
        }
    }
    return out;
}

TemplateDetails usual_details(ChatFormat format) {
    TemplateDetails d;
    d.format = format;
    if (format == ChatFormat::Llama3) {
        d.dated_header = true;
        d.fixed_date = "26 Jul 2024";  // Llama 3.1's
    }
    return d;
}

}  // namespace

std::string_view chat_format_name(ChatFormat f) {
    switch (f) {
        case ChatFormat::Gemma: return "gemma";
        case ChatFormat::Llama2: return "llama2";
        case ChatFormat::ChatML: return "chatml";
        case ChatFormat::Mistral: return "mistral";
        case ChatFormat::Zephyr: return "zephyr";
        case ChatFormat::Plain: return "plain";
        case ChatFormat::Qwen3: return "qwen3";
        case ChatFormat::Llama3: return "llama3";
        case ChatFormat::DeepSeekR1: return "deepseek-r1";
        case ChatFormat::MistralTekken: return "mistral-v3-tekken";
        case ChatFormat::Phi3: return "phi3";
        case ChatFormat::Phi4: return "phi4";
    }
    return "plain";
}

TemplateDetails read_chat_template(std::string_view jinja) {
    auto has = [&](std::string_view s) { return contains(jinja, s); };
    TemplateDetails d;
    // Most specific markers first: Phi-4 writes <|im_start|> too, Phi-3 <|user|> as Zephyr does,
    // Llama 2 and Mistral both [INST], only Llama 2 <<SYS>>.
    if (has("<start_of_turn>")) {
        d.format = ChatFormat::Gemma;
    } else if (has("<|im_sep|>")) {
        d.format = ChatFormat::Phi4;
    } else if (has("<|im_start|>") && has("</think>") && has("last_query_index")) {
        d.format = ChatFormat::Qwen3;
    } else if (has("<|im_start|>")) {
        d.format = ChatFormat::ChatML;
        d.default_system = chatml_default_system(jinja);
    } else if (has("<｜User｜>") && has("<｜Assistant｜>")) {
        d.format = ChatFormat::DeepSeekR1;
        d.prompt_opens_thinking = has("'<｜Assistant｜><think>\\n'") || has("'<｜Assistant｜><think>\n'");
    } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
        d.format = ChatFormat::Llama3;
        d.dated_header = has("Cutting Knowledge Date:");
        if (d.dated_header) {
            d.date_format = literal_after(jinja, "strftime_now(");
            d.fixed_date = literal_after(jinja, "set date_string =");
            if (d.date_format.empty() && d.fixed_date.empty()) d.fixed_date = "26 Jul 2024";
        }
    } else if (has("<|user|>") && has("<|end|>")) {
        d.format = ChatFormat::Phi3;
    } else if (has("<|user|>") && has("<|assistant|>")) {
        d.format = ChatFormat::Zephyr;
    } else if (has("[INST]") && has("<<SYS>>")) {
        d.format = ChatFormat::Llama2;
    } else if (has("[INST]") && !has("[SYSTEM_PROMPT]") && (has("\"[INST]\"") || has("'[INST]'"))) {
        d.format = ChatFormat::MistralTekken;  // "[INST]" with no space inside the quotes
    } else if (has("[INST]")) {
        d.format = ChatFormat::Mistral;
    }
    return d;
}

ThinkingSplit split_thinking(std::string_view content) {
    ThinkingSplit s;
    if (contains(content, "</think>")) {
        s.has_thinking = true;
        s.thinking = std::string(strip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>")));
        s.answer = std::string(lstrip_newlines(after_last(content, "</think>")));
    } else if (std::string_view open = lstrip_newlines(content); open.rfind("<think>", 0) == 0) {
        s.has_thinking = true;  // still thinking: the answer has not begun
        s.thinking = std::string(lstrip_newlines(open.substr(7)));
    } else {
        s.answer = std::string(content);
    }
    return s;
}

std::vector<ChatMessage> parse_chat_messages(std::string_view json) {
    const nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
    if (doc.is_discarded()) throw Error("the messages are not valid JSON");
    if (!doc.is_array()) throw Error("the messages must be a JSON array of {\"role\", \"content\"} objects");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < doc.size(); ++i) {
        const nlohmann::json& m = doc[i];
        const std::string where = "message " + std::to_string(i + 1);
        if (!m.is_object()) throw Error(where + " is not a {\"role\", \"content\"} object");
        if (!m.contains("role") || !m["role"].is_string()) throw Error(where + " has no \"role\" string");
        if (!m.contains("content") || !m["content"].is_string()) throw Error(where + " has no \"content\" string");
        const std::string role = m["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant")
            throw Error(where + ": role must be \"system\", \"user\" or \"assistant\", not \"" + role + "\"");
        out.push_back({role == "system" ? Role::System : role == "user" ? Role::User : Role::Assistant,
                       m["content"].get<std::string>()});
    }
    return out;
}

ChatTemplate ChatTemplate::text_from_gguf(const GgufFile& file) {
    const std::string jinja = file.get_string("tokenizer.chat_template", std::string());
    std::string bos, eos;
    if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->type == GgufType::ARRAY) {
        const GgufArray& list = file.get_array("tokenizer.ggml.tokens");
        auto piece = [&](std::string_view key) {
            const uint64_t id = file.get_uint(key, UINT64_MAX);
            if (id >= list.items.size()) return std::string();
            const auto* s = std::get_if<std::string>(&list.items[id].v);
            return s ? *s : std::string();
        };
        bos = piece("tokenizer.ggml.bos_token_id");
        eos = piece("tokenizer.ggml.eos_token_id");
    }
    TemplateDetails d = read_chat_template(jinja);
    if (jinja.empty()) {  // the architecture's format, as for_model chooses it
        const std::string arch = file.get_string("general.architecture", std::string());
        d = usual_details(arch == "gemma3" ? ChatFormat::Gemma : arch == "mistral" ? ChatFormat::Mistral : ChatFormat::Llama2);
    }
    ChatTemplate t(d, std::move(bos), std::move(eos));
    if (!jinja.empty() && t.format() == ChatFormat::Plain)
        t.notice_ = "the model's chat template is not one kvchat recognises; using a plain \"User:\" / \"Assistant:\" format";
    return t;
}

ChatTemplate ChatTemplate::for_model(const Model& model) {
    const std::string& jinja = model.chat_template();
    TemplateDetails d;
    std::string notice;
    if (!jinja.empty()) {
        d = read_chat_template(jinja);
        if (d.format == ChatFormat::Plain)
            notice = "the model's chat template is not one kvchat recognises (Gemma, Llama 2, Llama 3, ChatML, Qwen 3, "
                     "DeepSeek-R1, Mistral, Phi-3, Phi-4, Zephyr); using a plain \"User:\" / \"Assistant:\" format";
    } else if (model.config().arch == Architecture::Gemma3) {
        d.format = ChatFormat::Gemma;
    } else if (model.config().arch_name == "mistral") {
        d.format = ChatFormat::Mistral;
    } else {
        d.format = ChatFormat::Llama2;
    }
    ChatTemplate t(d, model.tokenizer());
    t.notice_ = std::move(notice);
    return t;
}

ChatTemplate::ChatTemplate(ChatFormat format, const Tokenizer& tokenizer) : ChatTemplate(usual_details(format), tokenizer) {}

ChatTemplate::ChatTemplate(const TemplateDetails& details, std::string bos_text, std::string eos_text)
    : details_(details), bos_text_(std::move(bos_text)), eos_text_(std::move(eos_text)) {
    if (details_.format == ChatFormat::Plain) stop_strings_ = {"\nUser:"};
}

ChatTemplate::ChatTemplate(const TemplateDetails& details, const Tokenizer& tokenizer)
    : details_(details), tok_(&tokenizer) {
    const SpecialTokens& sp = tokenizer.special();
    auto text_of = [&](int32_t id) { return id >= 0 && id < tokenizer.vocab_size() ? tokenizer.piece(id) : std::string(); };
    bos_text_ = text_of(sp.bos);
    eos_text_ = text_of(sp.eos);
    auto stop_on = [&](std::initializer_list<std::string_view> pieces) {
        for (std::string_view piece : pieces)
            if (const int32_t id = marker_id(piece); id >= 0) stop_tokens_.push_back(id);
    };
    switch (details_.format) {
        case ChatFormat::Gemma: stop_on({"<end_of_turn>"}); break;
        case ChatFormat::ChatML:
        case ChatFormat::Qwen3: stop_on({"<|im_end|>", "<|endoftext|>"}); break;
        case ChatFormat::Llama3: stop_on({"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}); break;
        case ChatFormat::DeepSeekR1: stop_on({"<｜end▁of▁sentence｜>"}); break;
        case ChatFormat::MistralTekken: stop_on({"</s>"}); break;
        case ChatFormat::Phi3: stop_on({"<|end|>", "<|endoftext|>"}); break;
        case ChatFormat::Phi4: stop_on({"<|im_end|>", "<|endoftext|>"}); break;
        case ChatFormat::Plain: stop_strings_ = {"\nUser:"}; break;
        default: break;
    }
    // The markers that give a transcript its turns, and the ends of a reply.
    turn_markers_ = stop_tokens_;
    for (std::string_view m : kTurnMarkers)
        if (const int32_t id = marker_id(m); id >= 0) turn_markers_.push_back(id);
    for (int32_t id : {sp.eos, sp.end_of_turn})
        if (id >= 0) turn_markers_.push_back(id);
}

void ChatTemplate::set_date(int year, int month, int day) {
    if (month < 1 || month > 12 || day < 1 || day > 31) throw Error("not a date: month and day out of range");
    date_[0] = year;
    date_[1] = month;
    date_[2] = day;
}

std::string ChatTemplate::today() const {
    if (!details_.date_format.empty()) {
        int y = date_[0], m = date_[1], d = date_[2];
        if (m == 0) {
            const std::time_t now = std::time(nullptr);
            std::tm local{};
            localtime_r(&now, &local);
            y = local.tm_year + 1900;
            m = local.tm_mon + 1;
            d = local.tm_mday;
        }
        return format_date(details_.date_format, y, m, d);
    }
    return details_.fixed_date;
}

int32_t ChatTemplate::marker_id(std::string_view piece) const {
    if (!tok_) return -1;
    const int32_t id = tok_->find_piece(piece);
    if (id < 0) return -1;
    const TokenType t = tok_->type(id);
    return t == TokenType::Control || t == TokenType::UserDefined ? id : -1;
}

ChatTemplate::Piece ChatTemplate::reply(const ChatMessage& m, std::string text) const {
    // The ids an answer was generated as, under the rule ids read from a file follow
    // (answer_ids_from_file: no turn marker), so a live conversation renders as it will when it
    // is reopened: a model that wrote <start_of_turn> inside its answer (which decodes to nothing)
    // otherwise gave the next turn another prompt, and another answer, than a restart does
    // (kvchat_soak seed 305 step 61).
    if (tok_ && m.role == Role::Assistant && !m.tokens.empty() && text == m.content &&
        !answer_ids_from_file(m.tokens).empty() && tok_->decode(m.tokens) == text)
        return Piece{Piece::Ids, std::move(text), m.tokens};
    // Tokenized on its own, so the generation prompt before it is a prefix of the rendered answer.
    return Piece{Piece::Ids, std::move(text), {}};
}

std::vector<int32_t> ChatTemplate::answer_ids_from_file(std::vector<int32_t> ids) const {
    const auto allowed = [&](int32_t id) {
        return tok_ && id >= 0 && id < tok_->vocab_size() &&
               std::find(turn_markers_.begin(), turn_markers_.end(), id) == turn_markers_.end();
    };
    if (!std::all_of(ids.begin(), ids.end(), allowed)) ids.clear();
    return ids;
}

void ChatTemplate::emit(std::vector<int32_t>& out, const std::vector<Piece>& pieces) const {
    // Text between two special tokens is tokenized as one piece, as llama.cpp tokenizes a
    // template's output; a marker the vocabulary lacks is such text too.
    std::string text;
    auto flush = [&] {
        if (text.empty()) return;
        const std::vector<int32_t> ids = tok_->encode(text, false);
        out.insert(out.end(), ids.begin(), ids.end());
        text.clear();
    };
    for (const Piece& p : pieces) {
        switch (p.kind) {
            case Piece::Text: text += p.text; break;
            case Piece::Marker:
                if (const int32_t id = marker_id(p.text); id >= 0) {
                    flush();
                    out.push_back(id);
                } else {
                    text += p.text;
                }
                break;
            case Piece::Bos:
            case Piece::Eos: {
                flush();
                const int32_t id = p.kind == Piece::Bos ? tok_->special().bos : tok_->special().eos;
                if (id >= 0) out.push_back(id);
                break;
            }
            case Piece::Ids:
                flush();
                if (!p.ids.empty()) {
                    out.insert(out.end(), p.ids.begin(), p.ids.end());
                } else {
                    text = p.text;
                    flush();
                }
                break;
        }
    }
    flush();
}

ChatTemplate::Layout ChatTemplate::layout(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                          Answers answers) const {
    Layout L;
    const ChatFormat f = details_.format;
    auto T = [](std::string s) { return Piece{Piece::Text, std::move(s), {}}; };
    auto M = [](std::string_view s) { return Piece{Piece::Marker, std::string(s), {}}; };
    const Piece bos{Piece::Bos, {}, {}}, eos{Piece::Eos, {}, {}};
    auto role_name = [](Role r) { return r == Role::System ? "system" : r == Role::User ? "user" : "assistant"; };
    const size_t n = messages.size();
    const bool first_is_system = n > 0 && messages[0].role == Role::System;
    L.system_first = first_is_system && f != ChatFormat::MistralTekken;

    if (f == ChatFormat::Gemma || f == ChatFormat::Llama2 || f == ChatFormat::Mistral || f == ChatFormat::Llama3 ||
        f == ChatFormat::DeepSeekR1 || f == ChatFormat::MistralTekken)
        L.head.push_back(bos);  // the template writes bos_token

    // Qwen 3 keeps the thinking of answers after the last user query. Rendered for the next turn,
    // a trailing answer is followed by one.
    size_t last_query = n == 0 ? 0 : n - 1;
    if (f == ChatFormat::Qwen3) {
        for (size_t i = n; i-- > 0;) {
            const std::string& c = messages[i].content;
            const bool tool_response = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 &&
                                       c.compare(c.size() - 16, 16, "</tool_response>") == 0;
            if (messages[i].role == Role::User && !tool_response) {
                last_query = i;
                break;
            }
        }
        if (answers == Answers::AsNextTurn && n > 0 && messages.back().role == Role::Assistant) last_query = n;
    }
    // DeepSeek-R1 writes the last system message first, wherever it stands.
    std::string deepseek_system;
    if (f == ChatFormat::DeepSeekR1) {
        size_t systems = 0;
        for (const ChatMessage& m : messages)
            if (m.role == Role::System) deepseek_system = m.content, ++systems;
        if (systems > 1) L.system_first = false;
    }
    // Llama 3.1 and later: the system message (trimmed) ends a header every conversation has.
    const bool llama3_header = f == ChatFormat::Llama3 && details_.dated_header;

    // A system message opens the first user turn in Gemma, Llama 2 and Mistral: its pieces are
    // the turn's opening, and the user message that follows adds only its content.
    bool in_open_turn = false;
    for (size_t i = 0; i < n; ++i) {
        const ChatMessage& m = messages[i];
        std::vector<Piece> p;
        const bool continues_system = in_open_turn && m.role == Role::User;
        if (in_open_turn && m.role != Role::User) {
            // The system text was not followed by a user message: close the turn it opened.
            if (f == ChatFormat::Gemma) p = {M("<end_of_turn>"), T("\n")};
            if (f == ChatFormat::Llama2 || f == ChatFormat::Mistral) p = {M("[/INST]")};
        }
        in_open_turn = false;
        switch (f) {
            case ChatFormat::Gemma:
                if (m.role == Role::System) {
                    p.insert(p.end(), {M("<start_of_turn>"), T("user\n"), T(m.content + "\n\n")});
                    in_open_turn = true;
                } else if (m.role == Role::User) {
                    if (!continues_system) p.insert(p.end(), {M("<start_of_turn>"), T("user\n")});
                    p.insert(p.end(), {T(m.content), M("<end_of_turn>"), T("\n")});
                } else {
                    p.insert(p.end(), {M("<start_of_turn>"), T("model\n"), reply(m, m.content), M("<end_of_turn>"), T("\n")});
                }
                break;
            case ChatFormat::Llama2:
            case ChatFormat::Mistral: {
                // [INST] is a control token in Mistral's newer vocabularies and plain text in
                // Llama 2's; as text it is tokenized together with the words around it.
                const bool llama2 = f == ChatFormat::Llama2;
                if (m.role == Role::System) {
                    if (i > 0) p.push_back(bos);
                    p.insert(p.end(), {M("[INST]"), T(llama2 ? " <<SYS>>\n" + m.content + "\n<</SYS>>\n\n" : " " + m.content + "\n\n")});
                    in_open_turn = true;
                } else if (m.role == Role::User) {
                    if (!continues_system) {
                        if (i > 0) p.push_back(bos);
                        p.push_back(M("[INST]"));
                    }
                    p.insert(p.end(), {T((continues_system ? "" : " ") + m.content + " "), M("[/INST]")});
                } else {
                    p.insert(p.end(), {reply(m, m.content), eos});
                }
                break;
            }
            case ChatFormat::ChatML:
                if (i == 0 && m.role != Role::System && !details_.default_system.empty())
                    p = {M("<|im_start|>"), T("system\n" + details_.default_system), M("<|im_end|>"), T("\n")};
                [[fallthrough]];
            case ChatFormat::Qwen3: {
                p.push_back(M("<|im_start|>"));
                if (m.role != Role::Assistant) {
                    p.push_back(T(std::string(role_name(m.role)) + "\n" + m.content));
                } else if (f == ChatFormat::ChatML || !contains(m.content, "</think>")) {
                    if (f == ChatFormat::Qwen3 && i > last_query && i + 1 == n)
                        p.insert(p.end(), {T("assistant\n"), M("<think>"), T("\n\n"), M("</think>"), T("\n\n"),
                                           reply(m, std::string(lstrip_newlines(m.content)))});
                    else
                        p.insert(p.end(), {T("assistant\n"), reply(m, m.content)});
                } else {
                    const std::string_view c = m.content;
                    const std::string content(lstrip_newlines(after_last(c, "</think>")));
                    const std::string_view reasoning =
                        lstrip_newlines(after_last(rstrip_newlines(before_first(c, "</think>")), "<think>"));
                    if (i > last_query && (i + 1 == n || !reasoning.empty()))
                        p.insert(p.end(), {T("assistant\n"), M("<think>"), T("\n" + std::string(strip_newlines(reasoning)) + "\n"),
                                           M("</think>"), T("\n\n"), reply(m, content)});
                    else
                        p.insert(p.end(), {T("assistant\n"), reply(m, content)});
                }
                p.insert(p.end(), {M("<|im_end|>"), T("\n")});
                break;
            }
            case ChatFormat::Zephyr: {
                const char* role = m.role == Role::System ? "<|system|>" : m.role == Role::User ? "<|user|>" : "<|assistant|>";
                p = {M(role), T("\n"), reply(m, m.content), eos, T("\n")};
                break;
            }
            case ChatFormat::Plain:
                if (m.role == Role::System)
                    p = {T(m.content + "\n\n")};
                else if (m.role == Role::User)
                    p = {T("User: " + m.content + "\n")};
                else
                    p = {T("Assistant:"), reply(m, " " + m.content + "\n")};
                break;
            case ChatFormat::Llama3: {
                const std::string header_end = "\n\n";
                if (llama3_header && i == 0) {
                    const std::string system = first_is_system ? python_strip(m.content) : std::string();
                    p = {M("<|start_header_id|>"), T("system"), M("<|end_header_id|>"),
                         T(header_end + "Cutting Knowledge Date: December 2023\nToday Date: " + today() + "\n\n" + system),
                         M("<|eot_id|>")};
                    if (first_is_system) break;
                }
                p.insert(p.end(), {M("<|start_header_id|>"), T(role_name(m.role)), M("<|end_header_id|>")});
                if (m.role == Role::Assistant)
                    p.insert(p.end(), {T(header_end), reply(m, python_strip(m.content))});
                else
                    p.push_back(T(header_end + python_strip(m.content)));
                p.push_back(M("<|eot_id|>"));
                break;
            }
            case ChatFormat::DeepSeekR1:
                if (i == 0) p.push_back(T(deepseek_system));
                if (m.role == Role::User) {
                    p.insert(p.end(), {M("<｜User｜>"), T(m.content)});
                } else if (m.role == Role::Assistant) {
                    const std::string_view c = m.content;
                    p.insert(p.end(), {M("<｜Assistant｜>"), reply(m, std::string(contains(c, "</think>") ? after_last(c, "</think>") : c)),
                                       M("<｜end▁of▁sentence｜>")});
                }
                break;
            case ChatFormat::MistralTekken:
                // The system message goes into the last user message, when that is the last message.
                if (i == 0 && first_is_system) break;
                if (m.role == Role::User) {
                    const bool with_system = first_is_system && i + 1 == n;
                    p = {M("[INST]"), T(with_system ? messages[0].content + "\n\n" + m.content : m.content), M("[/INST]")};
                } else if (m.role == Role::Assistant) {
                    p = {reply(m, m.content), eos};
                }
                break;
            case ChatFormat::Phi3:
                if (m.role == Role::System && m.content.empty()) break;
                if (m.role == Role::Assistant)
                    p = {M("<|assistant|>"), T("\n"), reply(m, m.content)};
                else
                    p = {M(m.role == Role::System ? "<|system|>" : "<|user|>"), T("\n" + m.content)};
                p.insert(p.end(), {M("<|end|>"), T("\n")});
                break;
            case ChatFormat::Phi4:
                p = {M("<|im_start|>"), T(role_name(m.role)), M("<|im_sep|>")};
                p.push_back(m.role == Role::Assistant ? reply(m, m.content) : T(m.content));
                p.push_back(M("<|im_end|>"));
                break;
        }
        L.messages.push_back(std::move(p));
    }
    if (n == 0 && llama3_header)
        L.head.insert(L.head.end(), {M("<|start_header_id|>"), T("system"), M("<|end_header_id|>"),
                                     T("\n\nCutting Knowledge Date: December 2023\nToday Date: " + today() + "\n\n"),
                                     M("<|eot_id|>")});

    std::vector<Piece>& p = L.prompt;
    if (add_generation_prompt) {
        if (in_open_turn) {
            if (f == ChatFormat::Gemma) p = {M("<end_of_turn>"), T("\n")};
            if (f == ChatFormat::Llama2 || f == ChatFormat::Mistral) p = {M("[/INST]")};
        }
        switch (f) {
            case ChatFormat::Gemma: p.insert(p.end(), {M("<start_of_turn>"), T("model\n")}); break;
            case ChatFormat::ChatML:
            case ChatFormat::Qwen3: p.insert(p.end(), {M("<|im_start|>"), T("assistant\n")}); break;
            case ChatFormat::Zephyr: p.insert(p.end(), {M("<|assistant|>"), T("\n")}); break;
            case ChatFormat::Plain: p.push_back(T("Assistant:")); break;
            case ChatFormat::Llama3: p.insert(p.end(), {M("<|start_header_id|>"), T("assistant"), M("<|end_header_id|>"), T("\n\n")}); break;
            case ChatFormat::DeepSeekR1:
                p.push_back(M("<｜Assistant｜>"));
                if (details_.prompt_opens_thinking) p.insert(p.end(), {M("<think>"), T("\n")});
                break;
            case ChatFormat::Phi3: p.insert(p.end(), {M("<|assistant|>"), T("\n")}); break;
            case ChatFormat::Phi4: p.insert(p.end(), {M("<|im_start|>"), T("assistant"), M("<|im_sep|>")}); break;
            case ChatFormat::Llama2:
            case ChatFormat::Mistral:
            case ChatFormat::MistralTekken: break;  // the user turn ends with [/INST]; the reply follows
        }
    } else if (f == ChatFormat::Phi3 && answers == Answers::AsJinja) {
        p.push_back(eos);  // Phi-3 ends a transcript without a prompt with eos; the next turn drops it
    }
    return L;
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    if (!tok_) throw Error("this chat template has no vocabulary to render token ids with");
    const Layout L = layout(messages, add_generation_prompt, Answers::AsNextTurn);
    RenderedChat r;
    const SpecialTokens& sp = tok_->special();
    // BOS once: where the template writes it, or where the vocabulary adds it (as llama.cpp does).
    const bool writes_bos = !L.head.empty() && L.head.front().kind == Piece::Bos;
    if (!writes_bos && sp.bos >= 0 && sp.add_bos) r.tokens.push_back(sp.bos);
    emit(r.tokens, L.head);
    for (size_t i = 0; i < L.messages.size(); ++i) {
        r.message_starts.push_back(static_cast<int64_t>(r.tokens.size()));
        emit(r.tokens, L.messages[i]);
        if (i == 0 && L.system_first) r.system_end = static_cast<int64_t>(r.tokens.size());
    }
    r.prompt_start = static_cast<int64_t>(r.tokens.size());
    emit(r.tokens, L.prompt);
    return r;
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    const Layout L = layout(messages, add_generation_prompt, Answers::AsJinja);
    std::string out;
    auto write = [&](const std::vector<Piece>& pieces) {
        for (const Piece& p : pieces)
            out += p.kind == Piece::Bos ? bos_text_ : p.kind == Piece::Eos ? eos_text_ : p.text;
    };
    write(L.head);
    for (const auto& m : L.messages) write(m);
    write(L.prompt);
    return out;
}

std::string ChatTemplate::refusal(const std::vector<ChatMessage>& messages) const {
    if (details_.format != ChatFormat::MistralTekken) return {};
    const size_t first = !messages.empty() && messages[0].role == Role::System ? 1 : 0;
    for (size_t i = first; i < messages.size(); ++i)
        if ((messages[i].role == Role::User) != ((i - first) % 2 == 0))
            return "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
    for (size_t i = first; i < messages.size(); ++i)
        if (messages[i].role == Role::System)
            return "Only user and assistant roles are supported, with the exception of an initial optional system message!";
    return {};
}

}  // namespace kvchat
