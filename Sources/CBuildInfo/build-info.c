#include "CBuildInfo.h"

/* Written by scripts/build-info.sh (make, scripts/test.sh, the VM's build); absent in a clean checkout. */
#if __has_include("build-commit.h")
#include "build-commit.h"
#endif

#ifndef ANNOUNCE_BUILD_COMMIT
#define ANNOUNCE_BUILD_COMMIT "unknown"
#endif

const char *announce_build_commit(void) { return ANNOUNCE_BUILD_COMMIT; }
