#!/usr/bin/env python3
"""Time to first token over a 10-turn chat, and after a server restart: kvchat-cli serve against
llama.cpp's OpenAI-compatible server (llama-cpp-python's `python -m llama_cpp.server`), the same
model (SmolLM2-135M-Instruct Q4_1), the same client script (the `openai` package, streaming,
greedy), the same thread count.

Each turn's request carries the whole history, as chat clients send it. Turn k's time to first
token is from the request to the first streamed content piece. After turn 10 each server is
stopped and started again, and turn 11 is timed: kvchat reloads the conversation's cache from its
snapshot on disk; llama.cpp's server starts with an empty cache. Prints a table (milliseconds).

Needs the reference environment (tests/reference/setup_reference.sh; its pip may add the server's
extras: pip install 'llama-cpp-python[server]' without rebuilding llama_cpp), the built
kvchat-cli and the installed chat model. Timings on a busy machine are noise: run it on a quiet one.

Run: ~/.cache/kvchat/reference-venv/bin/python tests/reference/bench_api_ttft.py \
         --cli build/bin/kvchat-cli [--threads 4] [--max-tokens 32]
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import openai

DATA = os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share"))
MODEL = os.path.join(DATA, "kvchat", "models", "smollm2-135m-instruct-q4_1.gguf")
MODEL_ID = "smollm2-135m-instruct-q4_1"  # kvchat names a model by its file; llama.cpp by --model_alias
QUESTIONS = ["Hello! Who are you?", "What is a cat?", "And a dog?", "Which one is bigger?",
             "Name a famous painter.", "What did he paint?", "Tell me a colour.", "Why is the sky blue?",
             "Say something kind.", "Thank you. Summarise our chat in one line.", "One more: what is 2 + 2?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited before it was ready")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=30)
            client.models.list()
            return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError("the server did not come up")


class KvchatServer:
    name = "kvchat-cli serve"

    def __init__(self, args, tmp):
        self.args, self.db = args, os.path.join(tmp, "bench.sqlite")

    def start(self):
        self.port = free_port()
        self.proc = subprocess.Popen([self.args.cli, "serve", "--db", self.db, "--port", str(self.port),
                                      "--threads", str(self.args.threads), "--model", MODEL],
                                     stderr=subprocess.DEVNULL)
        wait_ready(self.port, self.proc)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


class LlamaCppServer:
    name = "llama_cpp.server"

    def __init__(self, args, tmp):
        self.args = args

    def start(self):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", MODEL, "--n_ctx", "4096", "--model_alias", MODEL_ID,
                                      "--n_threads", str(self.args.threads), "--host", "127.0.0.1",
                                      "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(self.port, self.proc)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def timed_turn(port, history, question, max_tokens):
    """One streamed turn: (ms to the first content piece, usage.prompt_tokens or None, cached or None)."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=600)
    history.append({"role": "user", "content": question})
    t0 = time.perf_counter()
    ttft, text, usage = None, [], None
    stream = client.chat.completions.create(model=MODEL_ID, messages=history, temperature=0, max_tokens=max_tokens,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                if ttft is None:
                    ttft = (time.perf_counter() - t0) * 1000.0
                text.append(c.delta.content)
    history.append({"role": "assistant", "content": "".join(text)})
    cached = None
    if usage is not None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens
    return ttft, (usage.prompt_tokens if usage else None), cached


def run(server, args):
    rows = []
    history = []
    server.start()
    try:
        for q in QUESTIONS[:10]:
            rows.append(timed_turn(server.port, history, q, args.max_tokens))
        server.stop()
        server.start()
        rows.append(timed_turn(server.port, history, QUESTIONS[10], args.max_tokens))
    finally:
        server.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {s.name: run(s, args) for s in (KvchatServer(args, tmp), LlamaCppServer(args, tmp))}
    kv, ll = results["kvchat-cli serve"], results["llama_cpp.server"]
    print(f"time to first token (ms), SmolLM2-135M-Instruct Q4_1, {args.threads} threads, greedy, "
          f"{args.max_tokens} tokens per answer, whole history per request")
    print(f"{'turn':>16} {'prompt tok':>10} {'kvchat cached':>13} {'kvchat ms':>10} {'llama.cpp ms':>12}")
    for i, (a, b) in enumerate(zip(kv, ll), start=1):
        label = str(i) if i <= 10 else "11 after restart"
        fmt = lambda v: "-" if v is None else f"{v:.1f}"
        print(f"{label:>16} {a[1] if a[1] is not None else '-':>10} {a[2] if a[2] is not None else '-':>13} "
              f"{fmt(a[0]):>10} {fmt(b[0]):>12}")


if __name__ == "__main__":
    main()
