// Calibration (DESIGN §5): link figures measured once per job and transport by one pair of
// ranks, within a fixed time budget, and shared through bootstrap so that every rank resolves
// its parameters from the same figures. A transport supplies the measurement; this file says
// who measures, how the outcome travels, and what every other rank does meanwhile.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/params.hpp"

namespace rmp::rt {

// Outcome of a calibration as every rank sees it.
struct Calibration {
  std::optional<LinkFigures> figures;  // set when measured
  std::string reason;                  // why not, when figures is empty
  double took_us = 0;                  // the measuring rank's time, bootstrap exchange excluded
};

// Wire form of a Calibration (a bootstrap value): "ok <bw> <rtt> <copy> <setup> <get> <took>" with
// hexadecimal floats (exact), or "no <took> <reason>".
std::vector<std::byte> encode_calibration(const Calibration& c);
// Throws rmp::Error(bootstrap) naming the text when it is not such a value.
Calibration decode_calibration(std::span<const std::byte> value);

// Shares one transport's calibration: the rank for which `publisher` is true runs `measure`
// (or takes `skip_reason` when not empty) and puts the outcome under `key`; every other rank
// runs `participate` (the publisher's partner measures there; others pass an empty function)
// and then reads the outcome, waiting for it up to `timeout`.
Calibration share_calibration(Bootstrap& boot, const std::string& key, bool publisher,
                              const std::string& skip_reason,
                              const std::function<Calibration()>& measure,
                              const std::function<void()>& participate,
                              std::chrono::milliseconds timeout);

}  // namespace rmp::rt
