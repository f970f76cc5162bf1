#include "ui/settings_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

namespace kvchat {

namespace {

template <class W>
W* named(W* w, const char* name, const QString& accessible) {
    w->setObjectName(QString::fromLatin1(name));
    w->setAccessibleName(accessible);
    return w;
}

QDoubleSpinBox* decimal(double lo, double hi, double step, int decimals) {
    auto* s = new QDoubleSpinBox;
    s->setRange(lo, hi);
    s->setSingleStep(step);
    s->setDecimals(decimals);
    return s;
}

}  // namespace

SettingsDialog::SettingsDialog(const ChatSettings& settings, QWidget* parent, const ApiServerSetting& api)
    : QDialog(parent), base_(settings) {
    setObjectName(QStringLiteral("settingsDialog"));
    setWindowTitle(tr("Settings"));
    auto* v = new QVBoxLayout(this);

    auto* engine = new QGroupBox(tr("Engine"));
    auto* ef = new QFormLayout(engine);
    threads_ = named(new QSpinBox, "threadsSetting", tr("Threads"));
    threads_->setRange(0, 256);
    threads_->setSpecialValueText(tr("one per core (%1)").arg(QThread::idealThreadCount()));
    threads_->setValue(settings.threads);
    ef->addRow(tr("&Threads:"), threads_);
    device_ = named(new QComboBox, "deviceSetting", tr("Compute device"));
    device_->addItem(tr("CPU"), QStringLiteral("cpu"));
    for (int i = 0; i < 4; ++i)
        device_->addItem(i == 0 ? tr("NVIDIA GPU (CUDA)") : tr("NVIDIA GPU %1 (CUDA)").arg(i),
                         i == 0 ? QStringLiteral("cuda") : QStringLiteral("cuda:%1").arg(i));
    if (device_->findData(QString::fromStdString(settings.device)) < 0)
        device_->addItem(QString::fromStdString(settings.device), QString::fromStdString(settings.device));
    device_->setCurrentIndex(device_->findData(QString::fromStdString(settings.device)));
    device_->setToolTip(tr("Where the model computes. Without a usable GPU the CPU is used, and the reason is shown."));
    ef->addRow(tr("&Device:"), device_);
    resident_ = named(new QSpinBox, "residentCachesSetting", tr("Caches kept in memory"));
    resident_->setRange(1, 64);
    resident_->setValue(settings.resident_caches);
    ef->addRow(tr("Caches kept in &memory:"), resident_);
    budgetMiB_ = named(new QSpinBox, "cacheBudgetSetting", tr("Cache memory budget in MiB"));
    budgetMiB_->setRange(0, 1 << 20);
    budgetMiB_->setSuffix(tr(" MiB"));
    budgetMiB_->setSpecialValueText(tr("no limit"));
    budgetMiB_->setValue(static_cast<int>(settings.cache_memory_budget / (1024 * 1024)));
    ef->addRow(tr("Cache memory &budget:"), budgetMiB_);
    policy_ = named(new QComboBox, "contextPolicySetting", tr("When the context is full"));
    policy_->addItem(tr("Refuse the message"), QStringLiteral("refuse"));
    policy_->addItem(tr("Keep the start and the most recent (sink)"), QStringLiteral("sink"));
    policy_->addItem(tr("Keep the most recent (sliding window)"), QStringLiteral("sliding"));
    policy_->setCurrentIndex(policy_->findData(QString::fromUtf8(context_policy_name(settings.context_policy).data())));
    ef->addRow(tr("When the &context is full:"), policy_);
    strategy_ = named(new QComboBox, "defaultStrategySetting", tr("Cache strategy of new chats"));
    strategy_->setEditable(true);
    strategy_->addItems({QStringLiteral("dynamic"), QStringLiteral("static:max_len=4096"), QStringLiteral("offloaded"),
                         QStringLiteral("quantized:nbits=4"), QStringLiteral("sliding_window:window=1024"),
                         QStringLiteral("sink:window=1024,sinks=4"), QStringLiteral("hybrid")});
    strategy_->setCurrentText(QString::fromStdString(settings.default_strategy));
    ef->addRow(tr("&Strategy of new chats:"), strategy_);
    v->addWidget(engine);

    auto* sampling = new QGroupBox(tr("Answers"));
    auto* sf = new QFormLayout(sampling);
    greedy_ = named(new QCheckBox(tr("Always the most likely token (greedy)")), "greedySetting", tr("Greedy"));
    greedy_->setChecked(settings.sampling.greedy);
    sf->addRow(greedy_);
    temperature_ = named(decimal(0.0, 5.0, 0.05, 2), "temperatureSetting", tr("Temperature"));
    temperature_->setValue(settings.sampling.temperature);
    sf->addRow(tr("T&emperature:"), temperature_);
    topK_ = named(new QSpinBox, "topKSetting", tr("Top-k"));
    topK_->setRange(0, 100000);
    topK_->setSpecialValueText(tr("off"));
    topK_->setValue(settings.sampling.top_k);
    sf->addRow(tr("Top-&k:"), topK_);
    topP_ = named(decimal(0.0, 1.0, 0.01, 2), "topPSetting", tr("Top-p"));
    topP_->setValue(settings.sampling.top_p);
    sf->addRow(tr("Top-&p:"), topP_);
    minP_ = named(decimal(0.0, 1.0, 0.01, 2), "minPSetting", tr("Min-p"));
    minP_->setValue(settings.sampling.min_p);
    sf->addRow(tr("M&in-p:"), minP_);
    repeat_ = named(decimal(0.5, 3.0, 0.05, 2), "repeatPenaltySetting", tr("Repetition penalty"));
    repeat_->setValue(settings.sampling.repetition_penalty);
    sf->addRow(tr("&Repetition penalty:"), repeat_);
    randomSeed_ = named(new QCheckBox(tr("A new random seed for every answer")), "randomSeedSetting", tr("Random seed"));
    randomSeed_->setChecked(settings.random_seed);
    sf->addRow(randomSeed_);
    seed_ = named(new QSpinBox, "seedSetting", tr("Seed"));
    seed_->setRange(0, 2147483647);
    seed_->setValue(static_cast<int>(std::min<uint64_t>(settings.sampling.seed, 2147483647u)));
    seed_->setEnabled(!settings.random_seed);
    connect(randomSeed_, &QCheckBox::toggled, seed_, [this](bool on) { seed_->setEnabled(!on); });
    sf->addRow(tr("S&eed:"), seed_);
    maxNew_ = named(new QSpinBox, "maxNewTokensSetting", tr("Longest answer in tokens"));
    maxNew_->setRange(1, 1 << 20);
    maxNew_->setValue(settings.max_new_tokens);
    sf->addRow(tr("Longest &answer (tokens):"), maxNew_);
    system_ = named(new QPlainTextEdit(QString::fromStdString(settings.system_prompt)), "systemPromptSetting",
                    tr("System prompt of new chats"));
    system_->setTabChangesFocus(true);
    system_->setPlaceholderText(tr("None"));
    system_->setMaximumHeight(90);
    sf->addRow(tr("System prompt of &new chats:"), system_);
    v->addWidget(sampling);

    auto* server = new QGroupBox(tr("Local API server"));
    auto* af = new QFormLayout(server);
    serveApi_ = named(new QCheckBox, "serveApiSetting", tr("Serve the API"));
    serveApi_->setChecked(api.serve);
    serveApi_->setToolTip(tr("An OpenAI-compatible API (/v1/chat/completions) on this machine only, for editors, "
                             "agents and scripts; its conversations appear in the list. One request computes at a time."));
    apiPort_ = named(new QSpinBox, "apiPortSetting", tr("API port"));
    apiPort_->setRange(1024, 65535);
    apiPort_->setValue(api.port);
    auto label = [this] { serveApi_->setText(tr("Serve the API on localhost:%1").arg(apiPort_->value())); };
    label();
    connect(apiPort_, &QSpinBox::valueChanged, this, label);
    af->addRow(serveApi_);
    af->addRow(tr("P&ort:"), apiPort_);
    v->addWidget(server);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel);
    buttons->setObjectName(QStringLiteral("settingsButtons"));
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    v->addWidget(buttons);
}

ChatSettings SettingsDialog::settings() const {
    ChatSettings s = base_;
    s.notices.clear();
    s.threads = threads_->value();
    s.device = device_->currentData().toString().toStdString();
    s.resident_caches = resident_->value();
    s.cache_memory_budget = static_cast<int64_t>(budgetMiB_->value()) * 1024 * 1024;
    s.context_policy = parse_context_policy(policy_->currentData().toString().toStdString());
    s.default_strategy = strategy_->currentText().trimmed().toStdString();
    s.sampling.greedy = greedy_->isChecked();
    s.sampling.temperature = static_cast<float>(temperature_->value());
    s.sampling.top_k = topK_->value();
    s.sampling.top_p = static_cast<float>(topP_->value());
    s.sampling.min_p = static_cast<float>(minP_->value());
    s.sampling.repetition_penalty = static_cast<float>(repeat_->value());
    s.random_seed = randomSeed_->isChecked();
    s.sampling.seed = static_cast<uint64_t>(seed_->value());
    s.max_new_tokens = maxNew_->value();
    s.system_prompt = system_->toPlainText().toStdString();
    return s;
}

ApiServerSetting SettingsDialog::apiServer() const { return {serveApi_->isChecked(), apiPort_->value()}; }

}  // namespace kvchat
