#pragma once
// Strategies side by side: pick 2 to 4 strategies and a conversation (or one prompt); the worker
// replays it under each with greedy decoding and the view shows the answers in columns, the first
// token that parts from dynamic's highlighted, peak KV bytes, time to first token, tokens per
// second and agreement, a chart of KV bytes against tokens, and exports the rows as CSV. The view
// only asks (compareRequested, cancelRequested) and shows what it is given.
#include "engine/generate/comparison.h"

#include <QList>
#include <QPair>
#include <QWidget>

#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTextEdit;
class QHBoxLayout;

namespace kvchat {

class KvBytesChart;

class ComparisonView : public QWidget {
    Q_OBJECT
public:
    static constexpr int kMaxStrategies = 4;
    static QColor columnColor(int column);
    static QColor divergenceColor() { return QColor(0xff, 0xcc, 0x80); }

    explicit ComparisonView(QWidget* parent = nullptr);

    // The conversations one may replay: (id, title).
    void setConversations(const QList<QPair<qint64, QString>>& conversations);
    // The strategies to compare (first: dynamic, the reference); invalid ones keep their message.
    void setStrategies(const QStringList& specs);
    QStringList strategies() const;  // canonical, the empty pickers left out
    QString validationMessage() const { return error_; }

    // Results.
    const std::vector<ComparisonRow>& rows() const { return rows_; }
    int columnCount() const { return static_cast<int>(columns_.size()); }
    QTextEdit* answerView(int column) const;
    QLabel* metricsLabel(int column) const;
    // [begin, end) of the highlighted first diverging token in a column's answer text; (-1, -1): none.
    QPair<int, int> divergenceSpan(int column) const;
    KvBytesChart* chart() const { return chart_; }
    QLabel* timingNote() const { return timingNote_; }
    QPushButton* runButton() const { return run_; }
    QPushButton* cancelButton() const { return cancel_; }
    QLineEdit* promptEdit() const { return prompt_; }
    QComboBox* strategyPicker(int i) const;
    QSpinBox* tokensBox() const { return tokens_; }
    bool busy() const { return busy_; }

    QString csv() const;
    bool exportCsv(const QString& path) const;

public Q_SLOTS:
    void showRows(const std::vector<kvchat::ComparisonRow>& rows);
    void showProgress(const QString& task, qint64 done, qint64 total);
    void showError(const QString& message);

Q_SIGNALS:
    // conversationId >= 0: replay that conversation's transcript; else `prompt` as one message.
    void compareRequested(const QStringList& strategies, qint64 conversationId, const QString& prompt, int genTokens);
    void cancelRequested();

private:
    void validate();
    void request();
    void setBusy(bool busy);
    void clearColumns();

    struct Column {
        QWidget* box = nullptr;
        QLabel* title = nullptr;
        QTextEdit* answer = nullptr;
        QLabel* metrics = nullptr;
        QPair<int, int> span{-1, -1};
    };

    std::vector<QComboBox*> pickers_;
    QRadioButton* fromConversation_ = nullptr;
    QRadioButton* fromPrompt_ = nullptr;
    QComboBox* conversation_ = nullptr;
    QLineEdit* prompt_ = nullptr;
    QSpinBox* tokens_ = nullptr;
    QPushButton* run_ = nullptr;
    QPushButton* cancel_ = nullptr;
    QPushButton* export_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel* status_ = nullptr;
    QLabel* errorLabel_ = nullptr;
    QLabel* timingNote_ = nullptr;
    QHBoxLayout* columnsLayout_ = nullptr;
    KvBytesChart* chart_ = nullptr;
    std::vector<Column> columns_;
    std::vector<ComparisonRow> rows_;
    QString error_;
    bool busy_ = false;
};

}  // namespace kvchat
