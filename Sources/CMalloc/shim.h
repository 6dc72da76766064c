#ifndef CMALLOC_SHIM_H
#define CMALLOC_SHIM_H
/* glibc's malloc extensions (malloc_trim), which the Glibc module leaves out. */
#include <malloc.h>
#endif
