// Factory of the `self` transport: messages a rank sends to itself.
#pragma once

#include <memory>

#include "runtime/stats.hpp"
#include "runtime/transport/transport.hpp"

namespace rmp::rt {

std::unique_ptr<Transport> make_self_transport(int my_rank, AmSink& sink);

}  // namespace rmp::rt
