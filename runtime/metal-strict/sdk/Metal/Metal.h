// <Metal/Metal.h> of the strict bridge check (runtime/metal-strict/strict_check.ts): declarations
// of the Metal API mpsc_metal_bridge.mm uses, with the selectors, types, enum values and macOS
// availability of Apple's Metal documentation. API that first shipped in the macOS 15 SDK is
// declared only when MPSC_STRICT_SDK_VERSION >= 150000, as an older SDK lacks it.
// Declarations only; nothing is linked or run.
#pragma once
#include <stdint.h>
#include <Availability.h>
#include <Foundation/Foundation.h>

// ---- plain types ------------------------------------------------------------------------------
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize s = {width, height, depth};
  return s;
}

typedef enum : NSUInteger {
  MTLResourceCPUCacheModeDefaultCache = 0,
  MTLResourceStorageModeShared = 0 << 4,
  MTLResourceStorageModeManaged = 1 << 4,
  MTLResourceStorageModePrivate = 2 << 4,
  MTLResourceHazardTrackingModeUntracked = 1 << 8,
} MTLResourceOptions;

typedef enum : NSInteger {
  MTLGPUFamilyApple1 = 1001,
  MTLGPUFamilyApple6 = 1006,
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyApple8 = 1008,
  MTLGPUFamilyApple9 = 1009,
  MTLGPUFamilyMac2 = 2002,
  MTLGPUFamilyMetal3 = 5001,
} MTLGPUFamily;

typedef enum : NSUInteger {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
} MTLCommandBufferStatus;

typedef enum : NSUInteger {
  MTLDispatchTypeSerial = 0,
  MTLDispatchTypeConcurrent = 1,
} MTLDispatchType MPSC_SDK_MACOS(10.14);

typedef enum : NSUInteger {
  MTLBarrierScopeBuffers = 1 << 0,
  MTLBarrierScopeTextures = 1 << 1,
  MTLBarrierScopeRenderTargets = 1 << 2,
} MTLBarrierScope MPSC_SDK_MACOS(10.14);

typedef enum : NSUInteger {
  MTLLanguageVersion2_4 = (2 << 16) + 4,
  MTLLanguageVersion3_0 = (3 << 16) + 0,
  MTLLanguageVersion3_1 = (3 << 16) + 1,
} MTLLanguageVersion;

#if MPSC_STRICT_SDK_VERSION >= 150000
typedef enum : NSInteger {
  MTLMathModeSafe = 0,
  MTLMathModeRelaxed = 1,
  MTLMathModeFast = 2,
} MTLMathMode MPSC_SDK_MACOS(15.0);

typedef enum : NSInteger {
  MTLMathFloatingPointFunctionsFast = 0,
  MTLMathFloatingPointFunctionsPrecise = 1,
} MTLMathFloatingPointFunctions MPSC_SDK_MACOS(15.0);
#endif

// ---- objects ----------------------------------------------------------------------------------
@protocol MTLDevice;
@protocol MTLCommandBuffer;

@protocol MTLResource <NSObject>
@property (readonly) id<MTLDevice> device;
@end

@protocol MTLBuffer <MTLResource>
@property (readonly) NSUInteger length;
- (void*)contents __attribute__((objc_returns_inner_pointer));
@end

@protocol MTLFunction <NSObject>
@property (readonly) NSString* name;
@end

@protocol MTLLibrary <NSObject>
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end

@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger staticThreadgroupMemoryLength;
@end

@interface MTLCompileOptions : NSObject
@property (readwrite, nonatomic) BOOL fastMathEnabled MPSC_SDK_MACOS_DEPRECATED(10.11, 15.0);
#if MPSC_STRICT_SDK_VERSION >= 150000
@property (readwrite, nonatomic) MTLMathMode mathMode MPSC_SDK_MACOS(15.0);
@property (readwrite, nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions MPSC_SDK_MACOS(15.0);
#endif
@property (readwrite, nonatomic) MTLLanguageVersion languageVersion;
@end

@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope MPSC_SDK_MACOS(10.14);
@end

typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

@protocol MTLCommandBuffer <NSObject>
@property (readonly) MTLCommandBufferStatus status;
@property (readonly) NSError* error;
- (void)commit;
- (void)waitUntilCompleted;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)dispatchType MPSC_SDK_MACOS(10.14);
@end

@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end

@protocol MTLDevice <NSObject>
@property (readonly) NSString* name;
@property (readonly) BOOL hasUnifiedMemory MPSC_SDK_MACOS(10.15);
@property (readonly) uint64_t recommendedMaxWorkingSetSize MPSC_SDK_MACOS(10.12);
@property (readonly) NSUInteger currentAllocatedSize MPSC_SDK_MACOS(10.13);
@property (readonly) NSUInteger maxThreadgroupMemoryLength MPSC_SDK_MACOS(10.13);
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily MPSC_SDK_MACOS(10.15);
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void* pointer, NSUInteger length))deallocator;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(__autoreleasing NSError**)error;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL*)url error:(__autoreleasing NSError**)error MPSC_SDK_MACOS(10.13);
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                             error:(__autoreleasing NSError**)error;
@end

extern "C" {
id<MTLDevice> MTLCreateSystemDefaultDevice(void) __attribute__((ns_returns_retained));
// macOS only: every Metal device of the machine (the caller owns the array)
NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) __attribute__((ns_returns_retained)) MPSC_SDK_MACOS(10.11);
}
