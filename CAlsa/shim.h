#ifndef CALSA_SHIM_H
#define CALSA_SHIM_H
// libasound's public API, plus the two Linux headers the PCM wait loop needs (eventfd to wake the audio
// thread, poll to wait on the PCM's descriptors and that eventfd together). The *_alloca macros are
// deliberately not wrapped (their memory dies with an inline function); Swift uses *_malloc/*_free owned by
// classes. One trampoline: libasound's error handler.
#include <alsa/asoundlib.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/eventfd.h>

/// Where libasound's own error messages go once formatted (a Swift function; it must not call libasound).
typedef void (*CAlsa_ErrorSink)(const char *file, int line, const char *function, int err, const char *message);

// The sink in force: a function-local static, so that it lives in the one module that uses these functions.
static inline CAlsa_ErrorSink *CAlsa_errorSinkSlot(void) {
    static CAlsa_ErrorSink sink;
    return &sink;
}

// libasound reports errors through a printf-style variadic handler, which Swift cannot implement: format here.
static inline void CAlsa_errorTrampoline(const char *file, int line, const char *function, int err,
                                         const char *fmt, ...) {
    char message[512];
    va_list arguments;
    va_start(arguments, fmt);
    vsnprintf(message, sizeof message, fmt, arguments);
    va_end(arguments);
    CAlsa_ErrorSink sink = *CAlsa_errorSinkSlot();
    if (sink) sink(file, line, function, err, message);
}

// Sends libasound's error messages to `sink` instead of standard error (NULL: back to standard error).
static inline int CAlsa_setErrorSink(CAlsa_ErrorSink sink) {
    *CAlsa_errorSinkSlot() = sink;
    return snd_lib_error_set_handler(sink ? CAlsa_errorTrampoline : NULL);
}
#endif
