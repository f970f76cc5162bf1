#pragma once
// ChatSettings as a value the worker's signals carry. Apart from engine_values.h because the
// engine's chat headers use the word `emit`, so only files built with QT_NO_KEYWORDS (the UI
// library, and suites that define it) may include this one.
#include "engine/chat/chat_settings.h"

#include <QMetaType>

Q_DECLARE_METATYPE(kvchat::ChatSettings)
