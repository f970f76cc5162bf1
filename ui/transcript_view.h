#pragma once
// The transcript: a view bound to a TranscriptModel that shows each row as a MessageView in a
// scrolling column. It follows the model's row signals: inserted and removed rows add and drop
// their views, a changed row updates only its own view (a streaming answer re-parses only itself),
// a reset builds the column again, a few messages per event-loop turn so that opening a long
// history never freezes the window. It never changes the model; Edit and Regenerate are
// requests the window answers.
#include <QList>
#include <QPointer>
#include <QScrollArea>

class QLabel;
class QVBoxLayout;

namespace kvchat {

class MessageView;
class TranscriptModel;

class TranscriptView : public QScrollArea {
    Q_OBJECT
public:
    explicit TranscriptView(QWidget* parent = nullptr);

    void setModel(TranscriptModel* model);
    TranscriptModel* model() const { return model_; }

    // The views built so far, one per row from the first.
    QList<MessageView*> messageViews() const { return views_; }
    // The view of the answer being streamed, when it is built.
    MessageView* streamingView() const;
    void setPlaceholder(const QString& text);

    // How many messages are built per event-loop turn when a history opens.
    static constexpr int kBuildBatch = 6;

Q_SIGNALS:
    void editRequested(int ordinal, const QString& content);
    void regenerateRequested();
    void versionRequested(int ordinal, int number);
    void branchRequested(int ordinal);

private:
    void rebuild();
    void buildMore();
    void insertViews(int first, int last);
    void removeViews(int first, int last);
    void updateViews(int first, int last);
    MessageView* makeView(int row);
    void updateRegenerate();
    void updatePlaceholder();

    QPointer<TranscriptModel> model_;
    QWidget* column_ = nullptr;
    QVBoxLayout* layout_ = nullptr;
    QLabel* placeholder_ = nullptr;
    QList<MessageView*> views_;  // rows 0 .. views_.size() - 1; later rows are still to be built
    bool following_ = true;
    int generation_ = 0;
};

}  // namespace kvchat
