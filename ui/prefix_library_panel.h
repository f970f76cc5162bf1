#pragma once
// The saved prefixes (system prompts and conversation openings with their prefilled caches):
// name, messages, tokens, cache size on disk and last use; buttons to create one from text or
// from the open conversation's first messages, edit, rename, delete, and start a chat from it.
// Every change is a request to the worker; the list is redrawn from the values it sends back.
#include "ui/engine_values.h"

#include <QWidget>

class QPushButton;
class QTreeWidget;

namespace kvchat {

class PrefixLibraryPanel : public QWidget {
    Q_OBJECT
public:
    explicit PrefixLibraryPanel(QWidget* parent = nullptr);
    void setPrefixes(const QList<PrefixItem>& prefixes);
    const QList<PrefixItem>& prefixes() const { return prefixes_; }
    qint64 selectedId() const;
    void select(qint64 id);

Q_SIGNALS:
    void saveFromTextRequested(const QString& name, const QString& text);
    void saveFromConversationRequested(const QString& name, int messages);
    void editRequested(qint64 id, const QString& text);
    void renameRequested(qint64 id, const QString& name);
    void removeRequested(qint64 id);
    void newChatRequested(qint64 id);

private:
    void createFromText();
    void createFromConversation();
    void editSelected();
    void renameSelected();
    void removeSelected();
    void updateButtons();
    const PrefixItem* selected() const;

    QList<PrefixItem> prefixes_;
    QTreeWidget* table_ = nullptr;
    QPushButton* newChat_ = nullptr;
    QPushButton* edit_ = nullptr;
    QPushButton* rename_ = nullptr;
    QPushButton* remove_ = nullptr;
};

}  // namespace kvchat
