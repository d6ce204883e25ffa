// Sharing a calibration through bootstrap (calibration.hpp).
#include "runtime/calibration.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <rmp/rmp.hpp>

namespace rmp::rt {

std::vector<std::byte> encode_calibration(const Calibration& c) {
  char buf[256];
  int n = 0;
  if (c.figures) {
    const LinkFigures& f = *c.figures;
    n = std::snprintf(buf, sizeof buf, "ok %a %a %a %a %a %a", f.bw_Bps, f.rtt_us, f.copy_bw_Bps,
                      f.rndv_setup_us, f.get_bw_Bps, c.took_us);
  } else {
    n = std::snprintf(buf, sizeof buf, "no %a %s", c.took_us, c.reason.c_str());
  }
  const std::size_t len = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof buf - 1);
  const auto* p = reinterpret_cast<const std::byte*>(buf);
  return {p, p + len};
}

Calibration decode_calibration(std::span<const std::byte> value) {
  const std::string text(reinterpret_cast<const char*>(value.data()), value.size());
  auto bad = [&]() -> Error {
    return Error(Errc::bootstrap, "calibration: malformed shared value '" + text + "'");
  };
  const char* p = text.c_str();
  char* end = nullptr;
  auto number = [&]() {
    const double v = std::strtod(p, &end);
    if (end == p) throw bad();
    p = end;
    return v;
  };
  Calibration c;
  if (text.starts_with("ok ")) {
    p += 3;
    LinkFigures f;
    f.bw_Bps = number();
    f.rtt_us = number();
    f.copy_bw_Bps = number();
    f.rndv_setup_us = number();
    f.get_bw_Bps = number();
    c.took_us = number();
    if (*p != '\0') throw bad();
    c.figures = f;
  } else if (text.starts_with("no ")) {
    p += 3;
    c.took_us = number();
    if (*p == ' ') ++p;
    c.reason = p;
  } else {
    throw bad();
  }
  return c;
}

Calibration share_calibration(Bootstrap& boot, const std::string& key, bool publisher,
                              const std::string& skip_reason,
                              const std::function<Calibration()>& measure,
                              const std::function<void()>& participate,
                              std::chrono::milliseconds timeout) {
  if (publisher) {
    Calibration c;
    if (skip_reason.empty()) c = measure();
    else c.reason = skip_reason;
    boot.put(key, encode_calibration(c));
    return c;
  }
  if (participate) participate();
  return decode_calibration(boot.get(key, timeout));
}

}  // namespace rmp::rt
