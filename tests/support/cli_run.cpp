#include "support/cli_run.h"

#include "support/test_paths.h"

#include <QProcess>

namespace kvchat::test {

CliRun run_cli(const QStringList& args, int timeout_ms) {
    QProcess p;
    p.start(QString::fromUtf8(cli_path()), args);
    if (!p.waitForFinished(timeout_ms)) return {-1, {}, "timeout"};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

}  // namespace kvchat::test
