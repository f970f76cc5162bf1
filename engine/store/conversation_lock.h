#pragma once
// One writer per conversation across processes: an exclusive flock(2) on a lock file beside the
// conversation's snapshot, held while a turn, an edit, a regeneration or a strategy switch
// changes it. The kernel drops the lock when its process ends, however it ends (kill -9
// included), so a crashed writer never leaves a conversation locked. A second writer waits up to
// `wait` and is then refused with a message naming the conversation.
#include <chrono>
#include <string>

namespace kvchat {

class ConversationLock {
public:
    // Takes the lock on `path` (created when missing, readable by its owner only). `title` names
    // the conversation in the refusal. Throws kvchat::Error when another process still holds it
    // after `wait`, or when the lock file cannot be opened.
    ConversationLock(const std::string& path, const std::string& title,
                     std::chrono::milliseconds wait = std::chrono::milliseconds(2000));
    ~ConversationLock();
    ConversationLock(const ConversationLock&) = delete;
    ConversationLock& operator=(const ConversationLock&) = delete;

private:
    int fd_ = -1;
};

}  // namespace kvchat
