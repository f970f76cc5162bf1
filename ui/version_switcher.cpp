#include "ui/version_switcher.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>

namespace kvchat {

QToolButton* messageToolButton(const QString& text, const QString& objectName, const QString& tip) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setObjectName(objectName);
    b->setToolTip(tip);
    b->setAccessibleName(tip);
    b->setAutoRaise(true);
    return b;
}

VersionSwitcher::VersionSwitcher(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("versionSwitcher"));
    auto* h = new QHBoxLayout(this);
    h->setContentsMargins(0, 0, 0, 0);
    h->setSpacing(2);
    auto arrow = [&](const QString& text, const QString& name, const QString& tip) {
        auto* b = messageToolButton(text, name, tip);
        h->addWidget(b);
        return b;
    };
    previous_ = arrow(QStringLiteral("‹"), QStringLiteral("previousVersionButton"), tr("Previous version"));
    label_ = new QLabel;
    label_->setObjectName(QStringLiteral("versionLabel"));
    label_->setForegroundRole(QPalette::PlaceholderText);
    h->addWidget(label_);
    next_ = arrow(QStringLiteral("›"), QStringLiteral("nextVersionButton"), tr("Next version"));
    h->addStretch(1);
    connect(previous_, &QToolButton::clicked, this, [this] {
        if (shown_ > 1) Q_EMIT versionChosen(shown_ - 1);
    });
    connect(next_, &QToolButton::clicked, this, [this] {
        if (shown_ < count_) Q_EMIT versionChosen(shown_ + 1);
    });
    update();
}

void VersionSwitcher::setVersions(int shown, int count) {
    shown_ = shown;
    count_ = count;
    update();
}

void VersionSwitcher::setChoosingEnabled(bool enabled) {
    enabled_ = enabled;
    update();
}

void VersionSwitcher::update() {
    setVisible(count_ > 1);
    label_->setText(QStringLiteral("%1/%2").arg(shown_).arg(count_));
    label_->setAccessibleName(tr("Version %1 of %2").arg(shown_).arg(count_));
    previous_->setEnabled(enabled_ && shown_ > 1);
    next_->setEnabled(enabled_ && shown_ < count_);
}

}  // namespace kvchat
