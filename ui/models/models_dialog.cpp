#include "ui/models/models_dialog.h"

#include "ui/models/model_file_reader.h"
#include "ui/models/model_list_model.h"

#include <QDesktopServices>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QTreeView>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>

namespace kvchat {

namespace {

// A path as a user reads it: the home folder as ~.
QString shownPath(const QString& path) {
    const QString home = QDir::homePath();
    if (home.size() > 1 && (path == home || path.startsWith(home + '/'))) return '~' + path.mid(home.size());
    return QDir::toNativeSeparators(path);
}

}  // namespace

ModelsDialog::ModelsDialog(QWidget* parent) : QDialog(parent) {
    qRegisterMetaType<ModelFileItem>();
    qRegisterMetaType<QList<ModelFileItem>>();
    setObjectName(QStringLiteral("modelsDialog"));
    setWindowTitle(tr("Models"));
    resize(1240, 460);

    files_ = new ModelListModel(this);
    view_ = new QTreeView;
    view_->setObjectName(QStringLiteral("modelList"));
    view_->setAccessibleName(tr("Models"));
    view_->setModel(files_);
    view_->setRootIsDecorated(false);
    view_->setUniformRowHeights(true);
    view_->setAllColumnsShowFocus(true);
    view_->setAlternatingRowColors(true);
    view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    view_->setSelectionMode(QAbstractItemView::SingleSelection);
    // The figures take the room they need; a long name is cut (its whole text is in the
    // details below), and the last column takes what is left.
    view_->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view_->header()->setSectionResizeMode(ModelListModel::Name, QHeaderView::Interactive);
    view_->header()->resizeSection(ModelListModel::Name, 240);
    view_->header()->setStretchLastSection(true);
    // Double click or Enter opens the row.
    connect(view_, &QAbstractItemView::activated, this, &ModelsDialog::openSelected);
    connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &ModelsDialog::updateSelection);

    status_ = new QLabel;
    status_->setObjectName(QStringLiteral("modelsStatus"));
    status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    details_ = new QLabel;
    details_->setObjectName(QStringLiteral("modelDetails"));
    details_->setWordWrap(true);
    details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    details_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    details_->setMinimumHeight(details_->fontMetrics().lineSpacing() * 4);

    open_ = new QPushButton(tr("&Open"));
    open_->setObjectName(QStringLiteral("openModelButton"));
    open_->setDefault(true);
    open_->setEnabled(false);
    connect(open_, &QPushButton::clicked, this, &ModelsDialog::openSelected);
    auto* openFile = new QPushButton(tr("Open &file…"));
    openFile->setObjectName(QStringLiteral("openModelFileButton"));
    openFile->setToolTip(tr("A GGUF file or a Hugging Face folder from anywhere"));
    connect(openFile, &QPushButton::clicked, this, [this] {
        Q_EMIT openFileRequested();
        accept();
    });
    auto* showFolder = new QPushButton(tr("Show &models folder"));
    showFolder->setObjectName(QStringLiteral("showModelsFolderButton"));
    connect(showFolder, &QPushButton::clicked, this, [this] {
        QDir().mkpath(folder_);
        QDesktopServices::openUrl(QUrl::fromLocalFile(folder_));
    });
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    buttons->addButton(open_, QDialogButtonBox::AcceptRole);
    buttons->addButton(openFile, QDialogButtonBox::ActionRole);
    buttons->addButton(showFolder, QDialogButtonBox::ActionRole);
    // Open's own click handler does the opening; the box's accepted() is not connected.
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

    auto* v = new QVBoxLayout(this);
    v->addWidget(status_);
    v->addWidget(view_, 1);
    v->addWidget(details_);
    v->addWidget(buttons);

    reader_ = new ModelFileReader;
    reader_->moveToThread(&thread_);
    thread_.setObjectName(QStringLiteral("model files"));
    connect(&thread_, &QThread::finished, reader_, &QObject::deleteLater);
    connect(reader_, &ModelFileReader::found, this, [this](const QList<ModelFileItem>& files) {
        const QString selected = view_->currentIndex().data(ModelListModel::PathRole).toString();
        files_->setFiles(files);
        // Keep the selection on the same file across a refresh; else the loaded one.
        int row = files_->rowOf(selected);
        for (int r = 0; row < 0 && r < files_->rowCount(); ++r)
            if (files_->loaded(r)) row = r;
        if (row < 0 && files_->rowCount() > 0) row = 0;
        if (row >= 0) view_->setCurrentIndex(files_->index(row, 0));
        updateSelection();
        updateStatus();
    });
    connect(reader_, &ModelFileReader::read, this, [this](const ModelFileItem& file) {
        files_->updateFile(file);
        if (view_->currentIndex().data(ModelListModel::PathRole).toString() == file.path) updateSelection();
        updateStatus();
    });
    connect(reader_, &ModelFileReader::finished, this, [this] {
        reading_ = false;
        updateStatus();
        Q_EMIT listRead();
    });
    thread_.start();
    // The window the view was opened from gets the keyboard back (without a window manager,
    // nothing else would give it).
    connect(this, &QDialog::finished, this, [this] {
        if (parentWidget()) parentWidget()->activateWindow();
    });
}

ModelsDialog::~ModelsDialog() {
    // At most the file being read is finished; the rest of a scan is dropped.
    reader_->cancel();
    thread_.quit();
    thread_.wait();
}

void ModelsDialog::refresh(const QString& folder, const QStringList& recent) {
    folder_ = folder;
    reading_ = true;
    reader_->cancel();
    QMetaObject::invokeMethod(reader_, [r = reader_, folder, recent] { r->scan(folder, recent); }, Qt::QueuedConnection);
    updateStatus();
    view_->setFocus();  // arrows and Enter pick and open a model
}

void ModelsDialog::setLoadedModel(const QString& path) {
    files_->setLoadedPath(path);
    updateSelection();
}

void ModelsDialog::openSelected() {
    const QModelIndex current = view_->currentIndex();
    if (!current.isValid()) return;
    const int row = current.row();
    const ModelFileItem& f = files_->file(row);
    if (!f.read || !f.error.isEmpty() || !f.summary.architecture_supported || files_->loaded(row)) return;
    Q_EMIT openRequested(f.path);
    accept();
}

void ModelsDialog::updateSelection() {
    const QModelIndex current = view_->currentIndex();
    if (!current.isValid()) {
        open_->setEnabled(false);
        details_->clear();
        return;
    }
    const int row = current.row();
    const ModelFileItem& f = files_->file(row);
    const bool isLoaded = files_->loaded(row);
    open_->setEnabled(f.read && f.error.isEmpty() && f.summary.architecture_supported && !isLoaded);
    open_->setToolTip(isLoaded ? tr("This model is loaded") : QString());
    QStringList lines;
    lines << QStringLiteral("<b>%1</b>%2").arg(shownPath(f.path).toHtmlEscaped(), isLoaded ? tr(" — loaded") : QString());
    if (!f.read) {
        lines << tr("Reading its metadata…");
    } else if (!f.error.isEmpty()) {
        lines << tr("Cannot be read: %1").arg(f.error.toHtmlEscaped());
    } else {
        const ModelSummary& s = f.summary;
        const QLocale l;
        QString arch = QString::fromStdString(s.architecture).toHtmlEscaped();
        if (!s.architecture_supported) arch += tr(" (kvchat has no forward pass for it, so it cannot be opened)");
        lines << tr("%1 · %2 parameters in %3 layers · context %4 tokens · %5")
                     .arg(arch, ModelListModel::parametersText(s.parameters))
                     .arg(s.layers)
                     .arg(l.toString(static_cast<qulonglong>(s.context_length)), ModelListModel::sizeText(f.bytes));
        QString quant = s.file_type.empty() ? tr("weights %1").arg(QString::fromStdString(s.dominant_type))
                                            : tr("file type %1, most weights %2").arg(QString::fromStdString(s.file_type),
                                                                                       QString::fromStdString(s.dominant_type));
        QString vocab = ModelListModel::vocabularyText(s);
        if (!s.pre_tokenizer.empty()) vocab += tr(" (pre-tokenizer %1)").arg(QString::fromStdString(s.pre_tokenizer).toHtmlEscaped());
        lines << tr("%1 · vocabulary %2 · %3").arg(quant, vocab, s.chat_template ? tr("chat template") : tr("no chat template"));
    }
    details_->setText(lines.join(QStringLiteral("<br>")));
}

void ModelsDialog::updateStatus() {
    const int n = files_->rowCount();
    QString text;
    if (n == 0 && !reading_)
        text = tr("No models in %1 and no recent files. packaging/kvchat.sh model installs two; "
                  "Open file… opens any GGUF file.")
                   .arg(shownPath(folder_));
    else
        text = n == 1 ? tr("%1 — 1 model file").arg(shownPath(folder_))
                      : tr("%1 — %2 model files").arg(shownPath(folder_)).arg(n);
    if (reading_ && n > 0) text += tr(" · reading %1 of %2…").arg(std::min(files_->readCount() + 1, n)).arg(n);
    status_->setText(text);
}

}  // namespace kvchat
