#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H
// libsystemd's daemon API: sd_notify, sd_watchdog_enabled, sd_listen_fds, sd_is_socket_unix.
// No trampolines needed: every function used is a plain (non-variadic) C function.
#include <systemd/sd-daemon.h>
#endif
