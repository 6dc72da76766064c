#ifndef CBUILDINFO_H
#define CBUILDINFO_H

/* The commit the executable was built from: what scripts/build-info.sh wrote into build-commit.h before the
 * build (a git commit, "-dirty" if the tree had changes, or $ANNOUNCE_COMMIT), else "unknown". C, so that a new
 * commit recompiles one small file and not the Swift modules (a -Xcc define would change every module's
 * command line); the header is generated and not in git, so a clean checkout builds without it. */
const char *announce_build_commit(void);

#endif
