#include "ui/inspector/cache_inspector.h"

#include "engine/cache/telemetry_json.h"

#include "ui/inspector/byte_size_text.h"
#include "ui/inspector/memory_bars.h"
#include "ui/inspector/telemetry_export.h"
#include "ui/inspector/traffic_timeline.h"
#include "ui/inspector/window_strips.h"

#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QTimer>
#include <QVBoxLayout>

namespace kvchat {

namespace {
QLabel* sectionTitle(const QString& text, QWidget* parent) {
    auto* l = new QLabel("<b>" + text + "</b>", parent);
    l->setContentsMargins(2, 6, 2, 0);
    return l;
}
}  // namespace

CacheInspector::CacheInspector(QWidget* parent) : QWidget(parent) {
    setObjectName("cacheInspector");
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* content = new QWidget(scroll);
    auto* v = new QVBoxLayout(content);
    v->setContentsMargins(6, 4, 6, 4);
    v->setSpacing(2);
    header_ = new QLabel(tr("No cache yet: open a conversation."), content);
    header_->setTextFormat(Qt::PlainText);
    QFont bold = header_->font();
    bold.setBold(true);
    header_->setFont(bold);
    header_->setObjectName("inspectorHeader");
    header_->setWordWrap(true);
    header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(header_);
    v->addWidget(sectionTitle(tr("Memory per layer"), content));
    bars_ = new MemoryBars(content);
    v->addWidget(bars_);
    v->addWidget(sectionTitle(tr("Windows over token positions"), content));
    strips_ = new WindowStrips(content);
    v->addWidget(strips_);
    v->addWidget(sectionTitle(tr("Offload traffic per decode step"), content));
    traffic_ = new TrafficTimeline(content);
    v->addWidget(traffic_);
    v->addWidget(sectionTitle(tr("Reuse in the last turn"), content));
    reuse_ = new ReusePanel(content);
    v->addWidget(reuse_);
    snapshotNote_ = new QLabel(content);
    snapshotNote_->setObjectName("snapshotNote");
    snapshotNote_->setWordWrap(true);
    snapshotNote_->setTextFormat(Qt::PlainText);
    snapshotNote_->setContentsMargins(4, 0, 4, 4);
    snapshotNote_->setForegroundRole(QPalette::PlaceholderText);
    snapshotNote_->setVisible(false);
    v->addWidget(snapshotNote_);
    auto* buttons = new QHBoxLayout;
    for (const auto& [name, kind] : {std::pair{tr("Export PNG…"), QString("png")}, std::pair{tr("Export CSV…"), QString("csv")},
                                     std::pair{tr("Export JSON…"), QString("json")}}) {
        auto* b = new QPushButton(name, content);
        b->setObjectName("inspectorExport" + kind.toUpper());
        connect(b, &QPushButton::clicked, this, [this, k = kind] { chooseExport(k); });
        buttons->addWidget(b);
    }
    buttons->addStretch(1);
    v->addLayout(buttons);
    v->addStretch(1);
    scroll->setWidget(content);
    outer->addWidget(scroll);

    timer_ = new QTimer(this);
    timer_->setSingleShot(true);
    timer_->setInterval(kRedrawIntervalMs);
    connect(timer_, &QTimer::timeout, this, &CacheInspector::flush);
}

void CacheInspector::setTelemetry(const CacheTelemetry& telemetry) {
    // Traffic is per step, so every step is recorded, even those the screen never shows.
    bool moved = false;
    for (const LayerTelemetry& l : telemetry.layers) moved = moved || l.moved_in_total > 0 || l.moved_out_total > 0;
    if (moved) traffic_->addStep(telemetry);
    telemetry_ = telemetry;
    dirty_ = true;
    if (!timer_->isActive() && isVisible()) timer_->start();
}

void CacheInspector::setReuse(const std::optional<AnswerFigures>& figures) {
    reuse_->setReuse(figures);
}

void CacheInspector::setSnapshotBytes(std::optional<int64_t> bytes) {
    reuse_->setSnapshotBytes(bytes);
    snapshotNote_->setText(bytes ? snapshotExplanation(*bytes) : QString());
    snapshotNote_->setVisible(bytes.has_value());
}

QString CacheInspector::snapshotExplanation(int64_t snapshotBytes) {
    // What engine/cache/snapshot.cpp writes and Cache::telemetry counts (ARCHITECTURE: the cache).
    return tr("\u201cHeld\u201d (under the bars) is what the cache keeps in memory now. The snapshot on disk (%1, "
              "saved after each answer) holds those keys and values and the token ids, plus checkpoints of the "
              "sliding-window, sink and quantized layers from the start of each of the last few messages, so an "
              "edit or a regeneration rewinds them instead of computing the chat again: that is why it can be "
              "larger than what is held.")
        .arg(byteSizeText(snapshotBytes));
}

void CacheInspector::clear(bool conversationOpen) {
    telemetry_.reset();
    traffic_->clear();
    trafficShown_ = 0;
    traffic_->update();
    bars_->setTelemetry({});
    strips_->setTelemetry({});
    reuse_->setReuse(std::nullopt);
    setSnapshotBytes(std::nullopt);
    header_->setText(conversationOpen
                         ? tr("This conversation's cache is not in memory: the next turn loads its snapshot or "
                              "computes it.")
                         : tr("No cache yet: open a conversation."));
    dirty_ = false;
}

void CacheInspector::showEvent(QShowEvent* e) {
    QWidget::showEvent(e);
    if (dirty_) timer_->start();
}

void CacheInspector::flush() {
    if (!dirty_ || !telemetry_) return;
    dirty_ = false;
    ++redraws_;
    const CacheTelemetry& t = *telemetry_;
    // The figures are in the bars' totals line; the header changes only with the strategy, so a
    // step never relays out the inspector.
    const QString spec = QString::fromStdString(t.spec);
    if (header_->text() != spec) header_->setText(spec);
    bars_->setTelemetry(t);
    strips_->setTelemetry(t);
    if (traffic_->recorded() != trafficShown_) {
        trafficShown_ = traffic_->recorded();
        traffic_->update();
    }
}

bool CacheInspector::exportPng(const QString& path) {
    flush();
    return grab().save(path, "PNG");
}

bool CacheInspector::exportCsv(const QString& path) const {
    if (!telemetry_) return false;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
    const QByteArray data = telemetryCsv(*telemetry_).toUtf8();
    return f.write(data) == data.size();
}

bool CacheInspector::exportJson(const QString& path) const {
    if (!telemetry_) return false;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
    // Written by the engine, as kvchat-cli prints it, so the two can be compared byte for byte.
    const QByteArray data = QByteArray::fromStdString(telemetry_json_text(*telemetry_) + "\n");
    return f.write(data) == data.size();
}

void CacheInspector::chooseExport(const QString& kind) {
    const QString filter = kind == "png" ? tr("PNG image (*.png)") : kind == "csv" ? tr("CSV (*.csv)") : tr("JSON (*.json)");
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the cache inspector"), "kv-cache." + kind, filter);
    if (path.isEmpty()) return;
    const bool ok = kind == "png" ? exportPng(path) : kind == "csv" ? exportCsv(path) : exportJson(path);
    if (!ok) header_->setText(header_->text() + "\n" + tr("Could not write %1").arg(path));
}

}  // namespace kvchat
