// libmosquitto (Debian 12: 2.0.11) for AnnounceMQTT. Includes only: every call Swift needs is a plain function
// and callbacks are Swift @convention(c) closures, so no trampolines are needed.
#ifndef CMOSQUITTO_SHIM_H
#define CMOSQUITTO_SHIM_H

#include <mosquitto.h>

#endif
