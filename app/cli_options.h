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

struct Loaded {
    std::unique_ptr<kvchat::Model> model;
    std::unique_ptr<kvchat::Backend> backend;
};
// The model of --model (or the default) on the backend of --device (default cpu; a GPU that
// cannot be used falls back to the CPU with a notice on stderr) with --threads host threads.
Loaded load_model(const Options& o);

double rss_mib();

}  // namespace kvchat::cli
