/* Loading the C libraries on first use: the stubs of stubs.S call announce_lazy_resolve on a function's
 * first call. See include/CLazyLibraries.h. */
#include "CLazyLibraries.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One per function, laid out by stubs.S: where the stub keeps the address, the name, the library. */
struct announce_lazy_symbol {
    void **slot;
    const char *name;
    uintptr_t library;
};

static const char *const sonames[ANNOUNCE_LAZY_LIBRARIES] = {
#define LAZY_LIBRARY(index, soname) [index] = soname,
#define LAZY_SYMBOL(library, name)
#include "lazy-symbols.h"
#undef LAZY_LIBRARY
#undef LAZY_SYMBOL
};

#define LAZY_LIBRARY(index, soname)
#define LAZY_SYMBOL(library, name) extern const struct announce_lazy_symbol announce_lazy_symbol_##name;
#include "lazy-symbols.h"
#undef LAZY_LIBRARY
#undef LAZY_SYMBOL

static const struct announce_lazy_symbol *const symbols[] = {
#define LAZY_LIBRARY(index, soname)
#define LAZY_SYMBOL(library, name) &announce_lazy_symbol_##name,
#include "lazy-symbols.h"
#undef LAZY_LIBRARY
#undef LAZY_SYMBOL
};

static void *handles[ANNOUNCE_LAZY_LIBRARIES];

const char *announce_lazy_library_name(int library) {
    return library >= 0 && library < ANNOUNCE_LAZY_LIBRARIES ? sonames[library] : NULL;
}

/* The library's handle, loading it if needed (dlopen is thread-safe and counts references, so two threads
 * racing here both get the same handle). NULL with dlerror() set if it cannot be loaded. */
static void *handle(int library) {
    void *loaded = __atomic_load_n(&handles[library], __ATOMIC_ACQUIRE);
    if (loaded) return loaded;
    loaded = dlopen(sonames[library], RTLD_NOW | RTLD_LOCAL);
    if (loaded) __atomic_store_n(&handles[library], loaded, __ATOMIC_RELEASE);
    return loaded;
}

int announce_lazy_load(int library, char *error, size_t size) {
    if (library < 0 || library >= ANNOUNCE_LAZY_LIBRARIES) {
        if (size) snprintf(error, size, "no library %d", library);
        return -1;
    }
    if (handle(library)) return 0;
    if (size) snprintf(error, size, "%s", dlerror());
    return -1;
}

int announce_lazy_is_loaded(int library) {
    return library >= 0 && library < ANNOUNCE_LAZY_LIBRARIES && __atomic_load_n(&handles[library], __ATOMIC_ACQUIRE);
}

int announce_lazy_unload(int library, char *error, size_t size) {
    if (library < 0 || library >= ANNOUNCE_LAZY_LIBRARIES) {
        if (size) snprintf(error, size, "no library %d", library);
        return -1;
    }
    void *loaded = __atomic_exchange_n(&handles[library], NULL, __ATOMIC_ACQ_REL);
    if (!loaded) return 0;
    for (size_t index = 0; index < sizeof symbols / sizeof symbols[0]; index++) {
        if ((int)symbols[index]->library == library) __atomic_store_n(symbols[index]->slot, NULL, __ATOMIC_RELEASE);
    }
    if (dlclose(loaded) == 0) return 0;
    if (size) snprintf(error, size, "%s", dlerror());
    return -1;
}

/* Called by a stub at its function's first call (stubs.S saved the caller's argument registers). A library or
 * function that cannot be found ends the process with the reason: the packages depend on these libraries, so
 * this means a broken installation, and the function cannot be called. */
__attribute__((visibility("hidden"))) void *announce_lazy_resolve(const struct announce_lazy_symbol *symbol) {
    void *library = handle((int)symbol->library);
    void *address = library ? dlsym(library, symbol->name) : NULL;
    if (!address) {
        char message[512];
        int length = snprintf(message, sizeof message, "announce: cannot call %s from %s: %s\n", symbol->name,
                              sonames[symbol->library], dlerror());
        if (length > 0) (void)!write(2, message, (size_t)length < sizeof message ? (size_t)length : sizeof message - 1);
        abort();
    }
    __atomic_store_n(symbol->slot, address, __ATOMIC_RELEASE);
    return address;
}

int announce_lazy_check(int library, char *missing, size_t size) {
    if (announce_lazy_load(library, missing, size) != 0) return -1;
    int count = 0;
    for (size_t index = 0; index < sizeof symbols / sizeof symbols[0]; index++) {
        if ((int)symbols[index]->library != library) continue;
        dlerror();
        if (!dlsym(handles[library], symbols[index]->name)) {
            if (count == 0 && size) snprintf(missing, size, "%s", symbols[index]->name);
            count++;
        }
    }
    return count;
}

int announce_lazy_symbol_count(int library) {
    int count = 0;
    for (size_t index = 0; index < sizeof symbols / sizeof symbols[0]; index++) {
        if ((int)symbols[index]->library == library) count++;
    }
    return count;
}
