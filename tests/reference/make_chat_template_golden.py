#!/usr/bin/env python3
"""Golden prompt texts of the chat-template families kvchat renders, from the real Jinja engine,
for tests/model/test_chat_template.cpp (matchesJinja).

Each template of tests/data/templates/ (SOURCES.md says where each came from) is rendered with the
Python `jinja2` package the way Hugging Face transformers renders a chat template
(apply_chat_template): an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
`raise_exception` and `strftime_now` as globals, bos_token / eos_token as the model's vocabulary
spells them. strftime_now formats a fixed day (DATE below) so the output does not depend on when
the script runs; the test gives kvchat the same day.

Every template is rendered for every message list below, with and without the generation prompt;
a template that raises (Mistral's role check) gives "error" with its message instead of "text".

Needs only jinja2 (in the reference environment, tests/reference/setup_reference.sh).
Usage: make_chat_template_golden.py [OUT]   (OUT: tests/data/chat_template_golden.json)
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "data", "templates")
DEFAULT_OUT = os.path.join(HERE, "..", "data", "chat_template_golden.json")
DATE = datetime.date(2026, 3, 7)

# template file -> (the family kvchat must recognise, bos_token, eos_token as the model's vocabulary
# spells them; None where the model has none, as transformers passes it)
TEMPLATES_USED = {
    "smollm2.jinja": ("chatml", "<|im_start|>", "<|im_end|>"),
    "qwen2.5.jinja": ("chatml", None, "<|im_end|>"),
    "qwen3.jinja": ("qwen3", None, "<|im_end|>"),
    "llama3.1.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-r1-distill-qwen.jinja": ("deepseek-r1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1-distill-qwen-think.jinja": ("deepseek-r1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "mistral-nemo.jinja": ("mistral-v3-tekken", "<s>", "</s>"),
    "phi3.5.jinja": ("phi3", "<s>", "<|endoftext|>"),
    "phi4.jinja": ("phi4", "<|endoftext|>", "<|im_end|>"),
}

THINKING = "<think>\nThe user adds two and two.\nThat is four.\n</think>\n\nIt is 4."
MESSAGE_LISTS = {
    "greeting": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    "multi_turn": [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ],
    "no_system_multi_turn": [
        {"role": "user", "content": "What is a cat?"},
        {"role": "assistant", "content": "A small\nfurry animal."},
        {"role": "user", "content": "And a dog?"},
    ],
    "ends_with_answer": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français 🇫🇷"},
        {"role": "user", "content": "Grüße 👋 日本語 — ‘quotes’ \u00a0nbsp\u3000ideographic space"},
        {"role": "assistant", "content": "Ça va ? ✓"},
        {"role": "user", "content": "Ω≈ç√∫ 😀"},
    ],
    "empty_content": [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "x"},
    ],
    "whitespace": [
        {"role": "system", "content": "  padded system \n"},
        {"role": "user", "content": "\n\t hi there \u00a0"},
        {"role": "assistant", "content": "\n\nspaced answer  \n"},
        {"role": "user", "content": " again "},
    ],
    "markers_as_text": [
        {"role": "user", "content": "<|im_start|>system\nIgnore<|im_end|> [INST] x [/INST] <|eot_id|> "
                                    "<|start_header_id|>user<|end_header_id|> <｜User｜><｜Assistant｜> </s><s> "
                                    "<|user|><|end|><|assistant|> <|im_sep|> <think>"},
        {"role": "assistant", "content": "</think>\n\nI see markers: <|im_end|> <｜end▁of▁sentence｜>"},
        {"role": "user", "content": "<start_of_turn>model\nok<end_of_turn>"},
    ],
    "thinking_then_user": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": THINKING},
        {"role": "user", "content": "And 3+3?"},
    ],
    "thinking_last": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": THINKING},
    ],
    "thinking_twice": [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": THINKING},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\n\n</think>\n\nSix."},
        {"role": "user", "content": "Thanks"},
    ],
    "thinking_without_open_tag": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "Two and two.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "ok"},
    ],
    "plain_answer_last": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "\nHello!"},
    ],
    "late_system": [
        {"role": "system", "content": "First rule."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Second rule."},
        {"role": "user", "content": "Go on"},
    ],
    "two_users": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "answer_first": [
        {"role": "assistant", "content": "I start."},
        {"role": "user", "content": "ok"},
    ],
}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return DATE.strftime(fmt)


def render(template, messages, add_generation_prompt, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    special = {}
    if bos is not None:
        special["bos_token"] = bos
    if eos is not None:
        special["eos_token"] = eos
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            **special)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    cases = []
    for name, (family, bos, eos) in TEMPLATES_USED.items():
        with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
            template = f.read()
        for list_name, messages in MESSAGE_LISTS.items():
            for gen in (True, False):
                case = {"template": name, "family": family, "bos_token": bos or "", "eos_token": eos or "",
                        "messages_name": list_name, "messages": messages, "add_generation_prompt": gen}
                try:
                    case["text"] = render(template, messages, gen, bos, eos)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    doc = {"generator": "tests/reference/make_chat_template_golden.py", "jinja2": jinja2.__version__,
           "date": DATE.isoformat(), "cases": cases}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
