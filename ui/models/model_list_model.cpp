#include "ui/models/model_list_model.h"

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QFont>
#include <QLocale>
#include <QPalette>
#include <QStyle>

namespace kvchat {

QString ModelListModel::parametersText(uint64_t n) {
    const QLocale l;
    if (n >= 1'000'000'000) return l.toString(n / 1e9, 'f', n >= 10'000'000'000 ? 0 : 1) + QStringLiteral(" B");
    if (n >= 1'000'000) return l.toString(n / 1e6, 'f', n >= 10'000'000 ? 0 : 1) + QStringLiteral(" M");
    if (n >= 1'000) return l.toString(n / 1e3, 'f', n >= 10'000 ? 0 : 1) + QStringLiteral(" K");
    return l.toString(static_cast<qulonglong>(n));
}

QString ModelListModel::quantizationText(const ModelSummary& s) {
    // The file type the file states names the mix (Q4_K_M); without one, the type most weights have.
    return s.file_type.empty() ? QString::fromStdString(s.dominant_type) : QString::fromStdString(s.file_type);
}

QString ModelListModel::vocabularyText(const ModelSummary& s) {
    if (s.vocabulary.empty() && s.vocabulary_size == 0) return tr("none stated");
    const QString kind = s.vocabulary.empty() ? tr("unknown kind") : QString::fromStdString(vocabulary_kind(s.vocabulary));
    return tr("%1, %2").arg(kind, QLocale().toString(static_cast<qulonglong>(s.vocabulary_size)));
}

QString ModelListModel::sizeText(qint64 bytes) { return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeIecFormat); }

QVariant ModelListModel::display(const ModelFileItem& f, int column) const {
    const ModelSummary& s = f.summary;
    const bool ok = f.read && f.error.isEmpty();
    switch (column) {
        case Name:
            return ok ? QString::fromStdString(s.name) : QFileInfo(f.path).fileName();
        case File: return QFileInfo(f.path).fileName();
        case Architecture:
            if (!f.read) return tr("reading…");
            if (!ok) return tr("cannot be read (see below)");  // the reason is long: the details and tooltip hold it
            return s.architecture_supported ? QString::fromStdString(s.architecture)
                                            : tr("%1 (not supported)").arg(QString::fromStdString(s.architecture));
        case Parameters: return ok ? parametersText(s.parameters) : QVariant();
        case Quantization: return ok ? quantizationText(s) : QVariant();
        case Context:
            return ok && s.context_length > 0 ? QLocale().toString(static_cast<qulonglong>(s.context_length)) : QVariant();
        case Size: return f.bytes > 0 ? sizeText(f.bytes) : QVariant();
        case Vocabulary: return ok ? vocabularyText(s) : QVariant();
        case Where: return f.origin == ModelFileItem::Origin::ModelsFolder ? tr("models folder") : tr("recent file");
        default: return {};
    }
}

QString ModelListModel::tooltip(const ModelFileItem& f) const {
    QString t = f.path;
    if (!f.error.isEmpty()) return t + "\n" + f.error;
    const ModelSummary& s = f.summary;
    if (f.read && !s.file_type.empty() && s.file_type != s.dominant_type)
        t += "\n" + tr("File type %1; most weights are %2").arg(QString::fromStdString(s.file_type),
                                                                   QString::fromStdString(s.dominant_type));
    return t;
}

QVariant ModelListModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= files_.size()) return {};
    const ModelFileItem& f = files_[index.row()];
    const bool isLoaded = loaded(index.row());
    switch (role) {
        case Qt::DisplayRole: return display(f, index.column());
        case Qt::ToolTipRole: return tooltip(f);
        case Qt::FontRole:
            if (isLoaded) {
                QFont bold;
                bold.setBold(true);
                return bold;
            }
            return {};
        case Qt::ForegroundRole:
            if (!f.error.isEmpty() && index.column() == Architecture) return QColor(0xc0, 0x30, 0x30);
            if (f.read && f.error.isEmpty() && !f.summary.architecture_supported && index.column() == Architecture)
                return QApplication::palette().color(QPalette::PlaceholderText);
            return {};
        case Qt::DecorationRole:
            if (index.column() != Name) return {};
            if (isLoaded) return QApplication::style()->standardIcon(QStyle::SP_DialogApplyButton);
            if (!f.error.isEmpty()) return QApplication::style()->standardIcon(QStyle::SP_MessageBoxWarning);
            return {};
        case Qt::AccessibleDescriptionRole:
            return isLoaded ? tr("loaded") : f.error;
        case Qt::TextAlignmentRole:
            if (index.column() == Parameters || index.column() == Context || index.column() == Size)
                return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
            return {};
        case PathRole: return f.path;
        case ErrorRole: return f.error;
        case LoadedRole: return isLoaded;
        case ReadRole: return f.read;
        default: return {};
    }
}

QVariant ModelListModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
        case Name: return tr("Name");
        case File: return tr("File");
        case Architecture: return tr("Architecture");
        case Parameters: return tr("Parameters");
        case Quantization: return tr("Quantization");
        case Context: return tr("Context");
        case Size: return tr("Size");
        case Vocabulary: return tr("Vocabulary");
        case Where: return tr("From");
        default: return {};
    }
}

void ModelListModel::setFiles(const QList<ModelFileItem>& files) {
    beginResetModel();
    files_ = files;
    endResetModel();
}

void ModelListModel::updateFile(const ModelFileItem& file) {
    const int row = rowOf(file.path);
    if (row < 0) return;
    files_[row] = file;
    Q_EMIT dataChanged(index(row, 0), index(row, ColumnCount - 1));
}

void ModelListModel::setLoadedPath(const QString& path) {
    loadedPath_ = path;
    loadedIdentity_ = modelFileIdentity(path);
    if (!files_.isEmpty()) Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int ModelListModel::rowOf(const QString& path) const {
    for (int r = 0; r < files_.size(); ++r)
        if (files_[r].path == path) return r;
    return -1;
}

bool ModelListModel::loaded(int row) const {
    return !loadedIdentity_.isEmpty() && files_[row].identity == loadedIdentity_;
}

int ModelListModel::readCount() const {
    int n = 0;
    for (const ModelFileItem& f : files_) n += f.read ? 1 : 0;
    return n;
}

}  // namespace kvchat
