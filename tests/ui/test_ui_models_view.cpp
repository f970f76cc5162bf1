// The Models view (File → Models…, Ctrl+L, a click on the status bar's model name): the models
// folder's files and the recent ones listed with what their metadata says, a broken file and a
// foreign architecture listed with the reason they cannot be opened, the loaded model marked; the
// metadata read on the view's own thread while the window goes on answering; a double click and
// the Open button load a model through the engine's worker.
#define QT_NO_KEYWORDS  // the engine's headers use the words "emit" and "slots"
#include "engine/chat/chat_settings.h"
#include "engine/model/model_path.h"
#include "engine/store/store.h"
#include "support/gguf_writer.h"
#include "support/tiny_model.h"
#include "support/ui_testing.h"
#include "ui/engine_worker.h"
#include "ui/main_window.h"
#include "ui/message_box.h"
#include "ui/models/model_list_model.h"
#include "ui/models/models_dialog.h"

#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QScopeGuard>
#include <QSemaphore>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeView>
#include <QtTest>

#include <atomic>
#include <fstream>
#include <memory>

using namespace kvchat;

class TestUiModelsView : public QObject {
    Q_OBJECT
    QTemporaryDir home_;
    QString folder_, alpha_, beta_, broken_, foreign_, elsewhere_, gone_;

    static int rowOf(ModelsDialog* d, const QString& path) { return d->files()->rowOf(path); }
    static QString cell(ModelsDialog* d, const QString& path, int column) {
        return d->files()->index(rowOf(d, path), column).data().toString();
    }
    // What a double click on a row sends: a click, then the double click on the same spot.
    static void doubleClick(ModelsDialog* d, const QString& path) {
        QTreeView* view = d->view();
        const QPoint at = view->visualRect(d->files()->index(rowOf(d, path), 0)).center();
        QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, at);
        QTest::mouseDClick(view->viewport(), Qt::LeftButton, {}, at);
    }
    static void select(ModelsDialog* d, const QString& path) {
        d->view()->setCurrentIndex(d->files()->index(rowOf(d, path), 0));
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(home_.isValid());
        test::useFreshProfile(home_.path());
        folder_ = QString::fromStdString(models_dir());
        QVERIFY(QDir().mkpath(folder_ + "/publisher"));
        // Two tiny models in the folder (one in a subfolder, as downloads often lay them out), a
        // file that is not a model, a model of an architecture kvchat cannot run, and a text file
        // that is not listed at all.
        test::TinyModelSpec a = test::chat_sized_spec(2);
        a.arch = "llama";
        a.n_ctx = 1024;
        alpha_ = folder_ + "/alpha-llama.gguf";
        test::write_tiny_gguf(a, alpha_.toStdString());
        test::TinyModelSpec b = test::chat_sized_spec(3);
        b.weight_type = TensorType::Q8_0;
        beta_ = folder_ + "/publisher/beta-gemma.gguf";
        test::write_tiny_gguf(b, beta_.toStdString());
        broken_ = folder_ + "/broken.gguf";
        std::ofstream(broken_.toStdString()) << "GGUF but then nothing a reader could use";
        test::TinyModelSpec f = test::chat_sized_spec(2);
        f.edit_gguf = [](test::GgufWriter& w) { w.set("general.architecture", test::gguf_string("rwkv7")); };
        foreign_ = folder_ + "/foreign-rwkv.gguf";
        test::write_tiny_gguf(f, foreign_.toStdString());
        std::ofstream((folder_ + "/README.txt").toStdString()) << "not a model";
        // Recent files: one elsewhere, one gone since, and the folder's alpha by another name.
        elsewhere_ = home_.path() + "/downloads/elsewhere.gguf";
        QVERIFY(QDir().mkpath(home_.path() + "/downloads"));
        test::write_tiny_gguf(a, elsewhere_.toStdString());
        gone_ = home_.path() + "/downloads/deleted.gguf";
        QSettings().setValue("models/recent", QStringList{elsewhere_, gone_, folder_ + "/../models/alpha-llama.gguf"});
    }

    void listsFilesAndOpensOneByClicking() {
        const QString db = home_.path() + "/db/kvchat.db";
        QDir().mkpath(QFileInfo(db).absolutePath());
        {
            Store store(db.toStdString());
            ChatSettings s;
            s.sampling.greedy = true;
            s.random_seed = false;
            s.max_new_tokens = 200;
            s.threads = 2;
            s.save(store);
        }
        WindowOptions o;
        o.databasePath = db;
        o.modelPath = beta_;
        o.restoreState = false;
        MainWindow w(o);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTRY_VERIFY_WITH_TIMEOUT(w.modelReady() && w.currentConversation() != 0, 60000);
        QCOMPARE(w.model().path, beta_);

        // A click on the model's name opens the view.
        auto* label = w.findChild<QLabel*>("modelLabel");
        QVERIFY(label);
        QTest::mouseClick(label, Qt::LeftButton);
        ModelsDialog* d = nullptr;
        QTRY_VERIFY((d = w.findChild<ModelsDialog*>("modelsDialog")) != nullptr && d->isVisible());
        QSignalSpy listRead(d, &ModelsDialog::listRead);
        QVERIFY(listRead.wait(30000));
        QVERIFY(!d->reading());

        // The rows: the folder's four model files (sorted), then the recent ones not among them.
        ModelListModel* m = d->files();
        QCOMPARE(m->rowCount(), 6);
        QStringList paths;
        for (int r = 0; r < m->rowCount(); ++r) paths << m->file(r).path;
        QCOMPARE(paths, QStringList({alpha_, broken_, foreign_, beta_, elsewhere_, gone_}));
        QCOMPARE(cell(d, alpha_, ModelListModel::Name), QString("tiny llama"));
        QCOMPARE(cell(d, alpha_, ModelListModel::File), QString("alpha-llama.gguf"));
        QCOMPARE(cell(d, alpha_, ModelListModel::Architecture), QString("llama"));
        QCOMPARE(cell(d, alpha_, ModelListModel::Context), QLocale().toString(1024));
        QCOMPARE(cell(d, alpha_, ModelListModel::Quantization), QString("F32"));
        QCOMPARE(cell(d, alpha_, ModelListModel::Vocabulary), QString("SentencePiece, %1").arg(QLocale().toString(384)));
        QCOMPARE(cell(d, alpha_, ModelListModel::Where), QString("models folder"));
        QCOMPARE(cell(d, beta_, ModelListModel::Architecture), QString("gemma3"));
        QCOMPARE(cell(d, beta_, ModelListModel::Quantization), QString("Q8_0"));
        QCOMPARE(cell(d, beta_, ModelListModel::Size),
                 QLocale().formattedDataSize(QFileInfo(beta_).size(), 1, QLocale::DataSizeIecFormat));
        QCOMPARE(cell(d, elsewhere_, ModelListModel::Where), QString("recent file"));
        QVERIFY2(cell(d, broken_, ModelListModel::Architecture).startsWith("cannot be read"),
                 qPrintable(cell(d, broken_, ModelListModel::Architecture)));
        QVERIFY(!m->file(rowOf(d, broken_)).error.isEmpty());
        QVERIFY(m->file(rowOf(d, gone_)).error.contains("no longer there"));
        QCOMPARE(cell(d, foreign_, ModelListModel::Architecture), QString("rwkv7 (not supported)"));
        // The loaded model is marked, and selected when the view opens.
        QVERIFY(m->index(rowOf(d, beta_), 0).data(ModelListModel::LoadedRole).toBool());
        QVERIFY(!m->index(rowOf(d, alpha_), 0).data(ModelListModel::LoadedRole).toBool());
        QCOMPARE(d->view()->currentIndex().row(), rowOf(d, beta_));
        QVERIFY(!d->openButton()->isEnabled());
        QVERIFY(d->details()->text().contains("loaded"));
        d->resize(1200, 420);
        QTest::qWait(50);
        QVERIFY(d->grab().save(test::screenshotDir() + "/models-view.png"));

        // The broken file and the foreign one cannot be opened: Open is off, the reason is shown,
        // and a double click does nothing.
        select(d, broken_);
        QVERIFY(!d->openButton()->isEnabled());
        const QString brokenError = m->file(rowOf(d, broken_)).error;
        QVERIFY2(d->details()->text().contains("Cannot be read: " + brokenError.toHtmlEscaped()), qPrintable(d->details()->text()));
        QVERIFY(m->index(rowOf(d, broken_), ModelListModel::Architecture).data(Qt::ToolTipRole).toString().contains(brokenError));
        select(d, foreign_);
        QVERIFY(!d->openButton()->isEnabled());
        QVERIFY(d->details()->text().contains("no forward pass"));
        doubleClick(d, foreign_);
        QVERIFY(d->isVisible());
        QCOMPARE(w.model().path, beta_);

        // A double click on alpha loads it (through the worker) and closes the view.
        QSignalSpy ready(&w, &MainWindow::modelReadyChanged);
        doubleClick(d, alpha_);
        QTRY_VERIFY(!d->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(w.model().path == alpha_ && w.modelReady(), 60000);
        QCOMPARE(label->text(), QFileInfo(alpha_).fileName());
        QVERIFY(m->index(rowOf(d, alpha_), 0).data(ModelListModel::LoadedRole).toBool());
        QVERIFY(!m->index(rowOf(d, beta_), 0).data(ModelListModel::LoadedRole).toBool());

        // Ctrl+L opens it again; the recent list now starts with alpha, which is still one row.
        QSignalSpy reread(d, &ModelsDialog::listRead);
        w.activateWindow();
        QTRY_VERIFY(w.isActiveWindow());
        QTest::keyClick(&w, Qt::Key_L, Qt::ControlModifier);
        QTRY_VERIFY(d->isVisible());
        QVERIFY(reread.wait(30000));
        QCOMPARE(m->rowCount(), 6);
        QCOMPARE(d->view()->currentIndex().row(), rowOf(d, alpha_));
        // Open on beta loads it back.
        select(d, beta_);
        QVERIFY(d->openButton()->isEnabled());
        QTest::mouseClick(d->openButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(w.model().path == beta_ && w.modelReady(), 60000);
        QVERIFY(!d->isVisible());

        // The metadata is read on the view's own thread: with its reader held at the list, the
        // window answers a message from start to end.
        struct Gate {
            QSemaphore release;
            std::atomic<bool> held{false};
            std::atomic<bool> onGuiThread{true};
        };
        auto gate = std::make_shared<Gate>();
        const auto letGo = qScopeGuard([gate] { gate->release.release(1); });
        QObject context;
        connect(d->reader(), &ModelFileReader::found, &context, [gate](const QList<ModelFileItem>&) {
            if (gate->held.exchange(true)) return;
            gate->onGuiThread = QThread::currentThread() == qApp->thread();
            gate->release.acquire();
        }, Qt::DirectConnection);
        QTest::mouseClick(label, Qt::LeftButton);
        QTRY_VERIFY(d->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(gate->held.load(), 20000);
        QVERIFY(!gate->onGuiThread.load());
        QVERIFY(d->reading());
        QSignalSpy answered(&w, &MainWindow::answerFinished);
        w.sendMessage("and now?");
        QVERIFY(answered.wait(120000));
        QVERIFY(d->reading());
        QSignalSpy last(d, &ModelsDialog::listRead);
        gate->release.release(1);
        QVERIFY(last.wait(30000));
        QCOMPARE(m->rowCount(), 6);
    }

    // An empty models folder and no recent files: the view says where models go.
    void emptyList() {
        ModelsDialog d;
        QSignalSpy listRead(&d, &ModelsDialog::listRead);
        d.refresh(home_.path() + "/no-models-here", {});
        d.show();
        QVERIFY(listRead.wait(60000));
        QCOMPARE(d.files()->rowCount(), 0);
        QVERIFY(!d.openButton()->isEnabled());
        QVERIFY(d.findChild<QLabel*>("modelsStatus")->text().contains("packaging/kvchat.sh model"));
    }
};

QTEST_MAIN(TestUiModelsView)
#include "test_ui_models_view.moc"
