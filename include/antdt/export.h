/* Symbol visibility for libantdt_comm. The shared library is built with hidden
 * visibility; only declarations marked ANTDT_API are exported, so the library
 * can be loaded (or preloaded) into any process without symbol clashes. */
#ifndef ANTDT_EXPORT_H
#define ANTDT_EXPORT_H
#if defined(__GNUC__) || defined(__clang__)
#define ANTDT_API __attribute__((visibility("default")))
#else
#define ANTDT_API
#endif
#endif
