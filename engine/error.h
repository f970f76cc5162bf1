#pragma once
// One exception type for everything the engine refuses: bad files, bad specs, bad input.
// The message always names the thing that was wrong (a path, a parameter, a tensor).
#include <stdexcept>
#include <string>

namespace kvchat {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A long step stopped because the user asked (see engine/common/progress.h); what it worked on
// is as it was before the step.
class Cancelled : public Error {
public:
    using Error::Error;
};

}  // namespace kvchat
