// Request handles and the wait/test families.
#include <string>

#include <rmp/rmp.hpp>

#include "api/state.hpp"

namespace rmp {

namespace {
detail::Engine& engine_of(detail::RequestState* s) { return *s->engine; }

// A request still active when rmp was finalized: its state went with the engine, so the handle
// is let go (never touched) and the call throws, as Comm calls do after finalize.
Error finalized_error(const char* call) {
  return Error(Errc::invalid_comm,
               std::string(call) +
                   ": rmp is finalized; this request was still active then, and its status went "
                   "with rmp (finalize delivers sends still in flight; a receive is not "
                   "completed): wait for requests before the Environment ends");
}
[[noreturn, gnu::cold]] void throw_finalized(detail::RequestState*& state, const char* call) {
  state = nullptr;
  throw finalized_error(call);
}

// Whether any request of `reqs` is active; throws (letting the active ones go) after finalize.
bool any_active(std::span<Request> reqs, const char* call) {
  bool any = false;
  for (Request& r : reqs) any = any || r.active();
  if (any && api::process().finalized) {
    for (Request& r : reqs) r = Request();  // dropped, not released: see throw_finalized
    throw finalized_error(call);
  }
  return any;
}
}  // namespace

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    if (state_ && !api::process().finalized) engine_of(state_).release(state_);
    state_ = o.state_;
    o.state_ = nullptr;
  }
  return *this;
}

Request::~Request() {
  // Never blocks, never throws: an unmatched receive is cancelled, the rest completes in the
  // background (finalize drains detached sends).
  if (state_ && !api::process().finalized) engine_of(state_).release(state_);
}

Status Request::wait() {
  if (!state_) return Status{};
  if (api::process().finalized) [[unlikely]]
    throw_finalized(state_, "wait");
  detail::RequestState* s = state_;
  state_ = nullptr;  // released by wait(), even when it throws
  return engine_of(s).wait(s);
}

std::optional<Status> Request::test() {
  if (!state_) return Status{};
  if (api::process().finalized) [[unlikely]]
    throw_finalized(state_, "test");
  detail::RequestState* s = state_;
  // The engine takes the request unless it is incomplete: completed (or failed) it is released,
  // and so is one given up because an error ended the test (a failed peer, or one progress met).
  std::optional<Status> st;
  try {
    st = engine_of(s).test(s);
  } catch (...) {
    state_ = nullptr;
    throw;
  }
  if (st) state_ = nullptr;
  return st;
}

bool Request::cancel() {
  if (!state_) return false;
  if (api::process().finalized) [[unlikely]]
    throw_finalized(state_, "cancel");
  return engine_of(state_).cancel(state_);
}

void wait_all(std::span<Request> reqs) {
  std::optional<Error> first;
  for (Request& r : reqs) {
    try {
      r.wait();
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (first) throw *first;
}

std::size_t wait_any(std::span<Request> reqs, Status* st) {
  if (!any_active(reqs, "wait_any")) return reqs.size();
  detail::Engine* eng = nullptr;
  for (Request& r : reqs)
    if (r.active()) eng = r.state_for_internal_use()->engine;
  if (!eng) return reqs.size();
  std::size_t found = reqs.size();
  eng->progress_until([&] {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].active() && reqs[i].state_for_internal_use()->complete) {
        found = i;
        return true;
      }
    }
    return false;
  });
  Status s = reqs[found].wait();
  if (st) *st = s;
  return found;
}

bool test_all(std::span<Request> reqs) {
  if (!any_active(reqs, "test_all")) return true;
  detail::Engine* eng = nullptr;
  for (Request& r : reqs)
    if (r.active()) eng = r.state_for_internal_use()->engine;
  if (!eng) return true;
  eng->progress();
  for (Request& r : reqs) {
    if (r.active() && !eng->is_complete(r.state_for_internal_use())) {
      // A test loop ends when a peer fails; the requests stay the caller's (wait_all or their
      // destructors let them go).
      eng->throw_if_peer_failed_while_testing();
      return false;
    }
  }
  wait_all(reqs);
  return true;
}

}  // namespace rmp
