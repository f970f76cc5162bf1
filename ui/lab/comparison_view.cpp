#include "ui/lab/comparison_view.h"

#include "engine/cache/cache_spec.h"
#include "engine/error.h"
#include "ui/inspector/byte_size_text.h"
#include "ui/lab/kv_bytes_chart.h"

#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTextCursor>
#include <QTextEdit>
#include <QVBoxLayout>

namespace kvchat {

namespace {

const char* kSuggestions[] = {"dynamic", "quantized:nbits=4", "quantized:nbits=2", "sliding_window:window=1024",
                              "sink:window=256,sinks=4", "hybrid", "offloaded", "sink:window=64,sinks=4+quantized:nbits=4"};

QString csvField(const QString& s) {
    if (!s.contains(',') && !s.contains('"') && !s.contains('\n') && !s.contains('\r')) return s;
    QString q = s;
    q.replace('"', "\"\"");
    return '"' + q + '"';
}

}  // namespace

QColor ComparisonView::columnColor(int column) {
    static const QColor colors[] = {QColor(0x78, 0x78, 0x78),  // (grey that reads on light and dark)
                                    QColor(0x15, 0x65, 0xc0), QColor(0xe6, 0x51, 0x00),
                                    QColor(0x2e, 0x7d, 0x32)};
    return colors[column % 4];
}

ComparisonView::ComparisonView(QWidget* parent) : QWidget(parent) {
    setObjectName("comparisonView");
    // Everything scrolls inside the view, so however the view is placed (its own window, or docked
    // by the user) it never asks the window for more room than the screen has.
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    auto* scroll = new QScrollArea(this);
    scroll->setObjectName("comparisonScroll");
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    outer->addWidget(scroll);
    auto* content = new QWidget(scroll);
    content->setObjectName("comparisonContent");
    scroll->setWidget(content);
    auto* v = new QVBoxLayout(content);

    auto* pick = new QGridLayout;
    for (int i = 0; i < kMaxStrategies; ++i) {
        auto* box = new QComboBox(this);
        box->setObjectName(QString("comparisonStrategy%1").arg(i));
        box->setAccessibleName(i == 0 ? tr("Reference strategy") : tr("Strategy %1 to compare").arg(i + 1));
        box->setEditable(true);
        if (i > 0) box->addItem(QString());
        for (const char* s : kSuggestions) box->addItem(s);
        box->setCurrentIndex(0);
        if (i == 0) box->setEnabled(false);  // dynamic: the reference every column is measured against
        box->setMinimumContentsLength(18);
        pick->addWidget(new QLabel(i == 0 ? tr("Reference") : tr("Strategy %1").arg(i + 1), this), 0, i);
        pick->addWidget(box, 1, i);
        connect(box, &QComboBox::currentTextChanged, this, &ComparisonView::validate);
        pickers_.push_back(box);
    }
    pickers_[1]->setCurrentText("quantized:nbits=4");
    v->addLayout(pick);

    auto* source = new QHBoxLayout;
    fromConversation_ = new QRadioButton(tr("Conversation"), this);
    fromPrompt_ = new QRadioButton(tr("One prompt"), this);
    fromConversation_->setObjectName("comparisonFromConversation");
    fromPrompt_->setObjectName("comparisonFromPrompt");
    fromPrompt_->setChecked(true);
    conversation_ = new QComboBox(this);
    conversation_->setObjectName("comparisonConversation");
    conversation_->setAccessibleName(tr("Conversation to replay"));
    prompt_ = new QLineEdit(this);
    prompt_->setObjectName("comparisonPrompt");
    prompt_->setAccessibleName(tr("Prompt to compare on"));
    prompt_->setPlaceholderText(tr("A prompt to answer under each strategy"));
    tokens_ = new QSpinBox(this);
    tokens_->setObjectName("comparisonTokens");
    tokens_->setAccessibleName(tr("Tokens to generate"));
    tokens_->setRange(1, 4096);
    tokens_->setValue(32);
    tokens_->setSuffix(tr(" tokens"));
    source->addWidget(fromConversation_);
    source->addWidget(conversation_, 1);
    source->addWidget(fromPrompt_);
    source->addWidget(prompt_, 2);
    source->addWidget(tokens_);
    v->addLayout(source);

    auto* buttons = new QHBoxLayout;
    run_ = new QPushButton(tr("Compare"), this);
    run_->setObjectName("comparisonRun");
    cancel_ = new QPushButton(tr("Cancel"), this);
    cancel_->setObjectName("comparisonCancel");
    cancel_->setEnabled(false);
    export_ = new QPushButton(tr("Export CSV…"), this);
    export_->setObjectName("comparisonExport");
    export_->setEnabled(false);
    progress_ = new QProgressBar(this);
    progress_->hide();
    status_ = new QLabel(this);
    status_->setObjectName("comparisonStatus");
    buttons->addWidget(run_);
    buttons->addWidget(cancel_);
    buttons->addWidget(export_);
    buttons->addWidget(progress_, 1);
    buttons->addWidget(status_, 1);
    v->addLayout(buttons);
    errorLabel_ = new QLabel(this);
    errorLabel_->setObjectName("comparisonError");
    errorLabel_->setStyleSheet("color: #c62828");
    errorLabel_->setWordWrap(true);
    v->addWidget(errorLabel_);
    timingNote_ = new QLabel(tr("Speeds are measured after one warm-up run, and the strategies take turns in alternating "
                                "order at every decode step, so none pays for a cold start or always goes first."),
                             this);
    timingNote_->setObjectName("comparisonTimingNote");
    timingNote_->setWordWrap(true);
    timingNote_->setForegroundRole(QPalette::PlaceholderText);
    v->addWidget(timingNote_);

    columnsLayout_ = new QHBoxLayout;
    v->addLayout(columnsLayout_, 3);
    chart_ = new KvBytesChart(this);
    v->addWidget(chart_, 2);

    connect(run_, &QPushButton::clicked, this, &ComparisonView::request);
    connect(cancel_, &QPushButton::clicked, this, [this] {
        status_->setText(tr("Cancelling…"));
        Q_EMIT cancelRequested();
    });
    connect(export_, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export the comparison"), "comparison.csv", tr("CSV (*.csv)"));
        if (!path.isEmpty() && !exportCsv(path)) showError(tr("Could not write %1").arg(path));
    });
    connect(fromConversation_, &QRadioButton::toggled, this, &ComparisonView::validate);
    connect(prompt_, &QLineEdit::textChanged, this, &ComparisonView::validate);
    validate();
}

QComboBox* ComparisonView::strategyPicker(int i) const {
    return i >= 0 && i < static_cast<int>(pickers_.size()) ? pickers_[static_cast<size_t>(i)] : nullptr;
}

void ComparisonView::setConversations(const QList<QPair<qint64, QString>>& conversations) {
    const qint64 keep = conversation_->currentData().isValid() ? conversation_->currentData().toLongLong() : -1;
    conversation_->clear();
    for (const auto& [id, title] : conversations) conversation_->addItem(title, id);
    const int at = conversation_->findData(keep);
    if (at >= 0) conversation_->setCurrentIndex(at);
    validate();
}

void ComparisonView::setStrategies(const QStringList& specs) {
    for (int i = 1; i < kMaxStrategies; ++i) pickers_[static_cast<size_t>(i)]->setCurrentText(i < specs.size() ? specs[i] : QString());
    validate();
}

QStringList ComparisonView::strategies() const {
    QStringList out;
    for (QComboBox* b : pickers_) {
        const QString t = b->currentText().trimmed();
        if (t.isEmpty()) continue;
        try {
            const QString c = QString::fromStdString(to_string(parse_cache_spec(t.toStdString())));
            if (!out.contains(c)) out << c;
        } catch (const Error&) {
        }
    }
    return out;
}

void ComparisonView::validate() {
    if (!run_) return;  // still being built
    error_.clear();
    int chosen = 0;
    for (QComboBox* b : pickers_) {
        const QString t = b->currentText().trimmed();
        if (t.isEmpty()) continue;
        ++chosen;
        try {
            parse_cache_spec(t.toStdString());
        } catch (const Error& e) {
            if (error_.isEmpty()) error_ = QString::fromUtf8(e.what());
        }
    }
    if (error_.isEmpty() && strategies().size() < 2) error_ = tr("Pick at least one strategy besides dynamic.");
    if (error_.isEmpty() && fromPrompt_->isChecked() && prompt_->text().trimmed().isEmpty()) error_ = tr("Type a prompt, or pick a conversation.");
    if (error_.isEmpty() && fromConversation_->isChecked() && conversation_->currentIndex() < 0) error_ = tr("No conversation to replay.");
    errorLabel_->setText(error_);
    run_->setEnabled(!busy_ && error_.isEmpty());
}

void ComparisonView::request() {
    validate();
    if (!error_.isEmpty() || busy_) return;
    setBusy(true);
    const qint64 id = fromConversation_->isChecked() ? conversation_->currentData().toLongLong() : -1;
    Q_EMIT compareRequested(strategies(), id, id >= 0 ? QString() : prompt_->text(), tokens_->value());
}

void ComparisonView::setBusy(bool busy) {
    busy_ = busy;
    cancel_->setEnabled(busy);
    progress_->setVisible(busy);
    if (busy) {
        progress_->setRange(0, 0);
        status_->setText(tr("Starting…"));
    }
    for (QComboBox* b : pickers_) b->setEnabled(!busy && b != pickers_[0]);
    validate();
}

void ComparisonView::showProgress(const QString& task, qint64 done, qint64 total) {
    if (!busy_) setBusy(true);
    if (total > 0) {
        progress_->setRange(0, 1000);
        progress_->setValue(static_cast<int>(1000 * done / total));
    }
    status_->setText(total > 0 ? tr("%1: %L2 of %L3").arg(task).arg(done).arg(total) : task);
}

void ComparisonView::showError(const QString& message) {
    if (busy_) setBusy(false);
    status_->clear();
    errorLabel_->setText(message);
}

void ComparisonView::clearColumns() {
    for (Column& c : columns_) delete c.box;
    columns_.clear();
}

QTextEdit* ComparisonView::answerView(int column) const {
    return column >= 0 && column < columnCount() ? columns_[static_cast<size_t>(column)].answer : nullptr;
}

QLabel* ComparisonView::metricsLabel(int column) const {
    return column >= 0 && column < columnCount() ? columns_[static_cast<size_t>(column)].metrics : nullptr;
}

QPair<int, int> ComparisonView::divergenceSpan(int column) const {
    return column >= 0 && column < columnCount() ? columns_[static_cast<size_t>(column)].span : QPair<int, int>{-1, -1};
}

void ComparisonView::showRows(const std::vector<ComparisonRow>& rows) {
    if (busy_) setBusy(false);
    rows_ = rows;
    clearColumns();
    std::vector<KvBytesChart::Line> lines;
    for (size_t k = 0; k < rows_.size(); ++k) {
        const ComparisonRow& r = rows_[k];
        Column c;
        c.box = new QWidget(this);
        c.box->setObjectName("comparisonColumn");
        auto* v = new QVBoxLayout(c.box);
        v->setContentsMargins(2, 2, 2, 2);
        c.title = new QLabel(QString("<b style='color:%1'>%2</b>").arg(columnColor(static_cast<int>(k)).name(),
                                                                      QString::fromStdString(r.strategy).toHtmlEscaped()),
                             c.box);
        c.title->setWordWrap(true);
        c.answer = new QTextEdit(c.box);
        c.answer->setReadOnly(true);
        c.answer->setObjectName("comparisonAnswer");
        c.answer->setAccessibleName(tr("Answer under %1").arg(QString::fromStdString(r.strategy)));
        // Room for a paragraph of the answer, not four lines.
        c.answer->setMinimumHeight(c.answer->fontMetrics().lineSpacing() * 10 + 8);
        // The answer as the tokens' pieces; the first that parts from dynamic's is highlighted.
        QTextCursor cur(c.answer->document());
        // Tokens past the end of the answer (every strategy generates as many) are greyed.
        QTextCharFormat plain, after;
        after.setForeground(QColor(0x9e, 0x9e, 0x9e));
        int at = 0;
        for (size_t i = 0; i < r.pieces.size(); ++i) {
            const QString piece = QString::fromStdString(r.pieces[i]);
            QTextCharFormat f = static_cast<int64_t>(i) >= r.answer_end ? after : plain;
            if (static_cast<int64_t>(i) == r.first_divergence) {
                c.span = {at, at + static_cast<int>(piece.size())};
                f.setBackground(divergenceColor());
                f.setFontWeight(QFont::Bold);
            }
            cur.insertText(piece, f);
            at += static_cast<int>(piece.size());
        }
        // Bytes the detokenizer held back to the end (an unfinished character).
        const QString whole = QString::fromStdString(r.text);
        if (whole.size() > at) cur.insertText(whole.mid(at), plain);
        QString m;
        m += tr("first divergence: %1<br>").arg(r.first_divergence < 0 ? tr("none") : tr("token %1").arg(r.first_divergence));
        m += tr("agreement with dynamic: %1%<br>").arg(100.0 * r.agreement, 0, 'f', 1);
        m += tr("peak KV: %1 (%2× dynamic at the end)<br>").arg(byteSizeText(r.peak_kv_bytes)).arg(r.kv_ratio, 0, 'f', 3);
        m += tr("time to first token: %1 ms<br>").arg(r.ttft_ms, 0, 'f', 1);
        m += tr("decode: %1 tok/s (%2× dynamic)").arg(r.decode_tok_s, 0, 'f', 1).arg(r.decode_ratio, 0, 'f', 2);
        m += r.convert_ms > 0 ? tr("<br>converting from dynamic: %1 ms").arg(r.convert_ms, 0, 'f', 1)
                              : tr("<br>converting from dynamic: –");
        c.metrics = new QLabel(m, c.box);
        c.metrics->setObjectName("comparisonMetrics");
        c.metrics->setTextInteractionFlags(Qt::TextSelectableByMouse);
        v->addWidget(c.title);
        v->addWidget(c.answer, 1);
        v->addWidget(c.metrics);
        columnsLayout_->addWidget(c.box, 1);
        columns_.push_back(c);
        lines.push_back({QString::fromStdString(r.strategy), columnColor(static_cast<int>(k)), r.kv_series});
    }
    chart_->setLines(std::move(lines));
    export_->setEnabled(!rows_.empty());
    status_->setText(rows_.empty() ? QString() : tr("%L1 prompt tokens, %L2 generated under each strategy")
                                                     .arg(rows_.front().context)
                                                     .arg(rows_.front().tokens.size()));
    errorLabel_->clear();
}

QString ComparisonView::csv() const {
    QString out = "strategy,context,generated_tokens,first_divergence,agreement,kv_bytes,peak_kv_bytes,kv_ratio,ttft_ms,"
                  "prefill_tok_s,decode_tok_s,decode_ratio,convert_ms,text\n";
    for (const ComparisonRow& r : rows_) {
        QStringList f;
        f << csvField(QString::fromStdString(r.strategy)) << QString::number(r.context) << QString::number(r.tokens.size())
          << QString::number(r.first_divergence) << QString::number(r.agreement, 'g', 10) << QString::number(r.kv_bytes)
          << QString::number(r.peak_kv_bytes) << QString::number(r.kv_ratio, 'g', 10) << QString::number(r.ttft_ms, 'g', 10)
          << QString::number(r.prefill_tok_s, 'g', 10) << QString::number(r.decode_tok_s, 'g', 10)
          << QString::number(r.decode_ratio, 'g', 10) << QString::number(r.convert_ms, 'g', 10)
          << csvField(QString::fromStdString(r.text));
        out += f.join(',') + '\n';
    }
    return out;
}

bool ComparisonView::exportCsv(const QString& path) const {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
    const QByteArray data = csv().toUtf8();
    return f.write(data) == data.size();
}

}  // namespace kvchat
