// CHECK is for broken invariants only; expected failures return Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TACHYON_CHECK(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
