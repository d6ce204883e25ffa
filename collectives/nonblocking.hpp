// Non-blocking collectives: schedules of point-to-point rounds and local steps, advanced by
// the progress engine (p2p's Activity), so they overlap with point-to-point traffic, with
// each other and — with RMP_PROGRESS_THREAD=1 — with the application's computation.
#pragma once

#include <cstdint>
#include <memory>

#include <rmp/rmp.hpp>

#include "p2p/engine.hpp"

namespace rmp::coll {

std::unique_ptr<detail::Activity> ibarrier(std::shared_ptr<detail::CommImpl> c);
std::unique_ptr<detail::Activity> ibcast(std::shared_ptr<detail::CommImpl> c, void* buf,
                                         std::size_t bytes, int root);
// `in` == nullptr: in place (the input is `out`). Two schedules: a binomial reduce and
// broadcast for short vectors, Rabenseifner's for long ones, chosen by the blocking
// allreduce's formulas unless `schedule` names one (tests run both at every size).
enum class IallreduceSchedule : std::uint8_t { chosen, binomial, rabenseifner };
// The schedule `chosen` stands for, for `count` elements of `esize` bytes on `c`.
IallreduceSchedule iallreduce_schedule(const detail::CommImpl& c, std::size_t count,
                                       std::size_t esize);
std::unique_ptr<detail::Activity> iallreduce(
    std::shared_ptr<detail::CommImpl> c, const void* in, void* out, std::size_t count,
    std::size_t esize, detail::Type t, Op op,
    IallreduceSchedule schedule = IallreduceSchedule::chosen);

}  // namespace rmp::coll
