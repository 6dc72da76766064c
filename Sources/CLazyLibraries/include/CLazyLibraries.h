#ifndef CLAZYLIBRARIES_H
#define CLAZYLIBRARIES_H

#include <stddef.h>

/* The C libraries the project calls are not linked as DT_NEEDED dependencies: the one executable holds three
 * programs, and loading every library any of them needs (about 40 with their own dependencies) cost each
 * `announce-ctl say` several milliseconds before it could send its request. Instead each function the
 * project calls (lazy-symbols.h) is a small stub in this target (stubs.S): its first call loads the library
 * (dlopen) and finds the function (dlsym); later calls jump straight to it. A program that knows it will need a
 * library loads it up front with announce_lazy_load, to get a readable error and no delay at first use. */

/* The libraries, in the order of lazy-symbols.h. */
enum {
    ANNOUNCE_LAZY_ASOUND = 0,
    ANNOUNCE_LAZY_SNDFILE = 1,
    ANNOUNCE_LAZY_SOXR = 2,
    ANNOUNCE_LAZY_EBUR128 = 3,
    ANNOUNCE_LAZY_ESPEAK = 4,
    ANNOUNCE_LAZY_SYSTEMD = 5,
    ANNOUNCE_LAZY_MOSQUITTO = 6,
    ANNOUNCE_LAZY_SQLITE = 7,
    ANNOUNCE_LAZY_CURL = 8,
    ANNOUNCE_LAZY_CRYPTO = 9,
    ANNOUNCE_LAZY_LIBRARIES = 10,
};

/* The file name (soname) of `library`, or NULL. */
const char *announce_lazy_library_name(int library);

/* Loads `library` now. 0 on success; else -1 with dlerror's text in `error` (`size` bytes). */
int announce_lazy_load(int library, char *error, size_t size);

/* Whether `library` has been loaded (by announce_lazy_load or a first call). */
int announce_lazy_is_loaded(int library);

/* Unloads `library` (dlclose) and forgets its functions' addresses: the next call of one loads it again. For a
 * library a long-running program needs only now and then (the daemon decodes its voice packs with libsndfile at
 * start and at a reload, and keeps none of it mapped in between). The caller makes sure that no thread is in one
 * of the library's functions or about to call one until this returns. 0 if it was unloaded or not loaded; -1
 * with dlerror's text in `error` (`size` bytes) if dlclose failed. */
int announce_lazy_unload(int library, char *error, size_t size);

/* Loads `library` and looks up every function listed for it. Returns how many are missing; the first one's
 * name (or the load error) goes to `missing`. For the tests. */
int announce_lazy_check(int library, char *missing, size_t size);

/* How many functions are listed for `library`. */
int announce_lazy_symbol_count(int library);

#endif
