#include "ui/inspector/traffic_timeline.h"

#include "ui/inspector/byte_size_text.h"

#include <QPainter>

#include <algorithm>
#include <numeric>

namespace kvchat {

TrafficTimeline::TrafficTimeline(QWidget* parent) : InspectorChart("trafficTimeline", parent) {}

void TrafficTimeline::addStep(const CacheTelemetry& t) {
    Step s;
    s.index = next_index_++;
    s.tokens = t.tokens;
    s.moved_in = t.moved_in_step;
    s.moved_out = t.moved_out_step;
    // The telemetry's stall time is a running total; a step's share is what it added (a new or
    // converted cache starts its total again).
    s.stall_ms = last_stall_total_ >= 0 && t.prefetch_stall_ms >= last_stall_total_ ? t.prefetch_stall_ms - last_stall_total_ : 0.0;
    last_stall_total_ = t.prefetch_stall_ms;
    s.layers.reserve(t.layers.size());
    for (const LayerTelemetry& l : t.layers) s.layers.emplace_back(l.moved_in_step, l.moved_out_step);
    steps_.push_back(std::move(s));
    while (static_cast<int>(steps_.size()) > capacity_) steps_.pop_front();
}

void TrafficTimeline::clear() {
    steps_.clear();
    next_index_ = 0;
    last_stall_total_ = -1;
    update();
}

QRectF TrafficTimeline::plotArea() const { return QRectF(60, 16, std::max(40, width() - 66), std::max(30, height() - 48)); }  // (two caption lines below)

double TrafficTimeline::barWidth() const { return plotArea().width() / capacity_; }

// Reads are whole layers and writes often one token's worth, so each direction has its own scale;
// and one step that wrote a whole prefill would flatten the rest, so the scale is the 90th
// percentile (bars above it are cut and capped; hover gives their size).
int64_t TrafficTimeline::scale(bool in) const {
    std::vector<int64_t> v;
    v.reserve(steps_.size());
    for (const Step& s : steps_) v.push_back(in ? s.moved_in : s.moved_out);
    if (v.empty()) return 1;
    const size_t k = std::min(v.size() - 1, v.size() * 9 / 10);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return std::max<int64_t>(1, v[k]);
}

QRectF TrafficTimeline::inBar(size_t i) const {
    const QRectF a = plotArea();
    const double mid = a.center().y(), half = a.height() / 2;
    const double x = a.right() - static_cast<double>(steps_.size() - i) * barWidth();
    const double h = std::min(half, half * static_cast<double>(steps_[i].moved_in) / static_cast<double>(scale(true)));
    return QRectF(x, mid - h, std::max(1.0, barWidth() - 0.5), h);
}

QRectF TrafficTimeline::outBar(size_t i) const {
    const QRectF a = plotArea();
    const double mid = a.center().y(), half = a.height() / 2;
    const double x = a.right() - static_cast<double>(steps_.size() - i) * barWidth();
    const double h = std::min(half, half * static_cast<double>(steps_[i].moved_out) / static_cast<double>(scale(false)));
    return QRectF(x, mid, std::max(1.0, barWidth() - 0.5), h);
}

void TrafficTimeline::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), palette().base());
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    p.setFont(f);
    const QRectF a = plotArea();
    p.fillRect(a, palette().alternateBase());
    p.setPen(QColor(0x90, 0x90, 0x90));
    p.drawLine(QPointF(a.left(), a.center().y()), QPointF(a.right(), a.center().y()));
    const QColor in(0x15, 0x65, 0xc0), out(0xef, 0x6c, 0x00), stall(0xd3, 0x2f, 0x2f);
    const int64_t in_scale = scale(true), out_scale = scale(false);
    for (size_t i = 0; i < steps_.size(); ++i) {
        const QRectF ib = inBar(i), ob = outBar(i);
        p.fillRect(ib, in);
        p.fillRect(ob, out);
        // Cut bars get a black cap.
        if (steps_[i].moved_in > in_scale) p.fillRect(QRectF(ib.left(), ib.top(), ib.width(), 2), Qt::black);
        if (steps_[i].moved_out > out_scale) p.fillRect(QRectF(ob.left(), ob.bottom() - 2, ob.width(), 2), Qt::black);
        if (steps_[i].stall_ms > 0) {
            const QRectF b = inBar(i);
            p.fillRect(QRectF(b.left(), a.top() - 5, b.width(), 4), stall);
        }
    }
    p.setPen(palette().text().color());
    if (!steps_.empty()) {
        p.setPen(in);
        p.drawText(QRectF(0, a.top() - 2, 58, 14), Qt::AlignRight | Qt::AlignTop, byteSizeText(scale(true)));
        p.setPen(palette().text().color());
        p.drawText(QRectF(0, a.center().y() - 7, 58, 14), Qt::AlignRight | Qt::AlignVCenter, "0");
        p.setPen(out);
        p.drawText(QRectF(0, a.bottom() - 12, 58, 14), Qt::AlignRight | Qt::AlignBottom, byteSizeText(scale(false)));
        p.setPen(palette().text().color());
    }
    const int64_t in_total = std::accumulate(steps_.begin(), steps_.end(), int64_t{0}, [](int64_t s, const Step& x) { return s + x.moved_in; });
    const int64_t out_total = std::accumulate(steps_.begin(), steps_.end(), int64_t{0}, [](int64_t s, const Step& x) { return s + x.moved_out; });
    const int stalls = static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& x) { return x.stall_ms > 0; }));
    QString caption = steps_.empty() ? tr("No offload traffic yet (the cache is not offloaded, or no step has run).")
                                     : tr("%1 steps: %2 in (blue, up), %3 out (orange, down), %4 with prefetch stalls (red)")
                                           .arg(steps_.size())
                                           .arg(byteSizeText(in_total), byteSizeText(out_total))
                                           .arg(stalls);
    // Two lines' room: a narrow dock wraps the caption instead of cutting it.
    p.drawText(QRectF(4, height() - 30, width() - 8, 30), Qt::AlignLeft | Qt::AlignBottom | Qt::TextWordWrap, caption);
}

QString TrafficTimeline::toolTipAt(const QPointF& pos) const {
    const QRectF a = plotArea();
    for (size_t i = 0; i < steps_.size(); ++i) {
        const QRectF col(inBar(i).left(), a.top() - 6, barWidth(), a.height() + 6);
        if (!col.contains(pos)) continue;
        const Step& s = steps_[i];
        QString text = tr("step %1 at %L2 tokens: %L3 bytes in, %L4 bytes out, prefetch stall %5 ms")
                           .arg(s.index)
                           .arg(s.tokens)
                           .arg(s.moved_in)
                           .arg(s.moved_out)
                           .arg(s.stall_ms, 0, 'f', 2);
        for (size_t l = 0; l < s.layers.size(); ++l)
            if (s.layers[l].first || s.layers[l].second)
                text += tr("\nlayer %1: %L2 in, %L3 out").arg(l).arg(s.layers[l].first).arg(s.layers[l].second);
        return text;
    }
    return {};
}

}  // namespace kvchat
