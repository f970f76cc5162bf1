#pragma once
// Progress lives with the engine's common parts (model loading reports it too); the chat code and
// the window include it from here.
#include "engine/common/progress.h"
