#include "engine/chat/chat_template.h"

#include <algorithm>

#include "engine/error.h"

namespace kvchat {

std::string_view chat_format_name(ChatFormat f) {
    switch (f) {
        case ChatFormat::Gemma: return "gemma";
        case ChatFormat::Llama2: return "llama2";
        case ChatFormat::ChatML: return "chatml";
        case ChatFormat::Mistral: return "mistral";
        case ChatFormat::Zephyr: return "zephyr";
        case ChatFormat::Plain: return "plain";
    }
    return "plain";
}

ChatFormat recognise_chat_template(std::string_view jinja) {
    auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
    // Most specific markers first: Llama 2 and Mistral both write [INST], only Llama 2 <<SYS>>.
    if (has("<start_of_turn>")) return ChatFormat::Gemma;
    if (has("<|im_start|>")) return ChatFormat::ChatML;
    if (has("<|user|>") && has("<|assistant|>")) return ChatFormat::Zephyr;
    if (has("[INST]") && has("<<SYS>>")) return ChatFormat::Llama2;
    if (has("[INST]")) return ChatFormat::Mistral;
    return ChatFormat::Plain;
}

ChatTemplate ChatTemplate::for_model(const Model& model) {
    const std::string& jinja = model.chat_template();
    ChatFormat f;
    std::string notice;
    if (!jinja.empty()) {
        f = recognise_chat_template(jinja);
        if (f == ChatFormat::Plain)
            notice = "the model's chat template is not one kvchat recognises (Gemma, Llama 2, ChatML, Mistral, "
                     "Zephyr); using a plain \"User:\" / \"Assistant:\" format";
    } else if (model.config().arch == Architecture::Gemma3) {
        f = ChatFormat::Gemma;
    } else if (model.config().arch_name == "mistral") {
        f = ChatFormat::Mistral;
    } else {
        f = ChatFormat::Llama2;
    }
    ChatTemplate t(f, model.tokenizer());
    t.notice_ = std::move(notice);
    return t;
}

ChatTemplate::ChatTemplate(ChatFormat format, const Tokenizer& tokenizer) : format_(format), tok_(&tokenizer) {
    auto stop_on = [&](std::string_view piece) {
        const Piece p = marker(piece);
        if (p.id >= 0) stop_tokens_.push_back(p.id);
    };
    switch (format_) {
        case ChatFormat::Gemma: stop_on("<end_of_turn>"); break;
        case ChatFormat::ChatML: stop_on("<|im_end|>"); break;
        case ChatFormat::Plain: stop_strings_ = {"\nUser:"}; break;
        default: break;
    }
    // The markers that give a transcript its turns, and the ends of a reply.
    turn_markers_ = stop_tokens_;
    for (std::string_view m : {"<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>", "[INST]", "[/INST]",
                               "<|user|>", "<|assistant|>", "<|system|>"})
        if (const Piece p = marker(m); p.id >= 0) turn_markers_.push_back(p.id);
    for (int32_t id : {tokenizer.special().eos, tokenizer.special().end_of_turn})
        if (id >= 0) turn_markers_.push_back(id);
}

ChatTemplate::Piece ChatTemplate::marker(std::string_view piece) const {
    const int32_t id = tok_->find_piece(piece);
    if (id >= 0 && tok_->type(id) != TokenType::Normal) return Piece{id, {}, {}};
    return Piece{-1, std::string(piece), {}};
}

ChatTemplate::Piece ChatTemplate::reply(const ChatMessage& m) const {
    // (Ids read from a file are checked for control tokens where they are read: see
    // answer_ids_from_file.)
    const auto in_vocabulary = [this](int32_t id) { return id >= 0 && id < tok_->vocab_size(); };
    if (m.role == Role::Assistant && !m.tokens.empty() && std::all_of(m.tokens.begin(), m.tokens.end(), in_vocabulary) &&
        tok_->decode(m.tokens) == m.content)
        return Piece{-1, {}, m.tokens};
    return Piece{-1, m.content, {}};
}

std::vector<int32_t> ChatTemplate::answer_ids_from_file(std::vector<int32_t> ids) const {
    const auto allowed = [&](int32_t id) {
        return id >= 0 && id < tok_->vocab_size() &&
               std::find(turn_markers_.begin(), turn_markers_.end(), id) == turn_markers_.end();
    };
    if (!std::all_of(ids.begin(), ids.end(), allowed)) ids.clear();
    return ids;
}

void ChatTemplate::emit(std::vector<int32_t>& out, const std::vector<Piece>& pieces) const {
    for (const Piece& p : pieces) {
        if (!p.ids.empty()) {
            out.insert(out.end(), p.ids.begin(), p.ids.end());
        } else if (p.id >= 0) {
            out.push_back(p.id);
        } else if (!p.text.empty()) {
            const std::vector<int32_t> ids = tok_->encode(p.text, false);
            out.insert(out.end(), ids.begin(), ids.end());
        }
    }
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    RenderedChat r;
    const SpecialTokens& sp = tok_->special();
    const Piece bos{sp.bos, {}, {}}, eos{sp.eos, {}, {}};
    const bool always_bos = format_ == ChatFormat::Gemma || format_ == ChatFormat::Llama2 ||
                            format_ == ChatFormat::Mistral;
    if (sp.bos >= 0 && (always_bos || sp.add_bos)) r.tokens.push_back(sp.bos);

    auto text = [](std::string s) { return Piece{-1, std::move(s), {}}; };
    // A system message opens the first user turn in Gemma, Llama 2 and Mistral: its pieces are
    // the turn's opening, and the user message that follows adds only its content.
    bool in_open_turn = false;

    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        r.message_starts.push_back(static_cast<int64_t>(r.tokens.size()));
        std::vector<Piece> p;
        const bool continues_system = in_open_turn && m.role == Role::User;
        if (in_open_turn && m.role != Role::User) {
            // The system text was not followed by a user message: close the turn it opened.
            switch (format_) {
                case ChatFormat::Gemma: p = {marker("<end_of_turn>"), text("\n")}; break;
                case ChatFormat::Llama2:
                case ChatFormat::Mistral: p = {marker("[/INST]")}; break;
                default: break;
            }
        }
        in_open_turn = false;
        switch (format_) {
            case ChatFormat::Gemma:
                if (m.role == Role::System) {
                    p.insert(p.end(), {marker("<start_of_turn>"), text("user\n"), text(m.content + "\n\n")});
                    in_open_turn = true;
                } else if (m.role == Role::User) {
                    if (!continues_system) p.insert(p.end(), {marker("<start_of_turn>"), text("user\n")});
                    p.insert(p.end(), {text(m.content), marker("<end_of_turn>"), text("\n")});
                } else {
                    p.insert(p.end(), {marker("<start_of_turn>"), text("model\n"), reply(m),
                                       marker("<end_of_turn>"), text("\n")});
                }
                break;
            case ChatFormat::Llama2:
            case ChatFormat::Mistral: {
                // [INST] is a control token in Mistral's newer vocabularies and plain text in
                // Llama 2's; as text it is tokenized together with the words around it, as the
                // model saw it in training.
                const bool llama2 = format_ == ChatFormat::Llama2;
                const Piece open = marker("[INST]"), close = marker("[/INST]");
                const std::string sys_text = llama2 ? " <<SYS>>\n" + m.content + "\n<</SYS>>\n\n" : " " + m.content + "\n\n";
                if (m.role == Role::System) {
                    if (i > 0) p.push_back(bos);
                    if (open.id >= 0)
                        p.insert(p.end(), {open, text(sys_text)});
                    else
                        p.push_back(text("[INST]" + sys_text));
                    in_open_turn = true;
                } else if (m.role == Role::User) {
                    std::string body = (continues_system ? "" : " ") + m.content + " ";
                    if (!continues_system) {
                        if (i > 0) p.push_back(bos);
                        if (open.id >= 0) p.push_back(open); else body = "[INST]" + body;
                    }
                    if (close.id >= 0)
                        p.insert(p.end(), {text(body), close});
                    else
                        p.push_back(text(body + "[/INST]"));
                } else {
                    p.insert(p.end(), {reply(m), eos});
                }
                break;
            }
            case ChatFormat::ChatML: {
                const char* role = m.role == Role::System ? "system\n" : m.role == Role::User ? "user\n" : "assistant\n";
                p = {marker("<|im_start|>"), text(role), reply(m), marker("<|im_end|>"), text("\n")};
                break;
            }
            case ChatFormat::Zephyr: {
                const char* role = m.role == Role::System ? "<|system|>" : m.role == Role::User ? "<|user|>" : "<|assistant|>";
                p = {marker(role), text("\n"), reply(m), eos, text("\n")};
                break;
            }
            case ChatFormat::Plain:
                if (m.role == Role::System)
                    p = {text(m.content + "\n\n")};
                else if (m.role == Role::User)
                    p = {text("User: " + m.content + "\n")};
                else
                    p = {text("Assistant:"), text(" " + m.content + "\n")};
                break;
        }
        emit(r.tokens, p);
        if (i == 0 && m.role == Role::System) r.system_end = static_cast<int64_t>(r.tokens.size());
    }

    r.prompt_start = static_cast<int64_t>(r.tokens.size());
    if (add_generation_prompt) {
        std::vector<Piece> p;
        if (in_open_turn) {
            switch (format_) {
                case ChatFormat::Gemma: p = {marker("<end_of_turn>"), text("\n")}; break;
                case ChatFormat::Llama2:
                case ChatFormat::Mistral: p = {marker("[/INST]")}; break;
                default: break;
            }
        }
        switch (format_) {
            case ChatFormat::Gemma: p.insert(p.end(), {marker("<start_of_turn>"), text("model\n")}); break;
            case ChatFormat::ChatML: p.insert(p.end(), {marker("<|im_start|>"), text("assistant\n")}); break;
            case ChatFormat::Zephyr: p.insert(p.end(), {marker("<|assistant|>"), text("\n")}); break;
            case ChatFormat::Plain: p.push_back(text("Assistant:")); break;
            case ChatFormat::Llama2:
            case ChatFormat::Mistral: break;  // the user turn ends with [/INST]; the reply follows
        }
        emit(r.tokens, p);
    }
    return r;
}

}  // namespace kvchat
