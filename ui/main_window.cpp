#include "ui/main_window.h"

#include <QComboBox>
#include <QDockWidget>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListView>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSplitter>
#include <QStatusBar>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace kvchat {

MainWindow::MainWindow(const QString& modelPath, QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(QStringLiteral("kvchat — %1").arg(QFileInfo(modelPath).fileName()));
    resize(1200, 760);

    auto* left = new QWidget;
    left->setObjectName("conversationPane");
    auto* leftLayout = new QVBoxLayout(left);
    auto* newChat = new QPushButton(tr("New chat"));
    newChat->setObjectName("newChatButton");
    conversations_ = new QListView;
    conversations_->setObjectName("conversationList");
    leftLayout->addWidget(newChat);
    leftLayout->addWidget(conversations_);

    auto* center = new QWidget;
    center->setObjectName("chatPane");
    auto* centerLayout = new QVBoxLayout(center);
    transcript_ = new QTextBrowser;
    transcript_->setObjectName("transcriptView");
    transcript_->setPlaceholderText(tr("Start a conversation below."));
    input_ = new QPlainTextEdit;
    input_->setObjectName("messageInput");
    input_->setPlaceholderText(tr("Type a message…"));
    input_->setMaximumHeight(120);
    auto* row = new QHBoxLayout;
    strategy_ = new QComboBox;
    strategy_->setObjectName("cacheStrategy");
    strategy_->setToolTip(tr("KV cache strategy for this conversation"));
    send_ = new QPushButton(tr("Send"));
    send_->setObjectName("sendButton");
    row->addWidget(new QLabel(tr("Cache:")));
    row->addWidget(strategy_, 1);
    row->addStretch(2);
    row->addWidget(send_);
    centerLayout->addWidget(transcript_, 1);
    centerLayout->addWidget(input_);
    centerLayout->addLayout(row);

    auto* splitter = new QSplitter;
    splitter->addWidget(left);
    splitter->addWidget(center);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 3);
    setCentralWidget(splitter);

    auto* dock = new QDockWidget(tr("Cache inspector"));
    dock->setObjectName("cacheInspectorDock");
    auto* inspector = new QWidget;
    inspector->setObjectName("cacheInspector");
    inspector->setMinimumWidth(260);
    dock->setWidget(inspector);
    addDockWidget(Qt::RightDockWidgetArea, dock);

    modelLabel_ = new QLabel(QFileInfo(modelPath).fileName());
    modelLabel_->setObjectName("modelLabel");
    statusBar()->addPermanentWidget(modelLabel_);
}

}  // namespace kvchat
