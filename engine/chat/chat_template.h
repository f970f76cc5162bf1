#pragma once
// Chat formats: a conversation rendered to token ids the way its model family was trained.
//
// The model's Jinja template (GGUF tokenizer.chat_template or tokenizer_config.json) is never
// executed: it is recognised by the markers that distinguish the families (read_chat_template) and
// the family's format is rendered natively, checked against the real Jinja engine by golden texts
// (tests/reference/make_chat_template_golden.py). Control markers go in by id; text (what the user
// typed, and the format's own words such as "user\n") is tokenized as plain text, so typed
// "<start_of_turn>" stays text.
//
// Rendering is prefix-stable: the tokens of messages [0, k) never change when later messages are
// added, so a conversation's cache can be reused up to where the transcript changed. Each message
// is tokenized on its own (the text between two markers of one message as one piece, as llama.cpp
// tokenizes the text between special tokens), except where a family's template itself rewrites
// earlier text:
//  - Qwen 3 drops the <think> block of every answer before the last user message, DeepSeek-R1
//    everything up to </think>. An answer is rendered the way the next turn's template renders it
//    (dropped) from the moment it is stored, so the finished transcript is prefix-stable; only the
//    ids the model generated (with its thinking) differ, and the next turn prefills the answer again
//    from its start. render_text follows Jinja to the letter, thinking of a trailing answer included.
//  - Mistral v3-tekken writes the system message into the last user message: with a system message
//    every turn moves it, and the cache is reused only up to the first [INST].
//  - Llama 3.2 writes today's date into the system header: a new day recomputes the conversation.
//  - DeepSeek-R1 places the last system message at the start, wherever it stands in the list.
#include "engine/model/model.h"
#include "engine/store/store.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

class GgufFile;

enum class ChatFormat { Gemma, Llama2, ChatML, Mistral, Zephyr, Plain, Qwen3, Llama3, DeepSeekR1, MistralTekken, Phi3, Phi4 };
// "gemma", "llama2", "chatml", "mistral", "zephyr", "plain", "qwen3", "llama3", "deepseek-r1",
// "mistral-v3-tekken", "phi3", "phi4"
std::string_view chat_format_name(ChatFormat f);

// What a template says beyond its family, read from its text.
struct TemplateDetails {
    ChatFormat format = ChatFormat::Plain;
    // ChatML (SmolLM2, Qwen 2.5): the system turn written when the conversation has no system message.
    std::string default_system;
    // Llama 3.1 and later: the system header names the knowledge cutoff and a date, either a fixed one
    // (Llama 3.1: "26 Jul 2024") or today's in a strftime format (Llama 3.2: "%d %b %Y").
    bool dated_header = false;
    std::string fixed_date;
    std::string date_format;
    // DeepSeek-R1 (later revisions): the generation prompt opens the thinking block, "<think>\n".
    bool prompt_opens_thinking = false;
};

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(Role r, std::string text, std::vector<int32_t> ids = {})
        : role(r), content(std::move(text)), tokens(std::move(ids)) {}

    Role role = Role::User;
    std::string content;
    // An answer's ids as the model generated them, which is what its cache holds. Rendered in
    // place of its text's tokenization while they decode to exactly the text the template writes
    // for it: text written back may tokenize differently ("Purchase" as one piece where the model
    // wrote two), and the cache would be recomputed from there.
    std::vector<int32_t> tokens;
};

// The tokens of a rendered conversation and where each message's tokens begin.
struct RenderedChat {
    std::vector<int32_t> tokens;
    std::vector<int64_t> message_starts;  // one per message: where its own rendering begins
    int64_t system_end = 0;    // tokens that depend only on a leading system message (0 when none)
    int64_t prompt_start = 0;  // where the generation prompt begins (== tokens.size() without one)
};

// Which family a Jinja template text belongs to, and its details; Plain when no family's markers
// are found.
TemplateDetails read_chat_template(std::string_view jinja);
inline ChatFormat recognise_chat_template(std::string_view jinja) { return read_chat_template(jinja).format; }

// A JSON array of {"role", "content"} objects (roles "system", "user", "assistant"), as
// `kvchat-cli template --messages` reads it. Throws kvchat::Error naming the first problem.
std::vector<ChatMessage> parse_chat_messages(std::string_view json);

// An answer split where a thinking model closed its reasoning: the text up to "</think>" (without
// an opening "<think>", which a generation prompt may already hold) and the answer after it.
struct ThinkingSplit {
    bool has_thinking = false;
    std::string thinking;  // the reasoning, newlines around it trimmed
    std::string answer;    // what follows "</think>", leading newlines trimmed
};
ThinkingSplit split_thinking(std::string_view content);

class ChatTemplate {
public:
    // The model's own template when it is recognised; without a template, the format of the
    // model's architecture (Gemma 3: Gemma; Llama: Llama 2; Mistral: Mistral). An unrecognised
    // template gives the plain format and a notice() saying so.
    static ChatTemplate for_model(const Model& model);
    ChatTemplate(ChatFormat format, const Tokenizer& tokenizer);  // the family's usual details
    ChatTemplate(const TemplateDetails& details, const Tokenizer& tokenizer);
    // Text only (render_text, refusal), for a template whose vocabulary is not loaded: bos and eos
    // as the vocabulary spells them ("" where it has none).
    ChatTemplate(const TemplateDetails& details, std::string bos_text, std::string eos_text);
    // Text only, from a GGUF's metadata (its template, and its BOS and EOS pieces): works where the
    // vocabulary or the architecture is not one kvchat loads. A GGUF without a template gives the
    // plain format with a notice.
    static ChatTemplate text_from_gguf(const GgufFile& file);

    ChatFormat format() const { return details_.format; }
    const TemplateDetails& details() const { return details_; }
    // Empty, or a sentence for the user about the choice made (an unrecognised template).
    const std::string& notice() const { return notice_; }
    // The day a dated header names (Llama 3.2); by default the local date when rendering.
    void set_date(int year, int month, int day);

    // The messages, then (with add_generation_prompt) the opening of the assistant's reply, as ids.
    // Answers are rendered as the next turn renders them (see the top of this file). Needs the
    // tokenizer (throws kvchat::Error on a text-only template).
    RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
    // The prompt text exactly as the model's Jinja template renders it, bos_token where it writes one.
    std::string render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
    // Empty, or the message the template raises for these messages (Mistral's role order).
    std::string refusal(const std::vector<ChatMessage>& messages) const;

    // An answer's ids read from a file, if they may be rendered: no turn marker or end of reply
    // among them (control ids decode to nothing, so a hostile list could slip a turn in unseen;
    // other control ids, which a model may write, are kept).
    std::vector<int32_t> answer_ids_from_file(std::vector<int32_t> ids) const;

    // Ids that end an assistant reply besides EOS and the tokenizer's end-of-turn: the family's
    // end markers that the vocabulary holds.
    const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
    // Text that ends a reply in formats without an end marker (plain).
    const std::vector<std::string>& stop_strings() const { return stop_strings_; }

private:
    // A unit of rendering: text, a marker (by id where the vocabulary has it as a special token,
    // else as text), the vocabulary's BOS or EOS, or an answer's own ids (with its text).
    struct Piece {
        enum Kind { Text, Marker, Bos, Eos, Ids } kind = Text;
        std::string text;
        std::vector<int32_t> ids;
    };
    // The pieces of each message, before them (BOS) and after them (the generation prompt).
    struct Layout {
        std::vector<Piece> head;
        std::vector<std::vector<Piece>> messages;
        std::vector<Piece> prompt;
        bool system_first = false;  // messages[0]'s pieces are a system message at the very start
    };
    enum class Answers { AsJinja, AsNextTurn };
    Layout layout(const std::vector<ChatMessage>& messages, bool add_generation_prompt, Answers answers) const;
    // An assistant message's text as the template writes it: its generated ids where they spell it.
    Piece reply(const ChatMessage& m, std::string text) const;
    int32_t marker_id(std::string_view piece) const;  // -1 when the vocabulary lacks it as a special token
    void emit(std::vector<int32_t>& out, const std::vector<Piece>& pieces) const;
    std::string today() const;

    TemplateDetails details_;
    const Tokenizer* tok_ = nullptr;
    std::string bos_text_, eos_text_;
    std::string notice_;
    std::vector<int32_t> stop_tokens_;
    std::vector<int32_t> turn_markers_;  // ids answer_ids_from_file refuses
    std::vector<std::string> stop_strings_;
    int date_[3] = {0, 0, 0};  // year, month, day set by set_date; 0: today
};

}  // namespace kvchat
