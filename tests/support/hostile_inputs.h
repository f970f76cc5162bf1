#pragma once
// What the fuzzers (tests/fuzz) do with one input, shared with test_fuzz_corpora, which replays
// every committed corpus and regression input through the same code in the ordinary test run.
// Each function hands `bytes` to one reader the way a hostile file or typed text reaches it; a
// refusal (kvchat::Error) is fine, anything else that goes wrong aborts (a broken invariant) or
// is caught by the sanitizers. They return true when the input was accepted.
#include "engine/cache/cache_layer.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {
class Model;
}

namespace kvchat::test {

// The tiny two-layer Gemma 3 model (one sliding, one global layer) the snapshot and chat
// template inputs are read for; written once per process into the temp folder.
const Model& hostile_input_model();

// A cache snapshot file with these bytes, loaded for hostile_input_model(); accepted ones are
// used (telemetry, checkpoints restored, cropped, saved again and reloaded identically).
bool feed_snapshot(std::string_view bytes);
// The same after rewriting every section's CRC-32C to match its payload, so that mutations reach
// the parsers behind the checksum.
bool feed_snapshot_with_fixed_crcs(std::string_view bytes);

// A cache strategy spec as typed: parsed, printed back and parsed again (must be the same spec),
// and split as a list.
bool feed_cache_spec(std::string_view bytes);

// A conversation for the chat template renderer: byte 0 picks the format, byte 1 the generation
// prompt, the rest is messages separated by '\x1e', each starting with its role byte. The render
// must be prefix-stable and its message starts consistent. The whole input is also offered to
// recognise_chat_template as a Jinja template.
bool feed_chat_template(std::string_view bytes);

// A database file with these bytes opened as the store (in a fresh folder): accepted ones are
// listed, searched, read message by message and written to.
bool feed_store_database(std::string_view bytes);

}  // namespace kvchat::test
