#include "ui/lab/strategy_panel.h"

#include "ui/lab/plan_messages.h"

#include "engine/cache/cache_presets.h"
#include "engine/cache/cache_spec.h"
#include "engine/error.h"
#include "ui/inspector/byte_size_text.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

#include <limits>
#include <optional>

namespace kvchat {

namespace {

QColor kindColor(ConversionPlan::Kind kind) {
    switch (kind) {
        case ConversionPlan::Kind::Unchanged: return QColor(0x75, 0x75, 0x75);
        case ConversionPlan::Kind::Lossless: return QColor(0x2e, 0x7d, 0x32);
        case ConversionPlan::Kind::Lossy: return QColor(0xe6, 0x51, 0x00);
        case ConversionPlan::Kind::Rebuild: return QColor(0x15, 0x65, 0xc0);
    }
    return Qt::black;
}

}  // namespace

StrategyPanel::StrategyPanel(QWidget* parent) : QWidget(parent) {
    setObjectName("strategyPanel");
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(6, 6, 6, 6);

    auto* top = new QHBoxLayout;
    preset_ = new QComboBox(this);
    preset_->setObjectName("strategyPreset");
    preset_->setAccessibleName(tr("Strategy preset"));
    for (const CachePreset& p : cache_presets()) preset_->addItem(QString::fromUtf8(p.name.data(), static_cast<qsizetype>(p.name.size())));
    quantized_ = new QCheckBox(tr("+ quantized"), this);
    quantized_->setObjectName("strategyQuantized");
    offloaded_ = new QCheckBox(tr("+ offloaded"), this);
    offloaded_->setObjectName("strategyOffloaded");
    top->addWidget(new QLabel(tr("Preset"), this));
    top->addWidget(preset_, 1);
    top->addWidget(quantized_);
    top->addWidget(offloaded_);
    v->addLayout(top);

    auto* grid = new QGridLayout;
    auto makeField = [&](const QString& name, const QString& label, const QString& tip, int row, int col) {
        auto* e = new QLineEdit(this);
        e->setObjectName("strategy_" + name);
        e->setPlaceholderText(tr("default"));
        e->setToolTip(tip);
        e->setAccessibleName(tr("Strategy parameter %1").arg(name));
        auto* l = new QLabel(label, this);
        l->setBuddy(e);
        grid->addWidget(l, row, col * 2);
        grid->addWidget(e, row, col * 2 + 1);
        connect(e, &QLineEdit::textEdited, this, &StrategyPanel::fieldsEdited);
        return e;
    };
    nbits_ = makeField("nbits", tr("bits"), tr("quantized: 2, 4 or 8 bits per value"), 0, 0);
    residual_ = makeField("residual", tr("residual"), tr("quantized: recent tokens kept in full precision"), 0, 1);
    group_ = makeField("group", tr("group"), tr("quantized: tokens per quantized block (a multiple of 8)"), 0, 2);
    window_ = makeField("window", tr("window"), tr("sliding_window / sink: tokens kept"), 1, 0);
    sinks_ = makeField("sinks", tr("sinks"), tr("sink: first tokens always kept"), 1, 1);
    maxLen_ = makeField("max_len", tr("max_len"), tr("static / offloaded_static / hybrid: most tokens the cache holds"), 1, 2);
    dir_ = makeField("dir", tr("dir"), tr("offloaded: the slow tier's directory (default: $TMPDIR)"), 2, 0);
    grid->addWidget(dir_, 2, 1, 1, 5);
    v->addLayout(grid);

    auto* specRow = new QHBoxLayout;
    spec_ = new QLineEdit(this);
    spec_->setObjectName("strategySpec");
    spec_->setAccessibleName(tr("Strategy spec"));
    spec_->setToolTip(tr("The whole strategy as kvchat-cli --cache takes it; type here or use the fields"));
    specRow->addWidget(new QLabel(tr("Spec"), this));
    specRow->addWidget(spec_, 1);
    v->addLayout(specRow);
    error_ = new QLabel(this);
    error_->setObjectName("strategyError");
    error_->setWordWrap(true);
    error_->setStyleSheet("color: #c62828");
    v->addWidget(error_);

    kind_ = new QLabel(this);
    kind_->setObjectName("strategyPlanKind");
    kind_->setWordWrap(true);
    planText_ = new QLabel(this);
    planText_->setObjectName("strategyPlan");
    planText_->setWordWrap(true);
    planText_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    v->addWidget(kind_);
    v->addWidget(planText_);

    auto* buttons = new QHBoxLayout;
    apply_ = new QPushButton(tr("Apply"), this);
    apply_->setObjectName("strategyApply");
    cancel_ = new QPushButton(tr("Cancel"), this);
    cancel_->setObjectName("strategyCancel");
    progress_ = new QProgressBar(this);
    progress_->setObjectName("strategyProgress");
    progressLabel_ = new QLabel(this);
    buttons->addWidget(apply_);
    buttons->addWidget(cancel_);
    buttons->addWidget(progress_, 1);
    v->addLayout(buttons);
    v->addWidget(progressLabel_);
    v->addStretch(1);
    progress_->hide();
    cancel_->setEnabled(false);

    planTimer_ = new QTimer(this);
    planTimer_->setSingleShot(true);
    planTimer_->setInterval(kPlanDelayMs);
    connect(planTimer_, &QTimer::timeout, this, [this] {
        if (!chosen_.isEmpty()) Q_EMIT planRequested(chosen_);
    });
    connect(preset_, &QComboBox::activated, this, &StrategyPanel::presetChosen);
    connect(quantized_, &QCheckBox::toggled, this, [this] {
        if (!filling_) fieldsEdited();
    });
    connect(offloaded_, &QCheckBox::toggled, this, [this] {
        if (!filling_) fieldsEdited();
    });
    connect(spec_, &QLineEdit::textEdited, this, &StrategyPanel::specEdited);
    connect(apply_, &QPushButton::clicked, this, [this] {
        if (chosen_.isEmpty() || !planApplicable_) return;
        setBusy(true);
        Q_EMIT applyRequested(chosen_);
    });
    connect(cancel_, &QPushButton::clicked, this, [this] {
        progressLabel_->setText(tr("Cancelling…"));
        Q_EMIT cancelRequested();
    });
    setCurrentSpec("dynamic");
}

QLineEdit* StrategyPanel::field(const QString& name) const {
    if (name == "nbits") return nbits_;
    if (name == "residual") return residual_;
    if (name == "group") return group_;
    if (name == "window") return window_;
    if (name == "sinks") return sinks_;
    if (name == "max_len") return maxLen_;
    if (name == "dir") return dir_;
    return nullptr;
}

QString StrategyPanel::validationMessage() const { return error_text_; }

void StrategyPanel::setCurrentSpec(const QString& spec) {
    current_ = spec;
    try {
        const CacheSpec s = parse_cache_spec(spec.toStdString());
        current_ = QString::fromStdString(to_string(s));
        fillFields(s);
        filling_ = true;
        spec_->setText(current_);
        filling_ = false;
        chosen_ = current_;
        error_text_.clear();
        error_->clear();
    } catch (const Error& e) {
        error_text_ = QString::fromUtf8(e.what());
        error_->setText(error_text_);
    }
    planned_.clear();
    planApplicable_ = false;
    kind_->setText(tr("Current strategy: %1").arg(current_.toHtmlEscaped()));
    planText_->clear();
    updateEnabled();
}

void StrategyPanel::reportCurrentSpec(const QString& spec) {
    QString canonical = spec;
    try {
        canonical = QString::fromStdString(to_string(parse_cache_spec(spec.toStdString())));
    } catch (const Error&) {
    }
    const bool choosing = chosen_ != current_ || !error_text_.isEmpty();
    if (canonical == current_ && choosing) return;
    setCurrentSpec(spec);
}

void StrategyPanel::fillFields(const CacheSpec& s) {
    filling_ = true;
    const std::string_view preset = cache_preset_of(s).name;
    preset_->setCurrentText(QString::fromUtf8(preset.data(), static_cast<qsizetype>(preset.size())));
    quantized_->setChecked(s.nbits > 0);
    offloaded_->setChecked(s.offloaded);
    nbits_->setText(s.nbits > 0 ? QString::number(s.nbits) : QString());
    residual_->setText(s.nbits > 0 ? QString::number(s.residual) : QString());
    group_->setText(s.nbits > 0 ? QString::number(s.group) : QString());
    window_->setText(s.window > 0 ? QString::number(s.window) : QString());
    sinks_->setText(s.sinks > 0 ? QString::number(s.sinks) : QString());
    maxLen_->setText(s.max_len > 0 ? QString::number(s.max_len) : QString());
    dir_->setText(QString::fromStdString(s.offload_dir));
    filling_ = false;
    updateEnabled();
}

void StrategyPanel::presetChosen(int index) {
    const QString p = preset_->itemText(index);
    filling_ = true;
    if (p == "quantized") quantized_->setChecked(true);
    if (p == "offloaded" || p == "offloaded_static") offloaded_->setChecked(true);
    if (p == "static" || p == "dynamic" || p == "sliding_window" || p == "sink" || p == "hybrid") {
        // A plain preset: the combinations stay as they were chosen.
    }
    filling_ = false;
    fieldsEdited();
}

CacheSpec StrategyPanel::composeSpec() const {
    const CachePreset* preset = find_cache_preset(preset_->currentText().toStdString());
    if (!preset) throw Error("unknown cache strategy '" + preset_->currentText().toStdString() + "'");
    CacheSpec s = preset->spec;
    if (quantized_->isChecked() && s.nbits == 0) {
        const CacheSpec& q = find_cache_preset("quantized")->spec;
        s.nbits = q.nbits;
        s.residual = q.residual;
        s.group = q.group;
    }
    if (offloaded_->isChecked()) s.offloaded = true;
    // A field's whole number; nullopt when it is empty (the preset's default stands).
    auto number = [&](const char* name) -> std::optional<int> {
        const QString text = field(name)->text().trimmed();
        if (text.isEmpty()) {
            for (std::string_view r : preset->required)
                if (r == name) throw Error("missing parameter " + std::string(name) + " (" + std::string(preset->usage) + ")");
            return std::nullopt;
        }
        bool ok = false;
        const qlonglong v = text.toLongLong(&ok);
        if (!ok) throw Error(std::string(name) + " expects a whole number, got '" + text.left(40).toStdString() + "'");
        if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
            throw Error(std::string(name) + "=" + text.left(40).toStdString() + " is out of range");
        return static_cast<int>(v);
    };
    if (s.nbits > 0) {
        if (auto v = number("nbits")) s.nbits = *v;
        if (auto v = number("residual")) s.residual = *v;
        if (auto v = number("group")) s.group = *v;
    }
    if (s.retention() != RetentionKind::All)
        if (auto v = number("window")) s.window = *v;
    if (s.retention() == RetentionKind::Sink)
        if (auto v = number("sinks")) s.sinks = *v;
    if (s.base == CacheBase::Static || s.base == CacheBase::Hybrid)
        if (auto v = number("max_len")) s.max_len = *v;
    if (s.offloaded) s.offload_dir = dir_->text().trimmed().toStdString();
    return s;
}

void StrategyPanel::fieldsEdited() {
    if (filling_) return;
    try {
        // The grammar is the engine's: the fields make a typed spec, and its text is to_string's.
        const QString text = QString::fromStdString(to_string(composeSpec()));
        spec_->setText(text);
        validate(text, false);
    } catch (const Error& e) {
        rejectChoice(QString::fromUtf8(e.what()));
    }
}

void StrategyPanel::specEdited() {
    if (filling_) return;
    validate(spec_->text(), true);
}

void StrategyPanel::validate(const QString& text, bool fromSpecLine) {
    planTimer_->stop();
    planned_.clear();
    planApplicable_ = false;
    try {
        const CacheSpec s = parse_cache_spec(text.trimmed().toStdString());
        chosen_ = QString::fromStdString(to_string(s));
        error_text_.clear();
        error_->clear();
        if (fromSpecLine) fillFields(s);
        kind_->setText(chosen_ == current_ ? tr("This is the current strategy.") : tr("Working out what the switch will do…"));
        planText_->clear();
        if (chosen_ != current_) planTimer_->start();
    } catch (const Error& e) {
        rejectChoice(QString::fromUtf8(e.what()));
        return;
    }
    updateEnabled();
}

void StrategyPanel::rejectChoice(const QString& message) {
    planTimer_->stop();
    planned_.clear();
    planApplicable_ = false;
    chosen_.clear();
    error_text_ = message;
    error_->setText(error_text_);
    kind_->clear();
    planText_->clear();
    updateEnabled();
}

void StrategyPanel::updateEnabled() {
    const QString p = preset_->currentText();
    const bool q = quantized_->isChecked() || p == "quantized";
    const bool off = offloaded_->isChecked() || p == "offloaded" || p == "offloaded_static";
    const bool fields = !busy_;
    nbits_->setEnabled(fields && q);
    residual_->setEnabled(fields && q);
    group_->setEnabled(fields && q);
    window_->setEnabled(fields && (p == "sliding_window" || p == "sink"));
    sinks_->setEnabled(fields && p == "sink");
    maxLen_->setEnabled(fields && (p == "static" || p == "offloaded_static" || p == "hybrid"));
    dir_->setEnabled(fields && off);
    preset_->setEnabled(fields);
    quantized_->setEnabled(fields && p != "quantized");
    offloaded_->setEnabled(fields && p != "offloaded" && p != "offloaded_static");
    spec_->setEnabled(fields);
    apply_->setEnabled(!busy_ && planApplicable_ && !chosen_.isEmpty() && planned_ == chosen_);
    cancel_->setEnabled(busy_);
}

void StrategyPanel::showPlan(const ConversionPlan& plan) {
    const QString to = QString::fromStdString(plan.to_spec);
    if (to != chosen_) return;  // an answer to an earlier request
    planned_ = to;
    planApplicable_ = plan.kind != ConversionPlan::Kind::Unchanged;
    const QColor c = kindColor(plan.kind);
    QString kind = QString::fromUtf8(conversion_kind_name(plan.kind).data(), static_cast<int>(conversion_kind_name(plan.kind).size()));
    kind_->setText(QString("<span style='background:%1;color:white;padding:2px'>&nbsp;%2&nbsp;</span> %3")
                       .arg(c.name(), kind.toUpper(), QString::fromStdString(plan.summary).toHtmlEscaped()));
    QString rows;
    auto row = [&](const QString& name, const QString& value) {
        rows += QString("<tr><td>%1</td><td align=right>&nbsp;%2</td></tr>").arg(name, value);
    };
    row(tr("Tokens in the cache"), QString("%L1").arg(plan.tokens));
    if (plan.kind == ConversionPlan::Kind::Rebuild) {
        row(tr("Tokens re-prefilled"), QString("%L1").arg(plan.tokens_rebuilt));
        row(tr("Estimated time"), plan.rebuild_ms_estimate > 0 ? tr("%1 s").arg(plan.rebuild_ms_estimate / 1000.0, 0, 'f', 1)
                                                              : tr("not measured yet"));
        if (plan.tokens_restored > 0) row(tr("Tokens brought back"), QString("%L1").arg(plan.tokens_restored));
    }
    row(tr("Tokens quantized"), QString("%L1").arg(plan.tokens_quantized));
    if (plan.tokens_requantized > 0) row(tr("Tokens quantized again, more coarsely"), QString("%L1").arg(plan.tokens_requantized));
    row(tr("Tokens evicted"), QString("%L1").arg(plan.tokens_evicted));
    row(tr("KV bytes before"), byteSizeText(plan.bytes_before) + QString(" (%L1)").arg(plan.bytes_before));
    row(tr("KV bytes after"), byteSizeText(plan.bytes_after) + QString(" (%L1)").arg(plan.bytes_after));
    // Which messages pay for it, in the transcript's numbering.
    QString which;
    for (const QString& line : {droppedMessagesText(plan), quantizedMessagesText(plan)})
        if (!line.isEmpty()) which += "<p style='margin:2px 0'>" + line.toHtmlEscaped() + ".</p>";
    planText_->setText("<table>" + rows + "</table>" + which + "<small>" + tr("Token counts: the layer that changes most.") + "</small>");
    updateEnabled();
}

void StrategyPanel::showError(const QString& message) {
    planned_.clear();
    planApplicable_ = false;
    error_text_ = message;
    error_->setText(message);
    kind_->clear();
    planText_->clear();
    if (busy_) setBusy(false);
    updateEnabled();
}

void StrategyPanel::showProgress(const QString& task, qint64 done, qint64 total) {
    if (!busy_) setBusy(true);
    progress_->show();
    if (total > 0) {
        progress_->setRange(0, 1000);
        progress_->setValue(static_cast<int>(1000 * done / total));
    } else {
        progress_->setRange(0, 0);
    }
    progressLabel_->setText(total > 0 ? tr("%1: %L2 of %L3").arg(task).arg(done).arg(total) : task);
}

void StrategyPanel::applyFinished(bool ok, const QString& spec, const QString& message) {
    setBusy(false);
    progress_->hide();
    if (ok) {
        setCurrentSpec(spec);
        progressLabel_->setText(message.isEmpty() ? tr("Now using %1.").arg(current_) : message);
    } else {
        progressLabel_->setText(message);
        planned_.clear();
        planApplicable_ = false;
        if (!chosen_.isEmpty() && chosen_ != current_) planTimer_->start();  // the cache may have moved on
    }
    updateEnabled();
}

void StrategyPanel::setBusy(bool busy) {
    busy_ = busy;
    if (busy) {
        progress_->show();
        progress_->setRange(0, 0);
        progressLabel_->setText(tr("Switching to %1…").arg(chosen_));
    }
    updateEnabled();
}

}  // namespace kvchat
