#pragma once
#include <QMainWindow>

class QListView;
class QTextBrowser;
class QPlainTextEdit;
class QPushButton;
class QComboBox;
class QLabel;

namespace kvchat {

// The chat layout: conversations on the left, the transcript and the message box in the
// middle, the cache inspector docked on the right.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(const QString& modelPath, QWidget* parent = nullptr);

private:
    QListView* conversations_ = nullptr;
    QTextBrowser* transcript_ = nullptr;
    QPlainTextEdit* input_ = nullptr;
    QPushButton* send_ = nullptr;
    QComboBox* strategy_ = nullptr;
    QLabel* modelLabel_ = nullptr;
};

}  // namespace kvchat
