// Availability.h of the strict bridge check (runtime/metal-strict/strict_check.ts): the SDK
// version macros of Apple's <Availability.h> / <AvailabilityVersions.h>. The SDK version is
// chosen by the check (-DMPSC_STRICT_SDK_VERSION=150000 for the macOS 15 SDK); the deployment
// target comes from clang's --target (__ENVIRONMENT_MAC_OS_X_VERSION_MIN_REQUIRED__).
#pragma once
#ifndef MPSC_STRICT_SDK_VERSION
#error "define MPSC_STRICT_SDK_VERSION (e.g. 150000): the SDK version these declarations pretend to be"
#endif
#define __MAC_13_0 130000
#define __MAC_14_0 140000
#define __MAC_15_0 150000
#define MAC_OS_VERSION_13_0 130000
#define MAC_OS_VERSION_14_0 140000
#define MAC_OS_VERSION_15_0 150000
#define __MAC_OS_X_VERSION_MAX_ALLOWED MPSC_STRICT_SDK_VERSION
#define __MAC_OS_X_VERSION_MIN_REQUIRED __ENVIRONMENT_MAC_OS_X_VERSION_MIN_REQUIRED__
// API_AVAILABLE(macos(x)) / API_DEPRECATED, spelled as the clang attributes they expand to
#define MPSC_SDK_MACOS(v) __attribute__((availability(macos, introduced = v)))
#define MPSC_SDK_MACOS_DEPRECATED(v, d) __attribute__((availability(macos, introduced = v, deprecated = d)))
