// OpenSSL's libcrypto (Debian 12: 3.0; Debian 13: 3.5) for AnnounceCrypto: HMAC-SHA256 and HMAC-SHA1 (one-shot
// HMAC), SHA-256 (EVP digests) and the constant-time comparison. Includes only: every call Swift needs is a plain
// function. No library is named here: the executable loads libcrypto on the first call of one of its functions
// (Sources/CLazyLibraries), so announced and announce-ctl never load it.
#ifndef CCRYPTO_SHIM_H
#define CCRYPTO_SHIM_H

// OpenSSL 3's API only: whatever 3.0 deprecated (HMAC_CTX_*, SHA256_Init …) is not even declared.
#define OPENSSL_API_COMPAT 30000

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#endif
