#pragma once
// The chat settings (stored in the database, shared with kvchat-cli): threads, caches kept in
// memory and their budget, what happens when the context is full, the strategy of new chats,
// sampling, answer length and the system prompt of new chats.
#include "ui/chat_settings_value.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;

namespace kvchat {

class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    explicit SettingsDialog(const ChatSettings& settings, QWidget* parent = nullptr);
    // The settings as the dialog's fields say (the values it was opened with for the rest).
    ChatSettings settings() const;

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
};

}  // namespace kvchat
