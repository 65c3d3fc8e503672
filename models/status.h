// Errors as values for every Parallax library: a function that can fail on user input returns
// Result<T> (a value or one line that names the file, key or constraint at fault). Nothing in the
// libraries throws across a module border or prints; tools/ turns an error into exit code 2.
// It lives in models/, the lowest library, so every other library can use it.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace parallax {

struct Error {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Error error) : state_(std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  const T& value() const& { return std::get<0>(state_); }
  T& value() & { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const T& operator*() const { return value(); }
  // Precondition: !ok().
  const std::string& error() const { return std::get<1>(state_).message; }

 private:
  std::variant<T, Error> state_;
};

// For operations that return nothing but can fail.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : message_(std::move(error.message)), ok_(false) {}  // NOLINT
  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  const std::string& error() const { return message_; }

 private:
  std::string message_;
  bool ok_ = true;
};

}  // namespace parallax
