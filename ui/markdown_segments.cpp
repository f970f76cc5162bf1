#include "ui/markdown_segments.h"

namespace kvchat {

namespace {

// A fence line: up to three spaces, then three or more ` or ~. Returns the fence (e.g. "```")
// and the info string; empty fence when the line is not one.
QString fence_of(QStringView line, QString* info) {
    qsizetype i = 0;
    while (i < line.size() && i < 3 && line[i] == u' ') ++i;
    if (i >= line.size() || (line[i] != u'`' && line[i] != u'~')) return {};
    const QChar c = line[i];
    qsizetype n = 0;
    while (i + n < line.size() && line[i + n] == c) ++n;
    if (n < 3) return {};
    if (info) *info = line.mid(i + n).trimmed().toString();
    return QString(n, c);
}

}  // namespace

QList<MarkdownSegment> split_markdown(const QString& markdown) {
    QList<MarkdownSegment> out;
    MarkdownSegment cur;
    QString openFence;
    auto flush_prose = [&] {
        if (!cur.text.trimmed().isEmpty()) out.push_back(cur);
        cur = {};
    };
    qsizetype pos = 0;
    while (pos < markdown.size()) {
        qsizetype end = markdown.indexOf(u'\n', pos);
        const bool complete = end >= 0;
        if (!complete) end = markdown.size();
        const QStringView line = QStringView(markdown).mid(pos, end - pos);
        pos = complete ? end + 1 : end;
        if (!openFence.isEmpty()) {
            QString info;
            const QString f = fence_of(line, &info);
            if (complete && !f.isEmpty() && f.size() >= openFence.size() && f[0] == openFence[0] && info.isEmpty()) {
                cur.closed = true;
                out.push_back(cur);
                cur = {};
                openFence.clear();
            } else {
                cur.text += line;
                if (complete) cur.text += u'\n';
            }
            continue;
        }
        QString info;
        const QString f = complete ? fence_of(line, &info) : QString();
        if (!f.isEmpty()) {
            flush_prose();
            openFence = f;
            cur.code = true;
            cur.closed = false;
            cur.language = info.section(u' ', 0, 0);
            continue;
        }
        if (complete && line.trimmed().isEmpty() && cur.text.size() >= kProseChunk) {
            flush_prose();
            continue;
        }
        cur.text += line;
        if (complete) cur.text += u'\n';
        // Prose without blank lines (a long list, lines of verse) is cut at a line end too.
        if (complete && cur.text.size() >= 4 * kProseChunk) flush_prose();
    }
    if (cur.code) {
        // An open block (still streaming, or never closed): what has arrived is its code.
        out.push_back(cur);
    } else {
        flush_prose();
    }
    // A code block's last newline belongs to the fence line after it.
    for (MarkdownSegment& s : out)
        if (s.code && s.text.endsWith(u'\n')) s.text.chop(1);
    return out;
}

}  // namespace kvchat
