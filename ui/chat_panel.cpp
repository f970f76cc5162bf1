#include "ui/chat_panel.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include <cmath>

namespace kvchat {

namespace {

QDoubleSpinBox* realBox(const char* name, double lo, double hi, double step, int decimals) {
    auto* b = new QDoubleSpinBox;
    b->setObjectName(QString::fromLatin1(name));
    b->setRange(lo, hi);
    b->setSingleStep(step);
    b->setDecimals(decimals);
    b->setMinimumWidth(0);
    b->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
    return b;
}

QSpinBox* wholeBox(const char* name, int lo, int hi) {
    auto* b = new QSpinBox;
    b->setObjectName(QString::fromLatin1(name));
    b->setRange(lo, hi);
    b->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
    return b;
}

// A field's value differs from the global one when it would be stored otherwise (the boxes round
// to their decimals).
bool differs(double field, double global, int decimals) {
    return std::abs(field - global) > 0.5 * std::pow(10.0, -decimals);
}

}  // namespace

ChatPanel::ChatPanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("chatPanel"));
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    auto* scroll = new QScrollArea;
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    // A narrow dock wraps the rows instead of scrolling sideways.
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    auto* content = new QWidget;
    auto* v = new QVBoxLayout(content);
    scroll->setWidget(content);
    outer->addWidget(scroll);

    auto* systemBox = new QGroupBox(tr("System prompt"));
    auto* sv = new QVBoxLayout(systemBox);
    system_ = new QPlainTextEdit;
    system_->setObjectName(QStringLiteral("chatSystemPrompt"));
    system_->setAccessibleName(tr("System prompt of this chat"));
    system_->setPlaceholderText(tr("None"));
    system_->setTabChangesFocus(true);
    system_->setMaximumHeight(110);
    applySystem_ = new QPushButton(tr("Apply prompt"));
    applySystem_->setObjectName(QStringLiteral("chatSystemPromptApply"));
    systemNote_ = new QLabel(tr("Changing it renders the conversation again with the new prompt. The cache reuses what "
                                "still matches; as the system prompt comes first, the rest is prefilled again on the "
                                "next turn."));
    systemNote_->setObjectName(QStringLiteral("chatSystemPromptNote"));
    systemNote_->setWordWrap(true);
    systemNote_->setForegroundRole(QPalette::PlaceholderText);
    sv->addWidget(system_);
    sv->addWidget(applySystem_, 0, Qt::AlignRight);
    sv->addWidget(systemNote_);
    v->addWidget(systemBox);
    connect(system_, &QPlainTextEdit::textChanged, this, &ChatPanel::updateButtons);
    connect(applySystem_, &QPushButton::clicked, this, [this] {
        if (values_.conversationId != 0) Q_EMIT systemPromptApplied(values_.conversationId, system_->toPlainText());
    });

    auto* samplingBox = new QGroupBox(tr("Sampling and limits"));
    auto* form = new QFormLayout(samplingBox);
    form->setRowWrapPolicy(QFormLayout::WrapLongRows);
    temperature_ = realBox("chatTemperature", 0.0, 100.0, 0.05, 2);
    topK_ = wholeBox("chatTopK", 0, 100000);
    topK_->setSpecialValueText(tr("off"));
    topP_ = realBox("chatTopP", 0.01, 1.0, 0.01, 2);
    minP_ = realBox("chatMinP", 0.0, 0.99, 0.01, 2);
    minP_->setSpecialValueText(tr("off"));
    repetition_ = realBox("chatRepetitionPenalty", 0.05, 10.0, 0.05, 2);
    seed_ = wholeBox("chatSeed", -1, 2147483647);
    seed_->setSpecialValueText(tr("as in Settings"));
    maxNew_ = wholeBox("chatMaxNewTokens", 1, 1 << 20);
    maxNew_->setSuffix(tr(" tokens"));
    context_ = wholeBox("chatContextLength", 15, 15);
    context_->setSuffix(tr(" tokens"));
    form->addRow(tr("&Temperature"), temperature_);
    form->addRow(tr("Top-&k"), topK_);
    form->addRow(tr("Top-&p"), topP_);
    form->addRow(tr("&Min-p"), minP_);
    form->addRow(tr("&Repetition penalty"), repetition_);
    form->addRow(tr("S&eed"), seed_);
    form->addRow(tr("&Answer limit"), maxNew_);
    form->addRow(tr("&Context length"), context_);
    ownNote_ = new QLabel;
    ownNote_->setObjectName(QStringLiteral("chatOwnNote"));
    ownNote_->setWordWrap(true);
    ownNote_->setForegroundRole(QPalette::PlaceholderText);
    form->addRow(ownNote_);
    auto* buttons = new QHBoxLayout;
    defaults_ = new QPushButton(tr("Use defaults"));
    defaults_->setObjectName(QStringLiteral("chatUseDefaults"));
    defaults_->setToolTip(tr("Drop this chat's own values: the global Settings apply again"));
    apply_ = new QPushButton(tr("Apply"));
    apply_->setObjectName(QStringLiteral("chatSettingsApply"));
    apply_->setToolTip(tr("Keep these values for this chat (from its next turn on)"));
    buttons->addStretch(1);
    buttons->addWidget(defaults_);
    buttons->addWidget(apply_);
    form->addRow(buttons);
    v->addWidget(samplingBox);
    for (QDoubleSpinBox* b : {temperature_, topP_, minP_, repetition_})
        connect(b, &QDoubleSpinBox::valueChanged, this, &ChatPanel::updateButtons);
    for (QSpinBox* b : {topK_, seed_, maxNew_, context_}) connect(b, &QSpinBox::valueChanged, this, &ChatPanel::updateButtons);
    connect(apply_, &QPushButton::clicked, this, [this] {
        if (values_.conversationId != 0) Q_EMIT settingsApplied(values_.conversationId, chosenSettings());
    });
    connect(defaults_, &QPushButton::clicked, this, [this] {
        if (values_.conversationId != 0) Q_EMIT settingsApplied(values_.conversationId, ConversationSettings{});
    });

    strategyBox_ = new QGroupBox(tr("Cache strategy"));
    strategyBox_->setObjectName(QStringLiteral("chatStrategyBox"));
    new QVBoxLayout(strategyBox_);
    strategyBox_->setVisible(false);
    v->addWidget(strategyBox_);
    v->addStretch(1);
    clear();
}

void ChatPanel::setStrategyWidget(QWidget* widget) {
    strategyBox_->layout()->addWidget(widget);
    strategyBox_->setVisible(true);
}

void ChatPanel::clear() {
    values_ = {};
    showFields();
}

void ChatPanel::setValues(const ChatPanelValues& values) {
    values_ = values;
    showFields();
}

void ChatPanel::showFields() {
    const ChatSettings& g = values_.global;
    const ConversationSettings& o = values_.own;
    const SamplerConfig& s = g.sampling;
    temperature_->setValue(o.temperature.value_or(s.temperature));
    topK_->setValue(static_cast<int>(o.top_k.value_or(s.top_k)));
    topP_->setValue(o.top_p.value_or(s.top_p));
    minP_->setValue(o.min_p.value_or(s.min_p));
    repetition_->setValue(o.repetition_penalty.value_or(s.repetition_penalty));
    seed_->setValue(o.seed ? static_cast<int>(*o.seed) : -1);
    maxNew_->setValue(static_cast<int>(o.max_new_tokens.value_or(g.max_new_tokens)));
    // The minimum stands for "the model's": a limit equal to it is no limit of the chat's own.
    const int model = static_cast<int>(std::min<qint64>(values_.modelContext, 1 << 30));
    context_->setRange(15, std::max(16, model));
    context_->setSpecialValueText(model > 0 ? tr("model's (%1)").arg(QLocale().toString(model)) : tr("model's"));
    context_->setValue(o.context_length ? static_cast<int>(*o.context_length) : 15);
    system_->setPlainText(values_.systemPrompt);
    const bool open = values_.conversationId != 0;
    for (QWidget* w : std::initializer_list<QWidget*>{system_, temperature_, topK_, topP_, minP_, repetition_, seed_,
                                                     maxNew_, context_})
        w->setEnabled(open);
    ownNote_->setText(!open          ? tr("Open a conversation to set its own values.")
                      : o.empty()    ? tr("This chat uses the global Settings.")
                                     : tr("This chat has its own values (the others come from Settings)."));
    updateButtons();
}

ConversationSettings ChatPanel::chosenSettings() const {
    const ChatSettings& g = values_.global;
    const SamplerConfig& s = g.sampling;
    ConversationSettings c;
    if (differs(temperature_->value(), s.temperature, temperature_->decimals())) c.temperature = temperature_->value();
    if (topK_->value() != s.top_k) c.top_k = topK_->value();
    if (differs(topP_->value(), s.top_p, topP_->decimals())) c.top_p = topP_->value();
    if (differs(minP_->value(), s.min_p, minP_->decimals())) c.min_p = minP_->value();
    if (differs(repetition_->value(), s.repetition_penalty, repetition_->decimals()))
        c.repetition_penalty = repetition_->value();
    if (seed_->value() >= 0) c.seed = seed_->value();
    if (maxNew_->value() != g.max_new_tokens) c.max_new_tokens = maxNew_->value();
    if (context_->value() > context_->minimum() && context_->value() < values_.modelContext)
        c.context_length = context_->value();
    return c;
}

void ChatPanel::updateButtons() {
    const bool open = values_.conversationId != 0;
    apply_->setEnabled(open && !(chosenSettings() == values_.own));
    defaults_->setEnabled(open && !values_.own.empty());
    applySystem_->setEnabled(open && system_->toPlainText() != values_.systemPrompt);
}

}  // namespace kvchat
