#pragma once
// The storage view: every conversation and prefix with its saved cache (tokens, strategy, bytes
// on disk, checkpoints, last use), the total against the disk budget, and actions to remove a
// saved cache or set the budget (applied at once: the least recently used caches go first).
// Every change is a request to the worker; the view is redrawn from the report it sends back.
#include "ui/engine_values.h"

#include <QWidget>

class QDoubleSpinBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QTreeWidget;

namespace kvchat {

class StoragePanel : public QWidget {
    Q_OBJECT
public:
    explicit StoragePanel(QWidget* parent = nullptr);
    void setReport(const StorageReport& report);
    const StorageReport& report() const { return report_; }
    // The selected row's index in report().items, or -1.
    int selectedRow() const;
    void selectRow(int row);

Q_SIGNALS:
    void refreshRequested();
    void dropRequested(bool prefix, qint64 id);
    void budgetRequested(qint64 bytes);  // < 0: the default

private:
    void updateButtons();

    StorageReport report_;
    QTreeWidget* table_ = nullptr;
    QLabel* total_ = nullptr;
    QProgressBar* fill_ = nullptr;
    QDoubleSpinBox* budget_ = nullptr;
    QPushButton* drop_ = nullptr;
    QPushButton* apply_ = nullptr;
    QPushButton* default_ = nullptr;
};

}  // namespace kvchat
