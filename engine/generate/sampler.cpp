#include "engine/generate/sampler.h"

#include "engine/compute/logit_select.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace kvchat {

void validate(const SamplerConfig& c) {
    if (c.greedy) return;
    if (!(c.temperature >= 0.0f && c.temperature <= 100.0f)) throw Error("--temp must be between 0 and 100");
    if (c.top_k < 0) throw Error("--top-k must be 0 (off) or a positive count");
    if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) throw Error("--top-p must be in (0, 1]");
    if (!(c.min_p >= 0.0f && c.min_p < 1.0f)) throw Error("--min-p must be in [0, 1)");
    if (!(c.repetition_penalty > 0.0f && c.repetition_penalty <= 100.0f))
        throw Error("--repeat-penalty must be in (0, 100]");
}

Sampler::Sampler(const SamplerConfig& c) : c_(c), rng_(c.seed) {}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& context) {
    const float* l = logits;
    if (c_.repetition_penalty != 1.0f) {
        work_.assign(logits, logits + n_vocab);
        l = work_.data();
        std::unordered_set<int32_t> seen(context.begin(), context.end());
        for (int32_t t : seen) {
            if (t < 0 || t >= n_vocab) continue;
            float& v = work_[static_cast<size_t>(t)];
            v = v > 0.0f ? v / c_.repetition_penalty : v * c_.repetition_penalty;
        }
    }
    // Greedy (or temperature 0): the first of the largest logits.
    if (c_.greedy || c_.temperature <= 0.0f) return static_cast<int32_t>(first_max_index(l, n_vocab));

    const float inv_t = 1.0f / c_.temperature;
    // Candidates in descending order (logit, then the smaller id): with top-k only the k best.
    if (c_.top_k > 0) {
        top_k_scaled(l, n_vocab, inv_t, std::min<int64_t>(c_.top_k, n_vocab), cand_);
    } else {
        cand_.clear();
        cand_.reserve(static_cast<size_t>(n_vocab));
        for (int64_t i = 0; i < n_vocab; ++i) cand_.emplace_back(l[i] * inv_t, static_cast<int32_t>(i));
        auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }

    // Softmax over the survivors.
    const float mx = cand_.front().first;
    double sum = 0.0;
    for (auto& c : cand_) {
        c.first = std::exp(c.first - mx);
        sum += c.first;
    }
    for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);

    if (c_.top_p < 1.0f) {
        double cum = 0.0;
        size_t keep = cand_.size();
        for (size_t i = 0; i < cand_.size(); ++i) {
            cum += cand_[i].first;
            if (cum >= c_.top_p) {
                keep = i + 1;
                break;
            }
        }
        cand_.resize(keep);
    }
    if (c_.min_p > 0.0f) {
        const float floor = c_.min_p * cand_.front().first;
        size_t keep = 1;
        while (keep < cand_.size() && cand_[keep].first >= floor) ++keep;
        cand_.resize(keep);
    }
    double total = 0.0;
    for (auto& c : cand_) total += c.first;
    std::uniform_real_distribution<double> uni(0.0, total);
    double r = uni(rng_);
    for (auto& c : cand_) {
        r -= c.first;
        if (r <= 0.0) return c.second;
    }
    return cand_.back().second;
}

}  // namespace kvchat
