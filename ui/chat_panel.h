#pragma once
// The open chat's own controls, in a dock beside the transcript: its system prompt, sampling
// (temperature, top-k, top-p, min-p, repetition penalty, seed), answer limit, context length, and
// its cache strategy (the strategy panel, placed inside). The fields show what the chat's next
// turn uses: its own values where it has them, else the global settings'. Apply keeps, as the
// chat's own, the values that differ from the global ones; "Use defaults" drops them all.
//
// The panel only asks (settingsApplied, systemPromptApplied) and shows what it is told (setValues).
#include "ui/chat_settings_value.h"

#include <QMetaType>
#include <QWidget>

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace kvchat {

// What the panel shows for one conversation.
struct ChatPanelValues {
    qint64 conversationId = 0;
    ConversationSettings own;  // the conversation's own values
    ChatSettings global;       // the defaults for what it does not set
    QString systemPrompt;      // empty: none
    qint64 modelContext = 0;   // the model's context length (0: no model)
};

class ChatPanel : public QWidget {
    Q_OBJECT
public:
    explicit ChatPanel(QWidget* parent = nullptr);

    void setValues(const ChatPanelValues& values);
    const ChatPanelValues& values() const { return values_; }
    // No conversation open: the fields are disabled.
    void clear();
    // The strategy panel (or any widget) under the chat's own settings.
    void setStrategyWidget(QWidget* widget);

    // What the fields say now, as the conversation's own values (only those that differ from the
    // global settings).
    ConversationSettings chosenSettings() const;

    // Fields, for tests.
    QPlainTextEdit* systemPromptEdit() const { return system_; }
    QDoubleSpinBox* temperatureBox() const { return temperature_; }
    QSpinBox* topKBox() const { return topK_; }
    QDoubleSpinBox* topPBox() const { return topP_; }
    QDoubleSpinBox* minPBox() const { return minP_; }
    QDoubleSpinBox* repetitionPenaltyBox() const { return repetition_; }
    QSpinBox* seedBox() const { return seed_; }  // its minimum (shown "global") leaves the seed to the settings
    QSpinBox* maxNewTokensBox() const { return maxNew_; }
    QSpinBox* contextLengthBox() const { return context_; }  // its minimum (shown "model's") is the model's
    QPushButton* applyButton() const { return apply_; }
    QPushButton* defaultsButton() const { return defaults_; }
    QPushButton* systemPromptButton() const { return applySystem_; }

Q_SIGNALS:
    void settingsApplied(qint64 conversationId, const kvchat::ConversationSettings& own);
    void systemPromptApplied(qint64 conversationId, const QString& text);

private:
    void showFields();
    void updateButtons();

    ChatPanelValues values_;
    QPlainTextEdit* system_ = nullptr;
    QPushButton* applySystem_ = nullptr;
    QLabel* systemNote_ = nullptr;
    QDoubleSpinBox* temperature_ = nullptr;
    QSpinBox* topK_ = nullptr;
    QDoubleSpinBox* topP_ = nullptr;
    QDoubleSpinBox* minP_ = nullptr;
    QDoubleSpinBox* repetition_ = nullptr;
    QSpinBox* seed_ = nullptr;
    QSpinBox* maxNew_ = nullptr;
    QSpinBox* context_ = nullptr;
    QLabel* ownNote_ = nullptr;
    QPushButton* apply_ = nullptr;
    QPushButton* defaults_ = nullptr;
    QWidget* strategyBox_ = nullptr;
};

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::ChatPanelValues)
Q_DECLARE_METATYPE(kvchat::ConversationSettings)
