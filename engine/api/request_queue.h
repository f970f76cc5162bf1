#pragma once
// One request computes at a time; up to max_waiting more wait their turn, first come first
// served; beyond that a request is turned away (the server answers 503 with Retry-After).
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

namespace kvchat::api {

class RequestQueue {
public:
    explicit RequestQueue(int max_waiting) : max_waiting_(max_waiting) {}

    // A request's place: its turn comes when every place taken before it is released.
    class Place {
    public:
        ~Place();
        Place(const Place&) = delete;
        Place& operator=(const Place&) = delete;
        // Blocks until this place is the one computing.
        void wait();

    private:
        friend class RequestQueue;
        Place(RequestQueue& q, uint64_t ticket) : q_(q), ticket_(ticket) {}
        RequestQueue& q_;
        uint64_t ticket_;
    };

    // A place in the queue, or null when one request computes and max_waiting wait already.
    std::unique_ptr<Place> enter();
    // Requests admitted now (computing and waiting).
    int admitted() const;
    int max_waiting() const { return max_waiting_; }

private:
    void release(uint64_t ticket);

    const int max_waiting_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    uint64_t next_ticket_ = 0;
    uint64_t serving_ = 0;        // the ticket whose turn it is
    std::set<uint64_t> released_; // tickets released before their turn came
    int admitted_ = 0;
};

}  // namespace kvchat::api
