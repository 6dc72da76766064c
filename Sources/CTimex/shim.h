#ifndef CTIMEX_SHIM_H
#define CTIMEX_SHIM_H
/* glibc's sys/timex.h (adjtimex: whether the kernel's clock is synchronised), which the Glibc module leaves out. */
#include <sys/timex.h>
#endif
