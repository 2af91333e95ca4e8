// <dispatch/dispatch.h> of the strict bridge check: the libdispatch calls the bridge uses, as
// Apple documents them (dispatch_semaphore_create / _signal / _wait, dispatch_time). Under ARC
// dispatch objects are Objective-C objects (OS_OBJECT_USE_OBJC), as in the SDK.
#pragma once
#include <stdint.h>
#include <Availability.h>
#include <objc/NSObject.h>

@protocol OS_dispatch_object <NSObject>
@end
@protocol OS_dispatch_semaphore <OS_dispatch_object>
@end
typedef id<OS_dispatch_semaphore> dispatch_semaphore_t;
typedef uint64_t dispatch_time_t;
#define DISPATCH_TIME_NOW (0ull)
#define DISPATCH_TIME_FOREVER (~0ull)
#define NSEC_PER_SEC 1000000000ull

extern "C" {
dispatch_semaphore_t dispatch_semaphore_create(intptr_t value) __attribute__((ns_returns_retained));
intptr_t dispatch_semaphore_wait(dispatch_semaphore_t dsema, dispatch_time_t timeout);
intptr_t dispatch_semaphore_signal(dispatch_semaphore_t dsema);
dispatch_time_t dispatch_time(dispatch_time_t when, int64_t delta);
}
