#pragma once
// The Models view's rows: one model file each (the models folder's, then the recent ones), with
// what its metadata says, or why it cannot be read, and which one is loaded. Changed only on the
// GUI thread, from the ModelFileReader's values.
#include "ui/models/model_file_reader.h"

#include <QAbstractTableModel>

namespace kvchat {

class ModelListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Name, File, Architecture, Parameters, Quantization, Context, Size, Vocabulary, Where, ColumnCount };
    enum Role { PathRole = Qt::UserRole + 1, ErrorRole, LoadedRole, ReadRole };

    using QAbstractTableModel::QAbstractTableModel;

    int rowCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : static_cast<int>(files_.size()); }
    int columnCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : ColumnCount; }
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    // A new list (a scan's found()): every row, not yet read.
    void setFiles(const QList<ModelFileItem>& files);
    // One file read: its row changes (a file no longer listed is ignored).
    void updateFile(const ModelFileItem& file);
    // The model the window has loaded (empty: none).
    void setLoadedPath(const QString& path);

    const ModelFileItem& file(int row) const { return files_[row]; }
    int rowOf(const QString& path) const;
    bool loaded(int row) const;
    int readCount() const;

    // The summary's figures as the view writes them (also for the details beside the table).
    static QString parametersText(uint64_t parameters);
    static QString quantizationText(const ModelSummary& s);
    static QString vocabularyText(const ModelSummary& s);
    static QString sizeText(qint64 bytes);

private:
    QVariant display(const ModelFileItem& f, int column) const;
    QString tooltip(const ModelFileItem& f) const;

    QList<ModelFileItem> files_;
    QString loadedPath_;
    QString loadedIdentity_;
};

}  // namespace kvchat
