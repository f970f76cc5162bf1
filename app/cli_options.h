#pragma once
// Command-line options shared by kvchat-cli's commands: `--name value` pairs, flags and
// repeatable options, and typed readers that name the option in their errors.
#include "engine/compute/backend.h"
#include "engine/generate/sampler.h"
#include "engine/model/model.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat::cli {

struct Options {
    std::string command;
    std::vector<std::string> positional;  // words after the command (e.g. `prefix rename OLD NEW`)
    std::map<std::string, std::string> values;
    std::set<std::string> flags;
    std::map<std::string, std::vector<std::string>> repeated;  // --stop may be given many times

    bool has(const std::string& name) const { return values.count(name) > 0; }
    bool flag(const std::string& name) const { return flags.count(name) > 0; }
    std::string str(const std::string& name, const std::string& fallback = {}) const;
    long long integer(const std::string& name, long long fallback, long long lo, long long hi) const;
    double number(const std::string& name, double fallback) const;
};

// Options that take a value, flags, and options that may repeat; anything else starting with
// '-' is refused with a message naming it.
Options parse(const std::vector<std::string>& args);

kvchat::SamplerConfig sampling_options(const Options& o);
// The same over `base` (a chat's saved sampling settings): options given win, the rest stay base's.
kvchat::SamplerConfig sampling_options(const Options& o, const kvchat::SamplerConfig& base);

struct Loaded {
    std::unique_ptr<kvchat::Model> model;
    std::unique_ptr<kvchat::Backend> backend;
};
// The model of --model (or the default) on the backend of --device (default cpu; a GPU that
// cannot be used falls back to the CPU with a notice on stderr) with --threads host threads.
Loaded load_model(const Options& o);

double rss_mib();

// --stop's escapes, as llama.cpp's tools read them: \n \r \t \' \" \\ \a \b \f \v \0 and
// \xHH; a backslash before anything else stays as typed. The shell passes "\n\n" as a backslash
// and an n twice, and a stop string is meant to be the newlines.
std::string process_escapes(std::string_view text);

// Text for the terminal: every control character (C0 but the ones `keep` lists, DEL, and the C1
// controls U+0080..U+009F) written as \xHH or \u00HH, and (when `backslash`) the backslash as \\,
// so a title or name read from the database cannot move the cursor, retitle or clear the user's
// terminal.
std::string escape_controls(std::string_view text, std::string_view keep = {}, bool backslash = true);
// One field of a tab-separated line: escape_controls with \t, \n and \r written as such.
std::string tsv_field(std::string_view text);

}  // namespace kvchat::cli
