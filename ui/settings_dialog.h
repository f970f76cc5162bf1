#pragma once
// The chat settings (stored in the database, shared with kvchat-cli): threads, caches kept in
// memory and their budget, what happens when the context is full, the strategy of new chats,
// sampling, answer length and the system prompt of new chats. Also the app's local API server
// (kept in the user's QSettings, not the database: it is this app's, not kvchat-cli's).
#include "ui/chat_settings_value.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;

namespace kvchat {

// Whether the app serves the OpenAI-compatible API on localhost, and on which port.
struct ApiServerSetting {
    bool serve = false;
    int port = 8080;
};

class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    explicit SettingsDialog(const ChatSettings& settings, QWidget* parent = nullptr,
                            const ApiServerSetting& api = {});
    // The settings as the dialog's fields say (the values it was opened with for the rest).
    ChatSettings settings() const;
    ApiServerSetting apiServer() const;

private:
    ChatSettings base_;
    QSpinBox* threads_ = nullptr;
    QComboBox* device_ = nullptr;
    QSpinBox* resident_ = nullptr;
    QSpinBox* budgetMiB_ = nullptr;
    QComboBox* policy_ = nullptr;
    QComboBox* strategy_ = nullptr;
    QCheckBox* greedy_ = nullptr;
    QDoubleSpinBox* temperature_ = nullptr;
    QSpinBox* topK_ = nullptr;
    QDoubleSpinBox* topP_ = nullptr;
    QDoubleSpinBox* minP_ = nullptr;
    QDoubleSpinBox* repeat_ = nullptr;
    QCheckBox* randomSeed_ = nullptr;
    QSpinBox* seed_ = nullptr;
    QSpinBox* maxNew_ = nullptr;
    QPlainTextEdit* system_ = nullptr;
    QCheckBox* serveApi_ = nullptr;
    QSpinBox* apiPort_ = nullptr;
};

}  // namespace kvchat
