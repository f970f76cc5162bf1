#pragma once
// An error the API answers with: an HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}, so that clients written for OpenAI show it.
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace kvchat::api {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = {},
             std::string code = {})
        : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
          code_(std::move(code)) {}

    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }

    // The error object; param and code are null when empty, as OpenAI writes them.
    nlohmann::json body() const {
        nlohmann::json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
        if (!param_.empty()) e["param"] = param_;
        if (!code_.empty()) e["code"] = code_;
        return {{"error", e}};
    }

private:
    int status_;
    std::string type_, param_, code_;
};

// A 400 about one field of the request.
inline ApiError bad_field(const std::string& param, const std::string& message) {
    return ApiError(400, message, "invalid_request_error", param);
}

}  // namespace kvchat::api
