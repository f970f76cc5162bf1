#include "engine/store/records.h"

namespace kvchat {

std::string_view role_name(Role role) {
    switch (role) {
        case Role::System: return "system";
        case Role::User: return "user";
        case Role::Assistant: return "assistant";
    }
    return "user";
}

}  // namespace kvchat
