#include "engine/api/request_queue.h"

namespace kvchat::api {

std::unique_ptr<RequestQueue::Place> RequestQueue::enter() {
    std::lock_guard<std::mutex> lock(m_);
    if (admitted_ >= 1 + max_waiting_) return nullptr;
    ++admitted_;
    return std::unique_ptr<Place>(new Place(*this, next_ticket_++));
}

int RequestQueue::admitted() const {
    std::lock_guard<std::mutex> lock(m_);
    return admitted_;
}

void RequestQueue::Place::wait() {
    std::unique_lock<std::mutex> lock(q_.m_);
    q_.cv_.wait(lock, [&] { return q_.serving_ == ticket_; });
}

RequestQueue::Place::~Place() { q_.release(ticket_); }

void RequestQueue::release(uint64_t ticket) {
    {
        std::lock_guard<std::mutex> lock(m_);
        --admitted_;
        if (ticket != serving_) {
            released_.insert(ticket);  // left before its turn: skipped when the turn comes
            return;
        }
        ++serving_;
        while (released_.erase(serving_)) ++serving_;
    }
    cv_.notify_all();
}

}  // namespace kvchat::api
