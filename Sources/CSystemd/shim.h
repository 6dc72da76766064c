#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H
// libsystemd's daemon API (sd_notify, sd_watchdog_enabled, sd_listen_fds, sd_is_socket_unix) and the journal's
// native protocol (sd_journal_sendv: fields as an iovec array, not the variadic sd_journal_send).
// No trampolines needed: every function used is a plain (non-variadic) C function.
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif
