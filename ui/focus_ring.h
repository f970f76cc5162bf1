#pragma once
// A visible keyboard focus: when Tab (or Shift+Tab, or a mnemonic) moves the focus, a ring in
// the palette's highlight colour is drawn just inside the widget that took it, whatever the
// style draws (some styles show nothing on a button, a list or the transcript). Focus taken by a
// click shows no ring, as browsers' :focus-visible does. One per application.
#include <QObject>
#include <QPointer>

class QWidget;

namespace kvchat {

class FocusRing : public QObject {
    Q_OBJECT
public:
    static constexpr int kWidth = 2;

    explicit FocusRing(QObject* parent = nullptr);
    ~FocusRing() override;

    // The ring now shown (null when none), and the widget it surrounds.
    QWidget* ring() const;
    QWidget* target() const { return target_; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void showOn(QWidget* w);
    void hide();

    QPointer<QWidget> target_;
    QPointer<QWidget> ring_;
};

}  // namespace kvchat
