#include "soak/soak_support.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

extern char** environ;

namespace kvchat::soak {

std::string ProcessResult::status() const {
    if (timed_out) return "timeout";
    if (term_signal != 0) return "signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
    return "exit " + std::to_string(exit_code);
}

ProcessResult run_process(const ProcessOptions& o) {
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        const std::string s(*e);
        bool replaced = false;
        for (const auto& [k, v] : o.env) replaced |= s.rfind(k + "=", 0) == 0;
        if (!replaced) env_strings.push_back(s);
    }
    for (const auto& [k, v] : o.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o.args;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const auto start = std::chrono::steady_clock::now();
    // Signals wait until the child has dropped the parent's handlers (a test framework's), which
    // must not act for it before exec.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t pid = ::fork();
    if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGSEGV, SIGABRT, SIGQUIT, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
        ::dup2(out_pipe[1], 1);
        ::dup2(err_pipe[1], 2);
        const int null_in = ::open("/dev/null", O_RDONLY);
        if (null_in >= 0) ::dup2(null_in, 0);
        if (o.file_size_limit > 0) {
            ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG, as one on a full disk does
            rlimit rl{};
            ::getrlimit(RLIMIT_FSIZE, &rl);
            rl.rlim_cur = o.file_size_limit;
            ::setrlimit(RLIMIT_FSIZE, &rl);
        }
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);

    ProcessResult r;
    auto elapsed_ms = [&] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_fds = 2;
    bool killed_for_timeout = false;
    while (open_fds > 0) {
        const double now = elapsed_ms();
        int wait = 200;
        if (o.signal != 0 && !r.signal_sent) {
            if (now >= o.signal_after_ms) {
                r.signal_sent = ::kill(pid, o.signal) == 0;
                continue;
            }
            wait = std::min(wait, static_cast<int>(o.signal_after_ms - now) + 1);
        }
        if (!killed_for_timeout && now >= o.timeout_ms) {
            ::kill(pid, SIGKILL);
            killed_for_timeout = true;
        }
        const int n = ::poll(fds, 2, wait);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got > 0) {
                sinks[i]->append(buf, static_cast<size_t>(got));
            } else if (got == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.timed_out = killed_for_timeout;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
    return r;
}

const DbConversation* DbView::conversation(const std::string& title) const {
    for (const DbConversation& c : conversations)
        if (c.title == title) return &c;
    return nullptr;
}

const DbPrefix* DbView::prefix(const std::string& name) const {
    for (const DbPrefix& p : prefixes)
        if (p.name == name) return &p;
    return nullptr;
}

namespace {

struct Query {
    sqlite3_stmt* st = nullptr;
    Query(sqlite3* db, const char* sql) {
        if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK)
            throw std::runtime_error(std::string("prepare: ") + sqlite3_errmsg(db) + " in " + sql);
    }
    ~Query() { sqlite3_finalize(st); }
    bool next() {
        const int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw std::runtime_error(std::string("step: ") + sqlite3_errstr(rc));
    }
    std::string text(int i) const {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, i));
        return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st, i))) : std::string();
    }
    int64_t integer(int i) const { return sqlite3_column_int64(st, i); }
    std::vector<int32_t> ids(int i) const {
        const auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(st, i));
        const int n = sqlite3_column_bytes(st, i);
        std::vector<int32_t> out;
        for (int k = 0; p && k + 3 < n; k += 4)
            out.push_back(static_cast<int32_t>(uint32_t(p[k]) | uint32_t(p[k + 1]) << 8 | uint32_t(p[k + 2]) << 16 |
                                               uint32_t(p[k + 3]) << 24));
        return out;
    }
};

}  // namespace

DbView read_db_with(const std::string& path, int flags);

DbView read_db(const std::string& path) {
    DbView v = read_db_with(path, SQLITE_OPEN_READONLY);
    // A killed program's WAL or journal must be recovered before anything can be read, which a
    // read-only connection cannot do: then as any program opening it would.
    if (!v.error.empty()) v = read_db_with(path, SQLITE_OPEN_READWRITE);
    return v;
}

DbView read_db_with(const std::string& path, int flags) {
    DbView v;
    if (!std::filesystem::exists(path)) return v;
    v.exists = true;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
        v.error = std::string("open: ") + (db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return v;
    }
    sqlite3_busy_timeout(db, 10000);
    try {
        sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
        {
            Query q(db, "PRAGMA integrity_check");
            while (q.next()) v.integrity += (v.integrity.empty() ? "" : "; ") + q.text(0);
        }
        {
            // (The table appears with the first row of an AUTOINCREMENT table.)
            Query exists(db, "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'");
            Query q(db, exists.next() ? "SELECT name, seq FROM sqlite_sequence" : "SELECT '', 0 WHERE 0");
            while (q.next()) {
                if (q.text(0) == "conversations") v.last_conversation_id = q.integer(1);
                if (q.text(0) == "prefixes") v.last_prefix_id = q.integer(1);
            }
        }
        {
            // A program killed before it made the tables leaves an empty database: nothing in it.
            Query tables(db, "SELECT 1 FROM sqlite_master WHERE name = 'conversations'");
            if (!tables.next()) {
                sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
                sqlite3_close(db);
                return v;
            }
        }
        {
            Query q(db, "SELECT id, title, cache_spec, coalesce(snapshot, '') FROM conversations ORDER BY id");
            while (q.next()) v.conversations.push_back({q.integer(0), q.text(1), q.text(2), q.text(3), {}});
        }
        for (DbConversation& c : v.conversations) {
            Query q(db, "SELECT role, content, token_ids FROM messages WHERE conversation_id = ?1 ORDER BY ordinal");
            sqlite3_bind_int64(q.st, 1, c.id);
            while (q.next()) c.messages.push_back({q.text(0), q.text(1), q.ids(2)});
        }
        {
            Query q(db, "SELECT id, name, coalesce(snapshot, ''), tokens FROM prefixes ORDER BY name");
            while (q.next()) {
                DbPrefix p{q.integer(0), q.text(1), q.text(2), {}, q.ids(3)};
                Query m(db, "SELECT role, content FROM prefix_messages WHERE prefix_id = ?1 ORDER BY ordinal");
                sqlite3_bind_int64(m.st, 1, q.integer(0));
                while (m.next()) p.messages.push_back({m.text(0), m.text(1), {}});
                v.prefixes.push_back(std::move(p));
            }
        }
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    } catch (const std::exception& e) {
        v.error = e.what();
    }
    sqlite3_close(db);
    return v;
}

std::vector<std::string> leftover_files(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) return out;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
         it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.find(".tmp") != std::string::npos || name.find(".partial") != std::string::npos ||
            name.find("-journal") != std::string::npos || name.rfind("kvchat-spill-", 0) == 0)
            out.push_back(it->path().string());
    }
    return out;
}

}  // namespace kvchat::soak
