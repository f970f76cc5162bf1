#include "ui/inspector/reuse_panel.h"

#include "ui/inspector/byte_size_text.h"

#include <QFontMetrics>
#include <QPainter>

#include <algorithm>

namespace kvchat {

namespace {
QColor color(ReusePanel::Part part) {
    switch (part) {
        case ReusePanel::Part::Prefix: return QColor(0x6a, 0x1b, 0x9a);
        case ReusePanel::Part::Cache: return QColor(0x2e, 0x7d, 0x32);
        case ReusePanel::Part::Computed: return QColor(0x90, 0xa4, 0xae);
    }
    return Qt::black;
}
}  // namespace

ReusePanel::ReusePanel(QWidget* parent) : InspectorChart("reusePanel", parent) {
    QSizePolicy sp = sizePolicy();
    sp.setHeightForWidth(true);
    setSizePolicy(sp);
}

void ReusePanel::setReuse(const std::optional<AnswerFigures>& figures) {
    reuse_ = figures;
    updateGeometry();  // (once a turn: the summary's height may change)
    update();
}

void ReusePanel::setSnapshotBytes(std::optional<int64_t> bytes) {
    snapshotBytes_ = bytes;
    update();
}

int ReusePanel::heightForWidth(int width) const {
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    const QRect text = QFontMetrics(f).boundingRect(QRect(0, 0, std::max(40, width - 8), 10000),
                                                    Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, summary());
    return std::max(70, 26 + text.height() + 6);
}

QString ReusePanel::partName(Part part) {
    switch (part) {
        case Part::Prefix: return tr("from a saved prefix");
        case Part::Cache: return tr("from the conversation's cache");
        case Part::Computed: return tr("computed");
    }
    return {};
}

std::vector<ReusePanel::Segment> ReusePanel::segments() const {
    std::vector<Segment> out;
    if (!reuse_) return out;
    const int64_t prefix = std::max<int64_t>(0, reuse_->prefix_tokens);
    const int64_t cache = std::max<int64_t>(0, reuse_->cached_tokens - prefix);
    const int64_t computed = std::max<int64_t>(0, reuse_->computed_tokens);
    const int64_t total = prefix + cache + computed;
    if (total == 0) return out;
    const QRectF bar(4, 6, std::max(20, width() - 8), 16);
    double x = bar.left();
    for (const auto& [part, n] : {std::pair{Part::Prefix, prefix}, std::pair{Part::Cache, cache}, std::pair{Part::Computed, computed}}) {
        if (n == 0) continue;
        const double w = bar.width() * static_cast<double>(n) / static_cast<double>(total);
        out.push_back({part, n, QRectF(x, bar.top(), w, bar.height())});
        x += w;
    }
    return out;
}

QString ReusePanel::summary() const {
    if (!reuse_) return tr("No turn yet in this conversation.");
    const AnswerFigures& r = *reuse_;
    QString s = tr("Last turn: %L1 prompt tokens from the cache (%L2 of them from a prefix), %L3 computed.")
                    .arg(r.cached_tokens)
                    .arg(r.prefix_tokens)
                    .arg(r.computed_tokens);
    s += "\n";
    if (r.cached_tokens == 0)
        s += tr("Nothing was reused, so no prefill time was saved.");
    else
        s += r.prefill_saved_ms ? tr("Prefill saved ~%1 ms.").arg(*r.prefill_saved_ms, 0, 'f', 0)
                                : tr("Prefill time saved: not measured.");
    s += " ";
    s += snapshotBytes_ ? tr("Snapshot on disk: %1.").arg(byteSizeText(*snapshotBytes_)) : tr("No snapshot on disk yet.");
    return s;
}

void ReusePanel::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), palette().base());
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    p.setFont(f);
    p.fillRect(QRectF(4, 6, std::max(20, width() - 8), 16), palette().alternateBase());
    for (const Segment& s : segments()) {
        p.fillRect(s.rect, color(s.part));
        if (s.rect.width() > 40) {
            p.setPen(Qt::white);
            p.drawText(s.rect, Qt::AlignCenter, QString("%L1").arg(s.tokens));
        }
    }
    p.setPen(palette().text().color());
    p.drawText(QRectF(4, 26, width() - 8, height() - 26), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, summary());
}

QString ReusePanel::toolTipAt(const QPointF& pos) const {
    for (const Segment& s : segments())
        if (s.rect.contains(pos)) return tr("%L1 prompt tokens %2").arg(s.tokens).arg(partName(s.part));
    return {};
}

}  // namespace kvchat
