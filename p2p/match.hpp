// MPI message matching as a unit: the posted-receive and unexpected-message queues of one
// communicator context, searched in arrival / posting order so that matching never overtakes
// (MPI 3.1 §3.5). The engine (engine.cpp) instantiates it with its request and
// unexpected-message records; the matching micro-benchmark instantiates it with records of
// its own. Header-only, no transport, no allocation: records are linked in place.
#pragma once

#include <cstddef>

#include <rmp/rmp.hpp>

namespace rmp::p2p {

// Whether a message from `src` with `tag` satisfies a receive for `want_src` / `want_tag`
// (either may be a wildcard).
inline bool matches(int want_src, int want_tag, int src, int tag) {
  return (want_src == any_source || want_src == src) && (want_tag == any_tag || want_tag == tag);
}

// Intrusive FIFO list (prev/next members); O(1) append and unlink.
template <class T>
struct Fifo {
  T* head = nullptr;
  T* tail = nullptr;
  std::size_t n = 0;
  void push_back(T* x) {
    x->next = nullptr;
    x->prev = tail;
    (tail ? tail->next : head) = x;
    tail = x;
    ++n;
  }
  void unlink(T* x) {
    (x->prev ? x->prev->next : head) = x->next;
    (x->next ? x->next->prev : tail) = x->prev;
    x->prev = x->next = nullptr;
    --n;
  }
};

// The two queues of one context. Posted: a receive record with `src` and `tag` it wants
// (wildcards allowed) and prev/next. Unexpected: a message record whose header `h` carries the
// sender's `src` and `tag` (p2p::EagerHeader), and prev/next.
template <class Posted, class Unexpected>
struct MatchQueues {
  Fifo<Posted> posted;
  Fifo<Unexpected> unexpected;
  // A posted receive was withdrawn (cancelled, its request dropped or given up): its message
  // may still come, so the context id is never given to another communicator.
  bool withdrawn = false;

  // The oldest unexpected message a receive for (src, tag) takes, or nullptr.
  Unexpected* find_unexpected(int src, int tag) const {
    for (Unexpected* u = unexpected.head; u; u = u->next)
      if (matches(src, tag, u->h.src, u->h.tag)) return u;
    return nullptr;
  }
  // The oldest posted receive an arriving message from (src, tag) satisfies, or nullptr.
  Posted* find_posted(int src, int tag) const {
    for (Posted* r = posted.head; r; r = r->next)
      if (matches(r->src, r->tag, src, tag)) return r;
    return nullptr;
  }
};

}  // namespace rmp::p2p
