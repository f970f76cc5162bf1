#include "ui/message_view.h"

#include "ui/markdown_segments.h"
#include "ui/message_editor.h"
#include "ui/version_switcher.h"

#include "engine/chat/chat_template.h"

#include <QAbstractTextDocumentLayout>
#include <QClipboard>
#include <QFontDatabase>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QToolButton>
#include <QVBoxLayout>

#include <cmath>


namespace kvchat {

namespace {

// A read-only text as tall as its content at the width it is given (the transcript scrolls,
// never the message). New text is parsed into a fresh document that is then handed to the
// widget: parsing straight into the shown document lays it out again after every insertion,
// ten times slower for an answer of short lines.
class TextPiece : public QTextBrowser {
public:
    explicit TextPiece(QWidget* parent = nullptr) : QTextBrowser(parent) {
        setFrameShape(QFrame::NoFrame);
        setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        setOpenExternalLinks(true);
        setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
        viewport()->setAutoFillBackground(false);
        setAutoFillBackground(false);
        setTextInteractionFlags(Qt::TextBrowserInteraction | Qt::TextSelectableByKeyboard);
        setFixedHeight(fontMetrics().lineSpacing() + 8);
    }
    void show(const QString& text, bool markdown) {
        auto* doc = new QTextDocument(this);
        doc->setDefaultFont(font());
        doc->setDocumentMargin(2);
        if (markdown) {
            doc->setMarkdown(text);
            monospaceInlineCode(doc);
        } else {
            doc->setPlainText(text);
        }
        // The widget's first document belongs to it and goes with setDocument(); later ones are ours.
        QTextDocument* old = document();
        const bool ours = old && old->parent() == this;
        setDocument(doc);
        if (ours) old->deleteLater();
        connect(doc->documentLayout(), &QAbstractTextDocumentLayout::documentSizeChanged, this, [this] { fitHeight(); });
        fitHeight();
    }
    // Markdown marks `inline code` as fixed pitch, which the default font ignores: give those
    // runs the system's monospace family.
    static void monospaceInlineCode(QTextDocument* doc) {
        QList<std::pair<int, int>> runs;
        for (QTextBlock b = doc->begin(); b.isValid(); b = b.next())
            for (auto it = b.begin(); !it.atEnd(); ++it)
                if (it.fragment().charFormat().fontFixedPitch())
                    runs.push_back({it.fragment().position(), it.fragment().length()});
        if (runs.isEmpty()) return;
        QTextCharFormat mono;
        mono.setFontFamilies({QFontDatabase::systemFont(QFontDatabase::FixedFont).family()});
        for (const auto& [pos, len] : runs) {
            QTextCursor c(doc);
            c.setPosition(pos);
            c.setPosition(pos + len, QTextCursor::KeepAnchor);
            c.mergeCharFormat(mono);
        }
    }
    // QTextEdit keeps the document as wide as the viewport (setting the width here would lay the
    // whole document out again on every call).
    void fitHeight() {
        const int h = static_cast<int>(std::ceil(document()->size().height())) + 2 * frameWidth();
        if (h != height()) setFixedHeight(h);
    }
};

}  // namespace

namespace {

QString roleTitle(MessageRole r) {
    switch (r) {
        case MessageRole::System: return MessageView::tr("System");
        case MessageRole::User: return MessageView::tr("You");
        case MessageRole::Assistant: return MessageView::tr("Assistant");
    }
    return {};
}

QString number(qint64 n) { return QLocale().toString(n); }

}  // namespace

MessageView::MessageView(const MessageItem& message, QWidget* parent) : QFrame(parent), message_(message) {
    setObjectName(QStringLiteral("message"));
    setFrameShape(QFrame::StyledPanel);
    // The user's messages stand out on the palette's alternate base, in light and dark themes alike.
    setAutoFillBackground(true);
    setBackgroundRole(message.role == MessageRole::User ? QPalette::AlternateBase : QPalette::Base);
    setAccessibleName(roleTitle(message.role) + tr(" message"));

    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(10, 6, 10, 6);
    outer->setSpacing(4);
    auto* header = new QHBoxLayout;
    roleLabel_ = new QLabel(QStringLiteral("<b>%1</b>").arg(roleTitle(message.role)));
    header->addWidget(roleLabel_);
    header->addStretch(1);
    auto tool = [&](const QString& text, const QString& name, const QString& tip) {
        auto* b = messageToolButton(text, name, tip);
        header->addWidget(b);
        return b;
    };
    if (message.role == MessageRole::User) {
        edit_ = tool(tr("Edit"), QStringLiteral("editMessageButton"), tr("Edit this message and answer it again"));
        connect(edit_, &QToolButton::clicked, this, &MessageView::startEditing);
    }
    if (message.role == MessageRole::Assistant) {
        regenerate_ = tool(tr("Regenerate"), QStringLiteral("regenerateButton"), tr("Answer again (Ctrl+R)"));
        regenerate_->setVisible(false);
        connect(regenerate_, &QToolButton::clicked, this, &MessageView::regenerateRequested);
    }
    branch_ = tool(tr("Branch"), QStringLiteral("branchButton"),
                   tr("Branch from here: a new conversation with the messages up to this one, reusing their cache"));
    connect(branch_, &QToolButton::clicked, this, [this] { Q_EMIT branchRequested(message_.ordinal); });
    copy_ = tool(tr("Copy"), QStringLiteral("copyMessageButton"), tr("Copy this message"));
    connect(copy_, &QToolButton::clicked, this,
            [this] { QGuiApplication::clipboard()->setText(message_.content); });
    // A thin line with words where the conversation's cache strategy changed.
    auto divider = [&](const QString& name) {
        auto* row = new QWidget;
        auto* h = new QHBoxLayout(row);
        h->setContentsMargins(0, 0, 0, 0);
        auto line = [] {
            auto* f = new QFrame;
            f->setFrameShape(QFrame::HLine);
            f->setFrameShadow(QFrame::Sunken);
            return f;
        };
        auto* l = new QLabel;
        l->setObjectName(name);
        l->setAlignment(Qt::AlignCenter);
        l->setForegroundRole(QPalette::PlaceholderText);
        h->addWidget(line(), 1);
        h->addWidget(l);
        h->addWidget(line(), 1);
        row->setVisible(false);
        return l;
    };
    dividerBefore_ = divider(QStringLiteral("strategyDivider"));
    outer->addWidget(dividerBefore_->parentWidget());
    outer->addLayout(header);

    if (message.role == MessageRole::Assistant) {
        // Folded by default: the reasoning can be long, and the answer is what was asked for.
        thinkingToggle_ = new QToolButton;
        thinkingToggle_->setObjectName(QStringLiteral("thinkingToggle"));
        thinkingToggle_->setCheckable(true);
        thinkingToggle_->setAutoRaise(true);
        thinkingToggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
        thinkingToggle_->setArrowType(Qt::RightArrow);
        thinkingToggle_->setToolTip(tr("Show or hide the model's reasoning"));
        thinkingToggle_->setVisible(false);
        outer->addWidget(thinkingToggle_);
        auto* text = new TextPiece;
        text->setObjectName(QStringLiteral("thinkingText"));
        text->setAccessibleName(tr("Reasoning"));
        text->setForegroundRole(QPalette::PlaceholderText);
        text->setVisible(false);
        thinkingText_ = text;
        outer->addWidget(thinkingText_);
        connect(thinkingToggle_, &QToolButton::toggled, this, [this](bool open) {
            thinkingToggle_->setArrowType(open ? Qt::DownArrow : Qt::RightArrow);
            thinkingText_->setVisible(open);
        });
    }

    body_ = new QVBoxLayout;
    body_->setSpacing(4);
    outer->addLayout(body_);
    cutNote_ = new QLabel;
    cutNote_->setObjectName(QStringLiteral("cutNote"));
    cutNote_->setVisible(false);
    outer->addWidget(cutNote_);
    stateNote_ = new QLabel;
    stateNote_->setObjectName(QStringLiteral("messageState"));
    stateNote_->setWordWrap(true);
    stateNote_->setVisible(false);
    outer->addWidget(stateNote_);
    ending_ = new QLabel;
    ending_->setObjectName(QStringLiteral("answerEnding"));
    ending_->setAccessibleName(tr("How the answer ended"));
    ending_->setVisible(false);
    outer->addWidget(ending_);
    figures_ = new QLabel;
    figures_->setObjectName(QStringLiteral("answerFigures"));
    figures_->setWordWrap(true);
    figures_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    figures_->setForegroundRole(QPalette::PlaceholderText);
    outer->addWidget(figures_);
    versions_ = new VersionSwitcher;
    connect(versions_, &VersionSwitcher::versionChosen, this,
            [this](int number) { Q_EMIT versionRequested(message_.ordinal, number); });
    outer->addWidget(versions_);
    dividerAfter_ = divider(QStringLiteral("strategyDividerAfter"));
    outer->addWidget(dividerAfter_->parentWidget());

    reparse_.setSingleShot(true);
    reparse_.setInterval(kReparseMs);
    connect(&reparse_, &QTimer::timeout, this, &MessageView::render);
    setMessage(message);
}

void MessageView::setMessage(const MessageItem& message) {
    message_ = message;
    const QString f = TranscriptModel::figuresText(message.figures);
    figures_->setText(f);
    figures_->setVisible(!f.isEmpty());
    showEnding();
    render();
    showHistory();
}

void MessageView::showHistory() {
    versions_->setVersions(message_.versionShown, message_.versionCount);
    auto show = [](QLabel* l, const QStringList& changes) {
        l->setText(changes.join(QLatin1Char('\n')));
        l->setToolTip(tr("The conversation's cache strategy changed here"));
        l->parentWidget()->setVisible(!changes.isEmpty());
    };
    show(dividerBefore_, message_.strategyBefore);
    show(dividerAfter_, message_.strategyAfter);
}

void MessageView::startEditing() {
    if (editor_ || !actionsEnabled_) return;
    editor_ = new MessageEditor(message_.content, messagesAfter_);
    for (QWidget* w : segmentWidgets_) w->setVisible(false);
    body_->addWidget(editor_);
    edit_->setVisible(false);
    connect(editor_, &MessageEditor::cancelled, this, &MessageView::stopEditing);
    connect(editor_, &MessageEditor::saved, this, [this](const QString& text) {
        const int ordinal = message_.ordinal;
        stopEditing();
        Q_EMIT editRequested(ordinal, text);
    });
    editor_->textEdit()->setFocus();
    editor_->textEdit()->selectAll();
}

void MessageView::stopEditing() {
    if (!editor_) return;
    editor_->hide();
    editor_->deleteLater();
    editor_ = nullptr;
    for (QWidget* w : segmentWidgets_) w->setVisible(true);
    if (edit_) edit_->setVisible(true);
}

void MessageView::showRow(const MessageItem& m, MessageState state) {
    if (state == MessageState::Streaming) {
        if (!streaming_) startStreaming();
        if (m.content != message_.content) {
            message_.content = m.content;
            if (!reparse_.isActive()) reparse_.start();
        }
    } else if (streaming_) {
        finish(m);
    } else if (m.content != message_.content || m.repaired != message_.repaired ||
               TranscriptModel::figuresText(m.figures) != figures_->text() ||
               TranscriptModel::endingText(m.figures.stop_reason) != ending_->text()) {
        setMessage(m);
    } else {
        message_ = m;  // the same text, now stored (its id and time): nothing to parse again
        showHistory();
    }
    showState(state);
}

void MessageView::showEnding() {
    const QString e = TranscriptModel::endingText(message_.figures.stop_reason);
    ending_->setText(e);
    // An answer cut short (stopped, at its limit, context full) reads as finished otherwise: the
    // line is in the text's colour then, the ordinary end of turn in the quiet one.
    const bool cut = message_.figures.stop_reason && *message_.figures.stop_reason != StopReason::EndOfTurn &&
                     *message_.figures.stop_reason != StopReason::EndOfSequence;
    ending_->setForegroundRole(cut ? QPalette::WindowText : QPalette::PlaceholderText);
    ending_->setVisible(!e.isEmpty());
}

void MessageView::showState(MessageState state) {
    state_ = state;
    QString note;
    switch (state) {
        // A question being answered needs no note: its answer is right under it, and Edit waits.
        case MessageState::Stored:
        case MessageState::Sending:
        case MessageState::Streaming: break;
        case MessageState::Unanswered: note = tr("<i>Not answered. Regenerate (Ctrl+R) answers it.</i>"); break;
        case MessageState::Failed: note = tr("<i>This answer failed and was not saved.</i>"); break;
    }
    stateNote_->setText(note);
    stateNote_->setVisible(!note.isEmpty());
    stateNote_->setForegroundRole(QPalette::PlaceholderText);
    setActionsEnabled(state == MessageState::Stored || state == MessageState::Unanswered);
}

void MessageView::startStreaming() {
    streaming_ = true;
    setActionsEnabled(false);
}

void MessageView::appendText(const QString& piece) {
    message_.content += piece;
    if (!reparse_.isActive()) reparse_.start();
}

void MessageView::finish(const MessageItem& stored) {
    streaming_ = false;
    reparse_.stop();
    MessageItem m = stored;
    if (m.content.isEmpty() && m.id == 0) m.content = message_.content;  // nothing stored: keep what streamed
    setMessage(m);
    setActionsEnabled(true);
}

void MessageView::setActionsEnabled(bool enabled) {
    actionsEnabled_ = enabled;
    if (!enabled) stopEditing();
    versions_->setChoosingEnabled(enabled);
    if (edit_) edit_->setEnabled(enabled);
    if (branch_) branch_->setEnabled(enabled);
    if (regenerate_) regenerate_->setEnabled(enabled);
}

void MessageView::setRegenerateVisible(bool visible) {
    if (regenerate_) regenerate_->setVisible(visible);
}

namespace {

// A fenced code block: its language, a Copy code button and the code in a monospace font.
class CodeBlock : public QFrame {
public:
    CodeBlock() {
        setObjectName(QStringLiteral("codeBlock"));
        setFrameShape(QFrame::StyledPanel);
        setAutoFillBackground(true);
        setBackgroundRole(QPalette::Window);
        auto* v = new QVBoxLayout(this);
        v->setContentsMargins(6, 2, 6, 4);
        v->setSpacing(2);
        auto* h = new QHBoxLayout;
        language_ = new QLabel;
        language_->setObjectName(QStringLiteral("codeLanguage"));
        language_->setForegroundRole(QPalette::PlaceholderText);
        h->addWidget(language_);
        h->addStretch(1);
        auto* copy = new QToolButton;
        copy->setObjectName(QStringLiteral("copyCodeButton"));
        copy->setText(MessageView::tr("Copy code"));
        copy->setAccessibleName(MessageView::tr("Copy code"));
        copy->setAutoRaise(true);
        h->addWidget(copy);
        v->addLayout(h);
        code_ = new TextPiece;
        code_->setObjectName(QStringLiteral("codeText"));
        code_->setAccessibleName(MessageView::tr("Code"));
        code_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
        code_->setLineWrapMode(QTextEdit::WidgetWidth);
        code_->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
        v->addWidget(code_);
        connect(copy, &QToolButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(text_); });
    }
    void showSegment(const MarkdownSegment& s) {
        text_ = s.text;
        language_->setText(s.language);
        code_->show(s.text, false);
    }

private:
    QLabel* language_ = nullptr;
    TextPiece* code_ = nullptr;
    QString text_;
};

}  // namespace

QWidget* MessageView::makeSegmentWidget(const MarkdownSegment& s) {
    if (!s.code) {
        auto* t = new TextPiece;
        t->setObjectName(QStringLiteral("messageText"));
        t->setAccessibleName(tr("Message text"));
        return t;
    }
    return new CodeBlock;
}

void MessageView::updateSegmentWidget(QWidget* w, const MarkdownSegment& s) {
    ++parses_;
    if (!s.code) {
        // A line break in an answer is a line break, as chat apps show them (Markdown alone would
        // join the lines of a list without markers, or of a poem, into one paragraph).
        static_cast<TextPiece*>(w)->show(QString(s.text).replace(u'\n', QStringLiteral("  \n")), true);
        return;
    }
    static_cast<CodeBlock*>(w)->showSegment(s);
}

void MessageView::showThinking(bool has, const QString& thinking, bool answered) {
    if (!thinkingToggle_) return;
    thinkingToggle_->setVisible(has);
    thinkingToggle_->setText(answered || !streaming_ ? tr("Thinking") : tr("Thinking…"));
    thinkingToggle_->setAccessibleName(thinkingToggle_->text());
    if (!has) thinkingToggle_->setChecked(false);
    if (thinking != thinkingShown_) {
        static_cast<TextPiece*>(thinkingText_)->show(thinking, false);
        thinkingShown_ = thinking;
    }
}

void MessageView::render() {
    QString text = message_.content;
    if (message_.role == MessageRole::Assistant) {
        // The same split the chat template makes when it drops the reasoning from earlier answers.
        const ThinkingSplit split = split_thinking(text.toStdString());
        showThinking(split.has_thinking, QString::fromStdString(split.thinking), !split.answer.empty());
        if (split.has_thinking) text = QString::fromStdString(split.answer);
    }
    const bool cut = text.size() > kShownChars;
    if (cut) text.truncate(kShownChars);
    cutNote_->setVisible(cut);
    if (cut)
        cutNote_->setText(tr("<i>… %1 more characters not shown (Copy copies all of it)</i>")
                              .arg(number(message_.content.size() - kShownChars)));
    QList<MarkdownSegment> segs = split_markdown(text);
    if (message_.role != MessageRole::Assistant && !cut) {
        // What the user typed is shown as typed (Markdown), except that a message with no text
        // still shows an empty line.
        if (segs.isEmpty()) segs.push_back({});
    }
    for (qsizetype i = 0; i < segs.size(); ++i) {
        if (i < shown_.size() && shown_[i] == segs[i]) continue;
        if (i < shown_.size() && shown_[i].code != segs[i].code) {
            for (qsizetype j = i; j < segmentWidgets_.size(); ++j) {
                segmentWidgets_[j]->hide();
                segmentWidgets_[j]->deleteLater();
            }
            segmentWidgets_.resize(i);
            shown_.resize(i);
        }
        if (i >= segmentWidgets_.size()) {
            QWidget* w = makeSegmentWidget(segs[i]);
            body_->addWidget(w);
            segmentWidgets_.push_back(w);
        }
        updateSegmentWidget(segmentWidgets_[i], segs[i]);
    }
    for (qsizetype j = segs.size(); j < segmentWidgets_.size(); ++j) {
        segmentWidgets_[j]->hide();
        segmentWidgets_[j]->deleteLater();
    }
    segmentWidgets_.resize(std::min(segmentWidgets_.size(), segs.size()));
    shown_ = segs;
}

}  // namespace kvchat
