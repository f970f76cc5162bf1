#pragma once
// Chat formats: a conversation rendered to token ids the way its model family was trained.
//
// The model's Jinja template (GGUF tokenizer.chat_template or tokenizer_config.json) is never
// executed: it is recognised by the markers that distinguish the families and the family's format
// is rendered natively. Control markers go in by id; text (what the user typed, and the format's
// own words such as "user\n") is tokenized as plain text, so typed "<start_of_turn>" stays text.
//
// Rendering is prefix-stable: the tokens of messages [0, k) never change when later messages are
// added, so a conversation's cache can be reused up to where the transcript changed. Each piece
// of text is tokenized on its own (header, system text, content) for that reason.
#include "engine/model/model.h"
#include "engine/store/store.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

enum class ChatFormat { Gemma, Llama2, ChatML, Mistral, Zephyr, Plain };
std::string_view chat_format_name(ChatFormat f);  // "gemma", "llama2", "chatml", "mistral", "zephyr", "plain"

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(Role r, std::string text, std::vector<int32_t> ids = {})
        : role(r), content(std::move(text)), tokens(std::move(ids)) {}

    Role role = Role::User;
    std::string content;
    // An answer's ids as the model generated them, which is what its cache holds. Rendered in
    // place of its text's tokenization while they decode to exactly `content`: text written back
    // may tokenize differently ("Purchase" as one piece where the model wrote two), and the
    // cache would be recomputed from there.
    std::vector<int32_t> tokens;
};

// The tokens of a rendered conversation and where each message's tokens begin.
struct RenderedChat {
    std::vector<int32_t> tokens;
    std::vector<int64_t> message_starts;  // one per message: the first token that depends on it
    int64_t system_end = 0;    // tokens that depend only on a leading system message (0 when none)
    int64_t prompt_start = 0;  // where the generation prompt begins (== tokens.size() without one)
};

// Which family a Jinja template text belongs to; Plain when no family's markers are found.
ChatFormat recognise_chat_template(std::string_view jinja);

class ChatTemplate {
public:
    // The model's own template when it is recognised; without a template, the format of the
    // model's architecture (Gemma 3: Gemma; Llama: Llama 2; Mistral: Mistral). An unrecognised
    // template gives the plain format and a notice() saying so.
    static ChatTemplate for_model(const Model& model);
    ChatTemplate(ChatFormat format, const Tokenizer& tokenizer);

    ChatFormat format() const { return format_; }
    // Empty, or a sentence for the user about the choice made (an unrecognised template).
    const std::string& notice() const { return notice_; }

    // The messages, then (with add_generation_prompt) the opening of the assistant's reply.
    RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

    // An answer's ids read from a file, if they may be rendered: no turn marker or end of reply
    // among them (control ids decode to nothing, so a hostile list could slip a turn in unseen;
    // other control ids, which a model may write, are kept).
    std::vector<int32_t> answer_ids_from_file(std::vector<int32_t> ids) const;

    // Ids that end an assistant reply besides EOS and the tokenizer's end-of-turn.
    const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
    // Text that ends a reply in formats without an end marker (plain).
    const std::vector<std::string>& stop_strings() const { return stop_strings_; }

private:
    // A unit of rendering: a control id, text tokenized on its own, or an answer's own ids.
    struct Piece {
        int32_t id = -1;
        std::string text;
        std::vector<int32_t> ids;
    };
    // An assistant message's content: its generated ids where they still spell it, else its text.
    Piece reply(const ChatMessage& m) const;
    Piece marker(std::string_view piece) const;  // by id when the vocabulary has it, else text
    void emit(std::vector<int32_t>& out, const std::vector<Piece>& pieces) const;

    ChatFormat format_;
    const Tokenizer* tok_;
    std::string notice_;
    std::vector<int32_t> stop_tokens_;
    std::vector<int32_t> turn_markers_;  // ids answer_ids_from_file refuses
    std::vector<std::string> stop_strings_;
    bool space_prefix_ = false;  // the tokenizer puts a space before each encoded text
};

}  // namespace kvchat
