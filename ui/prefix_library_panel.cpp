#include "ui/prefix_library_panel.h"

#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace kvchat {

PrefixLibraryPanel::PrefixLibraryPanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("prefixLibrary"));
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    table_ = new QTreeWidget;
    table_->setObjectName(QStringLiteral("prefixTable"));
    table_->setAccessibleName(tr("Saved prefixes"));
    table_->setRootIsDecorated(false);
    table_->setUniformRowHeights(true);
    table_->setHeaderLabels({tr("Name"), tr("Msgs"), tr("Tokens"), tr("Cache"), tr("Last used")});
    table_->headerItem()->setToolTip(1, tr("Messages"));
    table_->headerItem()->setToolTip(3, tr("Size of the saved cache on disk"));
    table_->setMinimumWidth(320);
    table_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int c = 1; c < 5; ++c) table_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    connect(table_, &QTreeWidget::itemSelectionChanged, this, &PrefixLibraryPanel::updateButtons);
    connect(table_, &QTreeWidget::itemActivated, this, [this] {
        if (const qint64 id = selectedId()) Q_EMIT newChatRequested(id);
    });
    v->addWidget(table_, 1);

    auto* grid = new QGridLayout;
    auto button = [&](const QString& text, const QString& name, int row, int col) {
        auto* b = new QPushButton(text);
        b->setObjectName(name);
        b->setAccessibleName(text.simplified().remove(QLatin1Char('&')));
        grid->addWidget(b, row, col);
        return b;
    };
    QPushButton* fromText = button(tr("New from text…"), QStringLiteral("prefixFromTextButton"), 0, 0);
    QPushButton* fromChat = button(tr("From this chat…"), QStringLiteral("prefixFromChatButton"), 0, 1);
    newChat_ = button(tr("New chat from prefix"), QStringLiteral("newChatFromPrefixButton"), 1, 0);
    edit_ = button(tr("Edit…"), QStringLiteral("editPrefixButton"), 1, 1);
    rename_ = button(tr("Rename…"), QStringLiteral("renamePrefixButton"), 2, 0);
    remove_ = button(tr("Delete…"), QStringLiteral("deletePrefixButton"), 2, 1);
    v->addLayout(grid);
    connect(fromText, &QPushButton::clicked, this, &PrefixLibraryPanel::createFromText);
    connect(fromChat, &QPushButton::clicked, this, &PrefixLibraryPanel::createFromConversation);
    connect(newChat_, &QPushButton::clicked, this, [this] {
        if (const qint64 id = selectedId()) Q_EMIT newChatRequested(id);
    });
    connect(edit_, &QPushButton::clicked, this, &PrefixLibraryPanel::editSelected);
    connect(rename_, &QPushButton::clicked, this, &PrefixLibraryPanel::renameSelected);
    connect(remove_, &QPushButton::clicked, this, &PrefixLibraryPanel::removeSelected);
    updateButtons();
}

void PrefixLibraryPanel::setPrefixes(const QList<PrefixItem>& prefixes) {
    const qint64 keep = selectedId();
    prefixes_ = prefixes;
    table_->clear();
    const QLocale loc;
    for (const PrefixItem& p : prefixes) {
        auto* item = new QTreeWidgetItem(table_);
        item->setText(0, p.name);
        item->setText(1, loc.toString(p.messageCount));
        item->setText(2, loc.toString(p.tokens));
        item->setText(3, p.cacheBytes > 0 ? loc.formattedDataSize(p.cacheBytes, 1, QLocale::DataSizeIecFormat)
                                          : tr("none"));
        item->setText(4, p.lastUsedMs < 0 ? tr("never")
                                          : loc.toString(QDateTime::fromMSecsSinceEpoch(p.lastUsedMs), QLocale::ShortFormat));
        for (int c = 1; c < 5; ++c) item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        item->setToolTip(0, p.text.left(600));
        item->setData(0, Qt::UserRole, p.id);
    }
    select(keep);
    updateButtons();
}

qint64 PrefixLibraryPanel::selectedId() const {
    const QTreeWidgetItem* item = table_->currentItem();
    return item && item->isSelected() ? item->data(0, Qt::UserRole).toLongLong() : 0;
}

void PrefixLibraryPanel::select(qint64 id) {
    for (int i = 0; i < table_->topLevelItemCount(); ++i)
        if (table_->topLevelItem(i)->data(0, Qt::UserRole).toLongLong() == id) {
            table_->setCurrentItem(table_->topLevelItem(i));
            return;
        }
}

const PrefixItem* PrefixLibraryPanel::selected() const {
    const qint64 id = selectedId();
    for (const PrefixItem& p : prefixes_)
        if (p.id == id) return &p;
    return nullptr;
}

void PrefixLibraryPanel::updateButtons() {
    const PrefixItem* p = selected();
    newChat_->setEnabled(p);
    edit_->setEnabled(p && p->messageCount == 1);
    edit_->setToolTip(p && p->messageCount > 1 ? tr("A prefix of several messages is replaced by saving it again from a chat")
                                               : QString());
    rename_->setEnabled(p);
    remove_->setEnabled(p);
}

namespace {

// A small form: a name and a text (or a message count); returns false when cancelled.
bool askNameAndText(QWidget* parent, const QString& title, QString& name, QString* text, int* messages) {
    QDialog d(parent);
    d.setWindowTitle(title);
    d.setObjectName(QStringLiteral("prefixDialog"));
    auto* form = new QFormLayout(&d);
    auto* nameEdit = new QLineEdit(name);
    nameEdit->setObjectName(QStringLiteral("prefixName"));
    nameEdit->setAccessibleName(PrefixLibraryPanel::tr("Prefix name"));
    form->addRow(PrefixLibraryPanel::tr("&Name:"), nameEdit);
    QPlainTextEdit* textEdit = nullptr;
    QSpinBox* count = nullptr;
    if (text) {
        textEdit = new QPlainTextEdit(*text);
        textEdit->setObjectName(QStringLiteral("prefixText"));
        textEdit->setAccessibleName(PrefixLibraryPanel::tr("Prefix text"));
        textEdit->setTabChangesFocus(true);
        textEdit->setMinimumSize(420, 200);
        form->addRow(PrefixLibraryPanel::tr("&System prompt:"), textEdit);
    }
    if (messages) {
        count = new QSpinBox;
        count->setObjectName(QStringLiteral("prefixMessages"));
        count->setAccessibleName(PrefixLibraryPanel::tr("Messages to keep"));
        count->setRange(1, 100000);
        count->setValue(*messages);
        form->addRow(PrefixLibraryPanel::tr("&First messages:"), count);
    }
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel);
    form->addRow(buttons);
    QObject::connect(buttons, &QDialogButtonBox::accepted, &d, &QDialog::accept);
    QObject::connect(buttons, &QDialogButtonBox::rejected, &d, &QDialog::reject);
    if (d.exec() != QDialog::Accepted) return false;
    name = nameEdit->text().trimmed();
    if (text) *text = textEdit->toPlainText();
    if (messages) *messages = count->value();
    return !name.isEmpty();
}

}  // namespace

void PrefixLibraryPanel::createFromText() {
    QString name, text;
    if (askNameAndText(this, tr("New prefix from text"), name, &text, nullptr) && !text.trimmed().isEmpty())
        Q_EMIT saveFromTextRequested(name, text);
}

void PrefixLibraryPanel::createFromConversation() {
    QString name;
    int n = 2;
    if (askNameAndText(this, tr("New prefix from this chat"), name, nullptr, &n)) Q_EMIT saveFromConversationRequested(name, n);
}

void PrefixLibraryPanel::editSelected() {
    const PrefixItem* p = selected();
    if (!p) return;
    QString name = p->name, text = p->text;
    const qint64 id = p->id;
    if (!askNameAndText(this, tr("Edit prefix"), name, &text, nullptr)) return;
    if (name != p->name) Q_EMIT renameRequested(id, name);
    if (text != p->text) Q_EMIT editRequested(id, text);
}

void PrefixLibraryPanel::renameSelected() {
    const PrefixItem* p = selected();
    if (!p) return;
    bool ok = false;
    const qint64 id = p->id;
    const QString name = QInputDialog::getText(this, tr("Rename prefix"), tr("Name:"), QLineEdit::Normal, p->name, &ok);
    if (ok && !name.trimmed().isEmpty()) Q_EMIT renameRequested(id, name.trimmed());
}

void PrefixLibraryPanel::removeSelected() {
    const PrefixItem* p = selected();
    if (!p) return;
    const qint64 id = p->id;
    if (QMessageBox::question(this, tr("Delete prefix"),
                              tr("Delete the prefix \u201c%1\u201d and its saved cache? Conversations started from it "
                                 "keep their messages.")
                                  .arg(p->name)) == QMessageBox::Yes)
        Q_EMIT removeRequested(id);
}

}  // namespace kvchat
