#pragma once
// Finds the model files the Models view lists (the models folder, the recent files) and reads
// each one's metadata (engine/model/model_summary.h), on a thread of its own: a folder of large
// files or a slow disk never holds up the window, and the engine's worker, busy with a turn, is
// not asked. Only reads; opening a model goes through EngineWorker::loadModel as before.
#include "engine/model/model_summary.h"

#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>

#include <atomic>

namespace kvchat {

// One row of the Models view.
struct ModelFileItem {
    enum class Origin { ModelsFolder, Recent };
    QString path;
    QString identity;  // the canonical path: two names of one file are one row
    Origin origin = Origin::ModelsFolder;
    bool read = false;  // the metadata was read (summary filled) or could not be (error set)
    QString error;      // why the file cannot be summarised, as the engine says
    ModelSummary summary;
    qint64 bytes = 0;   // the file's size, known before its metadata is read
};

class ModelFileReader : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;
    // Stops a scan in progress before its next file (callable from any thread); a scan asked for
    // after this runs in full.
    void cancel() { generation_.fetch_add(1); }

public Q_SLOTS:
    // Lists the .gguf files under `folder` (and Hugging Face folders in it), then the `recent`
    // paths not among them; emits found() with all of them, then read() for each in that order,
    // then finished().
    void scan(const QString& folder, const QStringList& recent);

Q_SIGNALS:
    void found(const QList<kvchat::ModelFileItem>& files);
    void read(const kvchat::ModelFileItem& file);
    void finished();

private:
    std::atomic<int> generation_{0};
};

// The canonical form of a path (what ModelFileItem::identity holds).
QString modelFileIdentity(const QString& path);
// The files a scan of `folder` and `recent` lists, not yet read (what scan() emits as found()).
QList<ModelFileItem> listModelFiles(const QString& folder, const QStringList& recent);
// The item with its metadata read, or the reason it cannot be.
ModelFileItem readModelFile(ModelFileItem item);

}  // namespace kvchat

Q_DECLARE_METATYPE(kvchat::ModelFileItem)
