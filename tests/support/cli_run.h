#pragma once
// Runs the built kvchat-cli as a user would and collects what it printed.
#include <QString>
#include <QStringList>

namespace kvchat::test {

struct CliRun {
    int code;  // exit code; -1 on timeout, -2 when it crashed
    QString out;
    QString err;
};

CliRun run_cli(const QStringList& args, int timeout_ms = 120000);

}  // namespace kvchat::test
