#include "ui/models/model_file_reader.h"

#include "engine/error.h"

#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QSet>

namespace kvchat {

namespace {

bool isHuggingFaceFolder(const QString& dir) {
    return QFileInfo::exists(dir + QStringLiteral("/config.json")) &&
           !QDir(dir).entryList({QStringLiteral("*.safetensors")}, QDir::Files).isEmpty();
}

}  // namespace

// Two names of one file (a link to the models folder, a recent path spelled otherwise) are one row.
QString modelFileIdentity(const QString& path) {
    if (path.isEmpty()) return {};
    const QString canonical = QFileInfo(path).canonicalFilePath();
    return canonical.isEmpty() ? QDir::cleanPath(QFileInfo(path).absoluteFilePath()) : canonical;
}

QList<ModelFileItem> listModelFiles(const QString& folder, const QStringList& recent) {
    QList<ModelFileItem> out;
    QSet<QString> seen;
    auto add = [&](const QString& path, ModelFileItem::Origin origin) {
        const QString id = modelFileIdentity(path);
        if (seen.contains(id)) return;
        seen.insert(id);
        ModelFileItem item;
        item.path = path;
        item.identity = id;
        item.origin = origin;
        const QFileInfo info(path);
        item.bytes = info.isFile() ? info.size() : 0;
        out << item;
    };
    QStringList inFolder;
    if (!folder.isEmpty() && QFileInfo(folder).isDir()) {
        // Subfolders too: downloads often keep a publisher/model/file.gguf layout.
        QDirIterator it(folder, QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString path = it.next();
            const QFileInfo info = it.fileInfo();
            if ((info.isFile() && path.endsWith(QStringLiteral(".gguf"), Qt::CaseInsensitive)) ||
                (info.isDir() && isHuggingFaceFolder(path)))
                inFolder << path;
        }
    }
    inFolder.sort(Qt::CaseInsensitive);
    for (const QString& path : inFolder) add(path, ModelFileItem::Origin::ModelsFolder);
    for (const QString& path : recent) add(path, ModelFileItem::Origin::Recent);
    return out;
}

ModelFileItem readModelFile(ModelFileItem item) {
    item.read = true;
    if (!QFileInfo::exists(item.path)) {
        item.error = QObject::tr("The file is no longer there.");
        return item;
    }
    try {
        item.summary = summarise_model(item.path.toStdString());
        item.bytes = static_cast<qint64>(item.summary.file_bytes);
    } catch (const std::exception& e) {  // kvchat::Error, and bad_alloc on an absurd file
        item.error = QString::fromUtf8(e.what());
    }
    return item;
}

void ModelFileReader::scan(const QString& folder, const QStringList& recent) {
    const int generation = generation_.load();
    const QList<ModelFileItem> files = listModelFiles(folder, recent);
    Q_EMIT found(files);
    for (const ModelFileItem& file : files) {
        if (generation_.load() != generation) return;  // a newer scan replaces this one
        Q_EMIT read(readModelFile(file));
    }
    Q_EMIT finished();
}

}  // namespace kvchat
