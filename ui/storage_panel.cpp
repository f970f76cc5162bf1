#include "ui/storage_panel.h"

#include <QDateTime>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace kvchat {

namespace {

// Binary units (KiB, MiB, GiB), as everywhere in the window; the budget is set in MiB.
QString size_text(qint64 bytes) { return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeIecFormat); }

// A time today as its time, an earlier one as its date: the column stays narrow.
QString when_text(qint64 ms) {
    const QDateTime t = QDateTime::fromMSecsSinceEpoch(ms);
    const QLocale loc;
    return t.date() == QDate::currentDate() ? loc.toString(t.time(), QLocale::ShortFormat)
                                            : loc.toString(t.date(), QLocale::ShortFormat);
}

}  // namespace

StoragePanel::StoragePanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("storagePanel"));
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    total_ = new QLabel;
    total_->setObjectName(QStringLiteral("storageTotal"));
    total_->setWordWrap(true);
    v->addWidget(total_);
    fill_ = new QProgressBar;
    fill_->setObjectName(QStringLiteral("storageFill"));
    fill_->setAccessibleName(tr("Saved caches against the budget"));
    fill_->setRange(0, 1000);
    fill_->setTextVisible(false);
    v->addWidget(fill_);

    table_ = new QTreeWidget;
    table_->setObjectName(QStringLiteral("storageTable"));
    table_->setAccessibleName(tr("Saved caches"));
    table_->setRootIsDecorated(false);
    table_->setUniformRowHeights(true);
    table_->setHeaderLabels({tr("Name"), tr("Tokens"), tr("Strategy"), tr("On disk"), tr("Ckpts"), tr("Last used")});
    table_->headerItem()->setToolTip(3, tr("Size of the saved cache snapshot"));
    table_->headerItem()->setToolTip(4, tr("Checkpoints saved with it (for regenerating or editing the last turn)"));
    table_->setMinimumWidth(360);
    table_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int c = 1; c < 6; ++c) table_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    // A strategy's canonical text can be long: a fixed column, the whole text in its tooltip.
    table_->header()->setSectionResizeMode(2, QHeaderView::Interactive);
    table_->header()->resizeSection(2, 90);
    table_->header()->setStretchLastSection(false);
    connect(table_, &QTreeWidget::itemSelectionChanged, this, &StoragePanel::updateButtons);
    v->addWidget(table_, 1);

    auto* budgetRow = new QHBoxLayout;
    auto* label = new QLabel(tr("&Budget:"));
    budget_ = new QDoubleSpinBox;
    budget_->setObjectName(QStringLiteral("storageBudget"));
    budget_->setAccessibleName(tr("Budget for saved caches, in MiB"));
    budget_->setDecimals(0);
    budget_->setRange(0, 1e7);
    budget_->setSingleStep(100);
    budget_->setSuffix(tr(" MiB"));
    label->setBuddy(budget_);
    apply_ = new QPushButton(tr("&Apply"));
    apply_->setObjectName(QStringLiteral("applyStorageBudgetButton"));
    apply_->setToolTip(tr("Keep the saved caches within this budget now and from now on; the least recently used go first"));
    default_ = new QPushButton(tr("De&fault"));
    default_->setObjectName(QStringLiteral("defaultStorageBudgetButton"));
    default_->setToolTip(tr("2 GB, or less when the disk is nearly full"));
    budgetRow->addWidget(label);
    budgetRow->addWidget(budget_, 1);
    budgetRow->addWidget(apply_);
    budgetRow->addWidget(default_);
    v->addLayout(budgetRow);

    auto* actions = new QHBoxLayout;
    drop_ = new QPushButton(tr("&Remove saved cache"));
    drop_->setObjectName(QStringLiteral("dropCacheButton"));
    drop_->setToolTip(tr("The messages stay; the cache is computed again when the conversation is next opened"));
    auto* refresh = new QPushButton(tr("Refres&h"));
    refresh->setObjectName(QStringLiteral("refreshStorageButton"));
    actions->addWidget(drop_);
    actions->addStretch(1);
    actions->addWidget(refresh);
    v->addLayout(actions);

    connect(refresh, &QPushButton::clicked, this, &StoragePanel::refreshRequested);
    connect(apply_, &QPushButton::clicked, this, [this] {
        Q_EMIT budgetRequested(static_cast<qint64>(budget_->value() * 1048576.0));
    });
    connect(default_, &QPushButton::clicked, this, [this] { Q_EMIT budgetRequested(-1); });
    connect(drop_, &QPushButton::clicked, this, [this] {
        const int row = selectedRow();
        if (row < 0) return;
        const StorageItem& it = report_.items[row];
        Q_EMIT dropRequested(it.prefix, it.id);
    });
    setReport({});
}

void StoragePanel::setReport(const StorageReport& report) {
    const int keep = selectedRow();
    const qint64 keepId = keep >= 0 ? report_.items[keep].id : 0;
    const bool keepPrefix = keep >= 0 && report_.items[keep].prefix;
    report_ = report;
    table_->clear();
    const QLocale loc;
    int reselect = -1;
    for (int i = 0; i < report.items.size(); ++i) {
        const StorageItem& it = report.items[i];
        auto* item = new QTreeWidgetItem(table_);
        item->setText(0, it.prefix ? tr("%1 (prefix)").arg(it.name) : it.name);
        item->setText(1, loc.toString(it.tokens));
        item->setText(2, it.cacheSpec);
        item->setToolTip(2, it.cacheSpec);
        item->setToolTip(0, it.prefix ? tr("Prefix %1").arg(it.name) : tr("Conversation %1").arg(it.name));
        item->setText(3, it.saved ? size_text(it.bytes) : tr("none"));
        item->setToolTip(3, it.saved ? tr("%1 bytes").arg(loc.toString(it.bytes))
                                     : tr("No cache saved: computed again when opened"));
        item->setText(4, it.saved ? loc.toString(it.checkpoints) : QString());
        item->setText(5, when_text(it.lastUsedMs));
        item->setToolTip(5, loc.toString(QDateTime::fromMSecsSinceEpoch(it.lastUsedMs), QLocale::LongFormat));
        for (int c : {1, 3, 4}) item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        if (it.id == keepId && it.prefix == keepPrefix) reselect = i;
    }
    const int saved = static_cast<int>(std::count_if(report.items.begin(), report.items.end(),
                                                     [](const StorageItem& it) { return it.saved; }));
    total_->setText(tr("Saved caches: %1 of %2 budget%3 (%4 of %5 conversations and prefixes)")
                        .arg(size_text(report.totalBytes), size_text(report.budgetBytes),
                             report.budgetIsDefault ? tr(", the default") : QString())
                        .arg(saved)
                        .arg(report.items.size()));
    fill_->setValue(report.budgetBytes > 0
                        ? static_cast<int>(std::min<double>(1000.0, 1000.0 * static_cast<double>(report.totalBytes) /
                                                                        static_cast<double>(report.budgetBytes)))
                        : 0);
    if (!budget_->hasFocus()) budget_->setValue(std::round(static_cast<double>(report.budgetBytes) / 1048576.0));
    if (reselect >= 0) selectRow(reselect);
    updateButtons();
}

int StoragePanel::selectedRow() const {
    const auto sel = table_->selectedItems();
    return sel.isEmpty() ? -1 : table_->indexOfTopLevelItem(sel.first());
}

void StoragePanel::selectRow(int row) {
    if (QTreeWidgetItem* item = table_->topLevelItem(row)) table_->setCurrentItem(item);
}

void StoragePanel::updateButtons() {
    const int row = selectedRow();
    drop_->setEnabled(row >= 0 && report_.items[row].saved);
}

}  // namespace kvchat
