#pragma once
// ‹ 2/3 › under a message whose place has versions (a regenerated answer, an edited message):
// the arrows ask for the previous or next version; the window makes the change and shows it.
#include <QWidget>

class QLabel;
class QToolButton;

namespace kvchat {

// A small flat button of a message's controls (Edit, Branch, the version arrows...), named
// `objectName`; `tip` is its tooltip and its accessible name alike.
QToolButton* messageToolButton(const QString& text, const QString& objectName, const QString& tip);

class VersionSwitcher : public QWidget {
    Q_OBJECT
public:
    explicit VersionSwitcher(QWidget* parent = nullptr);

    // Version `shown` of `count` (hidden when there are fewer than two).
    void setVersions(int shown, int count);
    int shown() const { return shown_; }
    int count() const { return count_; }
    void setChoosingEnabled(bool enabled);

Q_SIGNALS:
    void versionChosen(int number);

private:
    void update();

    QToolButton* previous_ = nullptr;
    QToolButton* next_ = nullptr;
    QLabel* label_ = nullptr;
    int shown_ = 0;
    int count_ = 0;
    bool enabled_ = true;
};

}  // namespace kvchat
