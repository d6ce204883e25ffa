// A minimal JSON reader for tests (no JSON library is a dependency): parses one value and
// flattens it to "path" → scalar text, e.g. {"a": {"b": 3}, "c": [true]} gives "a.b" → "3",
// "c.0" → "true"; strings are unescaped. Anything that is not valid JSON is reported with
// the offset where reading stopped, so a test can show what was wrong with a file.
#pragma once

#include <cctype>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace rmp::testing {

class MiniJson {
public:
  // The flattened value, or nullopt with error() saying where the text stopped being JSON.
  static std::optional<std::map<std::string, std::string>> parse(std::string_view text,
                                                                 std::string* error = nullptr) {
    MiniJson j(text);
    std::map<std::string, std::string> out;
    const bool ok = j.value("", out) && (j.ws(), j.i_ == text.size());
    if (ok) return out;
    if (error) *error = "not JSON at offset " + std::to_string(j.i_) + ": '" +
                        std::string(text.substr(j.i_, 20)) + "'";
    return std::nullopt;
  }

private:
  explicit MiniJson(std::string_view s) : s_(s) {}

  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  bool string(std::string& out) {
    if (!eat('"')) return false;
    for (; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (c == '"') return ++i_, true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i_ >= s_.size()) return false;
      switch (s_[i_]) {
        case '"': case '\\': case '/': out += s_[i_]; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u':  // kept as written: tests compare ASCII
          if (i_ + 4 >= s_.size()) return false;
          out += "\\u" + std::string(s_.substr(i_ + 1, 4));
          i_ += 4;
          break;
        default: return false;
      }
    }
    return false;
  }
  bool number(std::string& out) {
    ws();
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    const std::size_t digits = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == digits || (s_[digits] == '0' && i_ - digits > 1)) return false;
    if (i_ < s_.size() && s_[i_] == '.') {
      const std::size_t frac = ++i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ == frac) return false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      const std::size_t exp = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ == exp) return false;
    }
    out = std::string(s_.substr(start, i_ - start));
    return true;
  }
  bool value(const std::string& path, std::map<std::string, std::string>& out) {
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      if (eat('}')) return true;
      do {
        std::string key;
        if (!string(key) || !eat(':') || !value(join(path, key), out)) return false;
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      ++i_;
      if (eat(']')) return true;
      std::size_t n = 0;
      do {
        if (!value(join(path, std::to_string(n++)), out)) return false;
      } while (eat(','));
      return eat(']');
    }
    std::string scalar;
    if (c == '"') {
      if (!string(scalar)) return false;
    } else if (s_.substr(i_, 4) == "true" || s_.substr(i_, 4) == "null") {
      scalar = std::string(s_.substr(i_, 4)), i_ += 4;
    } else if (s_.substr(i_, 5) == "false") {
      scalar = "false", i_ += 5;
    } else if (!number(scalar)) {
      return false;
    }
    out[path] = scalar;
    return true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace rmp::testing
