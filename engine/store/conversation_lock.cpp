#include "engine/store/conversation_lock.h"

#include "engine/common/quoted.h"
#include "engine/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace kvchat {

ConversationLock::ConversationLock(const std::string& path, const std::string& title, std::chrono::milliseconds wait) {
    // O_NOFOLLOW and O_NONBLOCK: a planted symlink or FIFO must neither redirect nor block us.
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd_ < 0) {
        const int err = errno;
        throw Error("cannot lock conversation " + in_quotes(title) + ": cannot open " + in_quotes(path) + ": " +
                    std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        throw Error("cannot lock conversation " + in_quotes(title) + ": " + in_quotes(path) + " is not a regular file");
    }
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err == EINTR) continue;
        if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) {
            ::close(fd_);
            fd_ = -1;
            if (err == EWOULDBLOCK)
                throw Error("conversation " + in_quotes(title) +
                            " is being changed by another kvchat process (the window or another kvchat-cli); "
                            "try again when its answer is done");
            throw Error("cannot lock conversation " + in_quotes(title) + " (" + in_quotes(path) + "): " + std::strerror(err));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

ConversationLock::~ConversationLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the lock
}

}  // namespace kvchat
