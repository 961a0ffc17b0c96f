// The one assertion the fuzz harnesses use: a reader that accepted an input
// must uphold what its header promises (a round trip, a bound), and a
// broken promise is a finding, so it aborts with the reason where libFuzzer
// (and the corpus replay) will report it, in every build mode.
#ifndef TESSERA_FUZZ_FUZZ_CHECK_H_
#define TESSERA_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, what)                                              \
  do {                                                                           \
    if (!(condition)) {                                                          \
      std::fprintf(stderr, "%s:%d: broken invariant: %s\n", __FILE__, __LINE__, \
                   (what));                                                      \
      std::abort();                                                              \
    }                                                                            \
  } while (false)

#endif  // TESSERA_FUZZ_FUZZ_CHECK_H_
