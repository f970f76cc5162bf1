#pragma once
// A message's Markdown cut into pieces that are rendered separately: fenced code blocks (shown
// in a monospace frame with a Copy button) and the prose between them, itself cut at blank
// lines once a piece passes kProseChunk characters (at any line end past four times that). The cut points depend only on the text
// before them, so while an answer streams every piece but the last stays exactly as it was and
// only the last is parsed again: streaming costs the same per token however long the answer is.
#include <QList>
#include <QString>

namespace kvchat {

struct MarkdownSegment {
    bool code = false;
    QString language;  // of a code block ("" when the fence names none)
    QString text;      // prose: Markdown source; code: the code itself, without fences
    bool closed = true;  // a code block whose closing fence has not arrived yet is open
    bool operator==(const MarkdownSegment&) const = default;
};

inline constexpr qsizetype kProseChunk = 1024;

QList<MarkdownSegment> split_markdown(const QString& markdown);

}  // namespace kvchat
