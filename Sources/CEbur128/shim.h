#ifndef CEBUR128_SHIM_H
#define CEBUR128_SHIM_H
#include <ebur128.h>
#endif
