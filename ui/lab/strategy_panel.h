#pragma once
// The strategy of the current conversation: a preset and its parameters (and the + combinations),
// validated as typed with the engine's own messages; before Apply, the engine's plan of what the
// switch will do; Apply and Cancel with progress. The panel only asks (planRequested,
// applyRequested, cancelRequested) and shows what it is told; the worker does the work.
#include "engine/cache/conversion_plan.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTimer;

namespace kvchat {

struct CacheSpec;

class StrategyPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr int kPlanDelayMs = 250;  // typing pauses this long before a plan is asked for

    explicit StrategyPanel(QWidget* parent = nullptr);

    // The conversation's strategy: fills the fields (no plan is asked for).
    void setCurrentSpec(const QString& spec);
    // The same conversation's strategy reported again (a turn ended, its transcript was read
    // again): when it has not changed, a choice the user is making in the fields stays, with its
    // plan; otherwise as setCurrentSpec.
    void reportCurrentSpec(const QString& spec);
    QString currentSpec() const { return current_; }
    // The spec the fields describe now, canonical; empty while it is not valid.
    QString chosenSpec() const { return chosen_; }
    QString validationMessage() const;
    bool busy() const { return busy_; }

    // Fields, for tests and the window's shortcuts.
    QComboBox* presetBox() const { return preset_; }
    QLineEdit* specEdit() const { return spec_; }
    QLineEdit* field(const QString& name) const;  // nbits, residual, group, window, sinks, max_len, dir
    QPushButton* applyButton() const { return apply_; }
    QPushButton* cancelButton() const { return cancel_; }
    QLabel* planLabel() const { return planText_; }

public Q_SLOTS:
    void showPlan(const kvchat::ConversionPlan& plan);
    void showError(const QString& message);
    void showProgress(const QString& task, qint64 done, qint64 total);
    // The switch ended: ok (the conversation now uses `spec`), or not (message says why; a
    // cancel leaves the old cache in use).
    void applyFinished(bool ok, const QString& spec, const QString& message);

Q_SIGNALS:
    void planRequested(const QString& spec);
    void applyRequested(const QString& spec);
    void cancelRequested();

private:
    void fieldsEdited();
    void specEdited();
    void presetChosen(int index);
    void validate(const QString& text, bool fromSpecLine);
    void fillFields(const CacheSpec& spec);
    // The spec the preset, the check boxes and the fields describe; throws kvchat::Error naming
    // a field that holds no whole number, or a required one left empty.
    CacheSpec composeSpec() const;
    // Shows why the fields or the spec line name no valid spec; nothing is chosen.
    void rejectChoice(const QString& message);
    void updateEnabled();
    void setBusy(bool busy);

    QComboBox* preset_ = nullptr;
    QCheckBox* quantized_ = nullptr;
    QCheckBox* offloaded_ = nullptr;
    QLineEdit* nbits_ = nullptr;
    QLineEdit* residual_ = nullptr;
    QLineEdit* group_ = nullptr;
    QLineEdit* window_ = nullptr;
    QLineEdit* sinks_ = nullptr;
    QLineEdit* maxLen_ = nullptr;
    QLineEdit* dir_ = nullptr;
    QLineEdit* spec_ = nullptr;
    QLabel* error_ = nullptr;
    QLabel* kind_ = nullptr;
    QLabel* planText_ = nullptr;
    QPushButton* apply_ = nullptr;
    QPushButton* cancel_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel* progressLabel_ = nullptr;
    QTimer* planTimer_ = nullptr;

    QString current_;   // the conversation's strategy
    QString chosen_;    // what the fields say, canonical (empty: invalid)
    QString planned_;   // the spec the shown plan is for
    QString error_text_;
    bool filling_ = false;
    bool busy_ = false;
    bool planApplicable_ = false;
};

}  // namespace kvchat
