#!/usr/bin/env python3
"""kvchat-cli serve driven by the real `openai` Python client (PyPI), as editors and agents use it.

Checks, with the chat model (SmolLM2-135M-Instruct, greedy):
  - streaming and non-streaming answers equal `kvchat-cli chat --greedy` with the same settings
    (stream_options.include_usage gives the usage chunk);
  - a 10-turn conversation whose turn-k request carries the whole history reports
    usage.prompt_tokens_details.cached_tokens >= the previous turn's prompt_tokens;
  - after the server is restarted, the next turn still reports that reuse (the cache came back
    from the conversation's snapshot on disk).

Needs: the built kvchat-cli (--cli PATH), the installed chat model (packaging/kvchat.sh model),
and a Python with `openai`: this interpreter, $KVCHAT_TEST_PYTHON, packaging/kvchat.sh's private
environment (~/.cache/kvchat/model-venv, where `packaging/kvchat.sh test` installs openai) or the
reference environment (~/.cache/kvchat/reference-venv). Without them it exits 77, which CTest
reports as skipped, with the reason.

Run: python3 tests/api/test_openai_client.py --cli build/bin/kvchat-cli   (CTest: test_api_openai)
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
CACHE = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
DATA = os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share"))
MODEL = os.path.join(DATA, "kvchat", "models", "smollm2-135m-instruct-q4_1.gguf")
MODEL_ID = "smollm2-135m-instruct-q4_1"


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def ensure_openai():
    """Re-runs this script under a Python that has `openai` when this one lacks it."""
    try:
        import openai  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("KVCHAT_OPENAI_REEXEC"):
        skip("the `openai` package is missing")
    candidates = [os.environ.get("KVCHAT_TEST_PYTHON", ""),
                  os.path.join(CACHE, "kvchat", "model-venv", "bin", "python"),
                  os.path.join(CACHE, "kvchat", "reference-venv", "bin", "python")]
    for py in candidates:
        if py and os.access(py, os.X_OK) and subprocess.run([py, "-c", "import openai"],
                                                            capture_output=True).returncode == 0:
            env = dict(os.environ, KVCHAT_OPENAI_REEXEC="1")
            os.execve(py, [py] + sys.argv, env)
    skip("no Python with the `openai` package (packaging/kvchat.sh test installs it into "
         f"{os.path.join(CACHE, 'kvchat', 'model-venv')}; or set KVCHAT_TEST_PYTHON)")


class Server:
    """kvchat-cli serve on a free port (--port 0: it prints the port)."""

    def __init__(self, cli, db):
        self.cli, self.db, self.proc, self.port = cli, db, None, None

    def start(self):
        self.proc = subprocess.Popen([self.cli, "serve", "--db", self.db, "--port", "0", "--threads", "2",
                                      "--model", MODEL], stderr=subprocess.PIPE, text=True)
        line = ""
        deadline = time.time() + 300
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"http://[^:]+:(\d+)/v1", line)
            if m:
                self.port = int(m.group(1))
                return self
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError(f"kvchat-cli serve did not start: {line}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        self.proc = None

    def client(self):
        import openai
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="unused", timeout=600)


failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def cli_chat(cli, db, title, message, max_tokens):
    out = subprocess.run([cli, "chat", "--db", db, "--conversation", title, "--message", message, "--greedy",
                          "-n", str(max_tokens), "--json", "--threads", "2", "--model", MODEL],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"kvchat-cli chat failed: {out.stderr}")
    return json.loads(out.stdout)["text"]


def test_greedy_equals_cli(server, cli, tmp):
    client = server.client()
    questions = ["What is the capital of France?", "Give me three tips for writing clean code."]
    for i, q in enumerate(questions):
        expected = cli_chat(cli, os.path.join(tmp, "cli.sqlite"), f"q{i}", q, 48)
        # response_format "text" is what every answer is: accepted, and it changes nothing.
        r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}],
                                           temperature=0, max_tokens=48, response_format={"type": "text"})
        check(r.choices[0].message.content == expected,
              f"non-streaming answer to {q!r} equals kvchat-cli chat --greedy "
              f"({r.choices[0].message.content!r} vs {expected!r})")
        check(r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0, "usage is reported")
        pieces, usage = [], None
        stream = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}],
                                                temperature=0, max_tokens=48, stream=True,
                                                stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                if c.delta.content:
                    pieces.append(c.delta.content)
        check("".join(pieces) == expected, f"streamed answer to {q!r} equals kvchat-cli chat --greedy")
        check(usage is not None and usage.completion_tokens == r.usage.completion_tokens,
              "the stream ends with a usage chunk (include_usage)")


def test_json_mode_refused(server):
    import openai
    client = server.client()
    try:
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "A JSON object, please"}],
                                       max_tokens=8, response_format={"type": "json_object"})
    except openai.BadRequestError as e:
        check("json_object" in str(e), f"JSON mode is refused by name ({e})")
        return
    check(False, "JSON mode is refused, not answered with free text")


QUESTIONS = ["Hello! Who are you?", "What is a cat?", "And a dog?", "Which one is bigger?",
             "Name a famous painter.", "What did he paint?", "Tell me a colour.", "Why is the sky blue?",
             "Say something kind.", "Thank you. Summarise our chat in one line.", "One more: what is 2 + 2?"]


def turn(client, history, question):
    history.append({"role": "user", "content": question})
    r = client.chat.completions.create(model=MODEL_ID, messages=history, temperature=0, max_tokens=24)
    history.append({"role": "assistant", "content": r.choices[0].message.content})
    details = r.usage.prompt_tokens_details
    return r.usage.prompt_tokens, (details.cached_tokens if details else 0)


def test_ten_turns_and_restart(server):
    client = server.client()
    history = []
    previous_prompt = None
    for k, q in enumerate(QUESTIONS[:10], start=1):
        prompt, cached = turn(client, history, q)
        if previous_prompt is not None:
            check(cached >= previous_prompt,
                  f"turn {k}: cached_tokens {cached} >= the previous turn's prompt_tokens {previous_prompt}")
        previous_prompt = prompt
    server.stop()
    server.start()
    prompt, cached = turn(server.client(), history, QUESTIONS[10])
    check(cached >= previous_prompt,
          f"after a restart: cached_tokens {cached} >= the previous turn's prompt_tokens {previous_prompt}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        skip(f"the chat model is not installed at {MODEL} (packaging/kvchat.sh model)")
    ensure_openai()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.cli, os.path.join(tmp, "api.sqlite")).start()
        try:
            test_greedy_equals_cli(server, args.cli, tmp)
            test_json_mode_refused(server)
            test_ten_turns_and_restart(server)
        finally:
            server.stop()
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
