// Whether a test binary is built with AddressSanitizer or ThreadSanitizer (CONVOY_TEST_SANITIZED):
// tests skip what the sanitizers' allocators forbid, or check a sample where instrumented code is slow.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CONVOY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CONVOY_TEST_SANITIZED 1
#endif
#endif
