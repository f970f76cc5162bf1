#pragma once
// The Models view (File → Models…, Ctrl+L, or a click on the model's name in the status bar): the
// models folder's files and the recently opened ones, each with its name, architecture,
// parameters, quantization, context length, size and vocabulary, the loaded one marked. A double
// click or Open asks the window to load one (through the engine's worker, as File → Open does);
// "Open file…" is the file dialog for anything else. The files' metadata is read on a thread of
// the view's own (ModelFileReader), so a long list never holds up the window; a file that cannot
// be read is listed with the reason.
#include <QDialog>
#include <QThread>

class QLabel;
class QPushButton;
class QTreeView;

namespace kvchat {

class ModelFileReader;
class ModelListModel;

class ModelsDialog : public QDialog {
    Q_OBJECT
public:
    explicit ModelsDialog(QWidget* parent = nullptr);
    ~ModelsDialog() override;

    // Lists `folder` and `recent` again and reads their files' metadata (in the background).
    void refresh(const QString& folder, const QStringList& recent);
    // The model the window has loaded (empty: none).
    void setLoadedModel(const QString& path);
    // Whether the list's files have all been read.
    bool reading() const { return reading_; }

    ModelListModel* files() const { return files_; }
    ModelFileReader* reader() const { return reader_; }  // lives on the view's own thread
    QTreeView* view() const { return view_; }
    QPushButton* openButton() const { return open_; }
    QLabel* details() const { return details_; }

Q_SIGNALS:
    void openRequested(const QString& path);
    void openFileRequested();
    // The metadata of every listed file has been read (for tests and tools).
    void listRead();

private:
    void openSelected();
    void updateSelection();
    void updateStatus();

    QThread thread_;
    ModelFileReader* reader_ = nullptr;
    ModelListModel* files_ = nullptr;
    QTreeView* view_ = nullptr;
    QLabel* status_ = nullptr;
    QLabel* details_ = nullptr;
    QPushButton* open_ = nullptr;
    QString folder_;
    bool reading_ = false;
};

}  // namespace kvchat
