#ifndef CINPUT_SHIM_H
#define CINPUT_SHIM_H
// The Linux input event interface (evdev) and the descriptors its reader waits on: inotify (device nodes coming
// and going), eventfd (a stop request), poll. The evdev ioctl requests are function-like macros and ioctl(2) is
// variadic, so Swift can call neither: each trampoline below issues one request and returns ioctl's result.
// Everything else (which devices, what a key press means) is in Swift (Sources/AnnounceInput).
#include <linux/input.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <time.h>

// EVIOCGNAME: the device's name, NUL-terminated within `length` bytes.
static inline int CInput_getName(int fd, char *name, unsigned length) {
    return ioctl(fd, EVIOCGNAME(length), name);
}

// EVIOCGBIT(type): the bit mask of the codes of event `type` the device reports (type 0: the event types).
static inline int CInput_getBits(int fd, unsigned type, unsigned char *bits, unsigned length) {
    return ioctl(fd, EVIOCGBIT(type, length), bits);
}

// EVIOCGID: bus, vendor, product and version, for the log.
static inline int CInput_getID(int fd, struct input_id *id) {
    return ioctl(fd, EVIOCGID, id);
}

// EVIOCSCLOCKID: stamp this reader's events with `clock` (CLOCK_MONOTONIC), the clock its timers run on.
static inline int CInput_setClock(int fd, int clock) {
    return ioctl(fd, EVIOCSCLOCKID, &clock);
}

// The seconds and microseconds of an event's time stamp: a plain struct timeval here, two fields behind macros
// on 32-bit systems with a 64-bit time_t.
static inline long long CInput_eventMicroseconds(const struct input_event *event) {
    return (long long)event->input_event_sec * 1000000LL + (long long)event->input_event_usec;
}
#endif
